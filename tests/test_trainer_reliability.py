"""The trainer under faults and reruns (issue 21), in-process on tiny fixture shards: a rerun after a
crash resumes with one logged point per step; the papers' recipes resume by default; time-based
checkpoints; an unreadable `latest` falls back to the previous checkpoint; the run folder's lock;
unfinished shard sets; a caption that is not UTF-8; `checkpoint.best_metric` typos; one-line
errors with exit 2 (input) or 3 (fault) for an unknown architecture, a missing pretrained file,
a full disk, an unreadable checkpoint, a read-only output folder and invalid YAML; what the run
prints (eval metrics on stderr, the last and best checkpoint last on stdout); the CLI."""
import json
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path

import pytest

from tests.fixtures.faults import after_step, no_step_faults
from tests.fixtures.trainer_data import train_in_process as run, write_fixture_shards
from tests.test_trainer import RECIPE as BASE_RECIPE, shards  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[1]
RECIPE = BASE_RECIPE.replace("keep_last: 1", "keep_last: 2")
PAPER_RECIPES = ["clip_ft", "negclip", "trohn_text", "trohn_img", "leftright"]


@pytest.fixture
def recipe(tmp_path, shards):
    path = tmp_path / "tiny.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    return path


@pytest.fixture
def fake_eval(monkeypatch):
    """Stands in for eval.api: two metrics of one benchmark `fake`, from the real scorer."""
    def evaluate(scorer, benchmarks, data_root, options, progress=True):
        from PIL import Image
        img = scorer.encode_images([Image.new("RGB", (32, 32), (200, 0, 0))])
        txt = scorer.encode_texts(["a red square", "a blue square"])
        sims = (img @ txt.T)[0]
        return {f"{b}/acc": float(sims[0] > sims[1]) for b in benchmarks} | {"fake/margin": float(sims[0] - sims[1])}

    module = types.ModuleType("compclip.eval.api")
    module.evaluate = evaluate
    monkeypatch.setitem(sys.modules, "compclip.eval.api", module)


def run_dir(tmp_path) -> Path:
    return tmp_path / "runs" / "tiny"


def last_error(capsys) -> str:
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("error: ")]
    assert len(lines) == 1, lines
    return lines[0]


def crash_at(monkeypatch, step: int) -> None:
    """The run stops (KeyboardInterrupt, as a kill would stop it) right after `step`."""
    def stop(at):
        raise KeyboardInterrupt
    after_step(step, stop, monkeypatch)


def run_stopped(argv) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt:  # before the CLI convention: the interrupt escaped main
        return 130


def scalar_steps(folder: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    return [e.step for e in events.Scalars(tag)]


# --- 1. reruns ------------------------------------------------------------------------------------

def test_rerun_after_a_crash_resumes_with_one_point_per_step(recipe, tmp_path, fake_eval, monkeypatch, capsys):
    """Killed after step 7 (checkpoints at 4 and 6, evaluations at 2, 4, 6): the rerun resumes at 6
    and eval.jsonl and TensorBoard hold each step once (before: 6 twice, train/loss 7 twice)."""
    args = [recipe, "eval.benchmarks=[fake]", "eval.data_root=/nowhere", "eval.every_n_steps=2",
            "checkpoint.every_n_steps=3", "checkpoint.resume=auto"]
    crash_at(monkeypatch, 7)
    assert run_stopped(args) == 130
    folder = run_dir(tmp_path)
    assert (folder / "checkpoints" / "latest").read_text().strip() == "step-0000006.pt"
    no_step_faults(monkeypatch)
    capsys.readouterr()
    assert run(args) == 0
    steps = [json.loads(l)["step"] for l in (folder / "eval.jsonl").read_text().splitlines()]
    assert steps == [2, 4, 6, 8]
    assert scalar_steps(folder, "eval/fake/acc") == [2, 4, 6, 8]
    assert scalar_steps(folder, "train/loss") == list(range(1, 9))
    assert "resumed from" in capsys.readouterr().err  # a note, on stderr


def test_paper_recipes_and_the_slurm_script_resume_by_default(repo_root):
    from compclip.trainer.recipe import load_recipe
    for name in PAPER_RECIPES:
        c = load_recipe(repo_root / "recipes" / f"{name}.yaml").checkpoint
        assert c.resume == "auto" and c.every_minutes > 0, name
    assert "checkpoint.resume=auto" in (repo_root / "launch" / "slurm_train.sh").read_text()


def test_time_based_checkpoints_mid_epoch(recipe, tmp_path):
    """every_minutes so small that every step is due: a checkpoint after each step (4 per epoch)."""
    assert run([recipe, "checkpoint.every_minutes=1.0e-9", "checkpoint.keep_last=10", "schedule.epochs=1"]) == 0
    names = sorted(p.name for p in (run_dir(tmp_path) / "checkpoints").glob("step-*.pt"))
    assert names == [f"step-000000{i}.pt" for i in (1, 2, 3, 4)]


def test_default_time_interval_writes_no_extra_checkpoint(recipe, tmp_path):
    assert run([recipe, "schedule.epochs=1"]) == 0
    assert [p.name for p in (run_dir(tmp_path) / "checkpoints").glob("step-*.pt")] == ["step-0000004.pt"]


def test_unreadable_latest_falls_back_to_the_previous_checkpoint(recipe, tmp_path, capsys):
    assert run([recipe]) == 0  # checkpoints at steps 4 and 8
    ckpts = run_dir(tmp_path) / "checkpoints"
    optimizer = next((ckpts / "step-0000008.state").glob("optimizer*.bin"))
    optimizer.write_bytes(optimizer.read_bytes()[:100])  # a torn file
    capsys.readouterr()
    assert run([recipe, "checkpoint.resume=auto", "schedule.epochs=3", "checkpoint.allow_recipe_change=true"]) == 0
    err = capsys.readouterr().err
    notes = [l for l in err.splitlines() if "checkpoint unusable" in l]
    assert len(notes) == 1 and str(optimizer) in notes[0] and "resuming from step-0000004.pt" in notes[0]
    assert "resumed from" in err and "(step 4, epoch 1)" in err
    assert (ckpts / "latest").read_text().strip() == "step-0000012.pt"
    assert (ckpts / "corrupt" / "step-0000008.pt").is_file()


def test_unreadable_checkpoint_without_fallback_is_named(recipe, tmp_path, capsys):
    assert run([recipe, "schedule.epochs=1"]) == 0
    ckpts = run_dir(tmp_path) / "checkpoints"
    weights = ckpts / "step-0000004.pt"
    weights.write_bytes(weights.read_bytes()[:1000])
    capsys.readouterr()
    assert run([recipe, "schedule.epochs=1", f"checkpoint.resume={run_dir(tmp_path)}"]) == 2
    err = last_error(capsys)
    assert f"checkpoint.resume: cannot resume: {weights} is not a readable torch file" in err
    assert run([recipe, "schedule.epochs=1", "checkpoint.resume=auto"]) == 2
    err = last_error(capsys)
    assert str(weights) in err and "no earlier usable checkpoint" in err


# --- the run folder's lock -----------------------------------------------------------------------

def write_lock(folder: Path, pid: int, started: float) -> Path:
    import socket
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.lock"
    path.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "started": started, "slurm_job": None}))
    return path


def test_a_second_run_in_the_folder_is_refused_naming_the_first(recipe, tmp_path, capsys):
    other = subprocess.Popen(["sleep", "60"])
    try:
        import psutil
        lock = write_lock(run_dir(tmp_path), other.pid, psutil.Process(other.pid).create_time())
        assert run([recipe, "checkpoint.resume=auto"]) == 2
        err = last_error(capsys)
        assert f"is in use by another run (pid {other.pid} on " in err and str(lock) in err
        assert not (run_dir(tmp_path) / "checkpoints").exists()
    finally:
        other.kill()
        other.wait()


def test_a_dead_runs_lock_is_taken_over_with_a_note(recipe, tmp_path, capsys):
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock = write_lock(run_dir(tmp_path), dead.pid, time.time() - 60)
    assert run([recipe, "schedule.epochs=1"]) == 0
    err = capsys.readouterr().err
    assert f"taking over the lock {lock} of a dead run (pid {dead.pid}" in err
    assert not lock.exists()  # released at the end


# --- 2. unfinished shard sets ----------------------------------------------------------------------

def unfinish(folder: Path, keep: int) -> None:
    """As a writer killed after `keep` shards leaves it: the manifest lists those, complete: false."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["shards"][keep:]:
        (folder / entry["name"]).unlink()
    manifest["shards"], manifest["complete"] = manifest["shards"][:keep], False
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_unfinished_shard_set_is_refused_unless_allowed(tmp_path, capsys):
    from compclip.shardset.schema import SchemaError
    from compclip.shardset.shards import verify_shard_set
    folder = write_fixture_shards(tmp_path / "part", n=64, per_shard=8, partner="generated")
    unfinish(folder, 5)
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(shards=folder, out=tmp_path / "runs"))
    assert run([path, "schedule.epochs=1"]) == 2
    err = last_error(capsys)
    assert str(folder) in err and "unfinished" in err and "rerun the command that wrote it" in err
    assert "data.allow_incomplete=true" in err
    assert run([path, "schedule.epochs=1", "data.allow_incomplete=true"]) == 0
    with pytest.raises(SchemaError, match="unfinished"):
        verify_shard_set(folder)
    assert verify_shard_set(folder, allow_incomplete=True)["shards"] == 5


# --- 4. a caption that is not UTF-8 ---------------------------------------------------------------

def break_captions(folder: Path, every: int = 16) -> None:
    """Rewrite the shards with the caption of every `every`-th sample as Latin-1 bytes (not UTF-8)."""
    import io
    for shard in sorted(folder.glob("*.tar")):
        with tarfile.open(shard) as tar:
            members = [(m, tar.extractfile(m).read()) for m in tar]
        with tarfile.open(shard, "w") as tar:
            for member, data in members:
                key, _, ext = member.name.partition(".")
                if ext == "txt" and int(key[1:]) % every == 3:
                    data = "une légende au café".encode("latin-1")
                    member.size = len(data)
                tar.addfile(member, io.BytesIO(data))


def test_a_caption_that_is_not_utf8_is_a_bad_sample(tmp_path, capsys):
    folder = write_fixture_shards(tmp_path / "latin", n=48, partner="generated")
    break_captions(folder)  # s00003, s00019, s00035: one in each shard
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(shards=folder, out=tmp_path / "runs"))
    assert run([path, "data.max_bad_fraction=0.5"]) == 0  # counted, skipped
    bad = scalar_steps(run_dir(tmp_path), "data/bad_samples")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run_dir(tmp_path) / "tensorboard"))
    events.Reload()
    assert bad and max(e.value for e in events.Scalars("data/bad_samples")) >= 1
    capsys.readouterr()
    assert run([path, "checkpoint.overwrite=true"]) == 3  # the default 1 % is exceeded: named, exit 3
    err = last_error(capsys)
    assert "sample 's000" in err and "member 'txt' is not UTF-8 text" in err and "max_bad_fraction" in err


# --- 5. checkpoint.best_metric -----------------------------------------------------------------------

def test_best_metric_typo_of_a_validation_metric_fails_before_training(recipe, tmp_path, capsys):
    assert run([recipe, "data.val_fraction=0.25", "checkpoint.best_metric=val/i2t_ac"]) == 2
    err = last_error(capsys)
    assert "checkpoint.best_metric 'val/i2t_ac'" in err and "close: val/i2t_acc" in err
    assert run([recipe, "checkpoint.best_metric=val/i2t_acc"]) == 2  # no validation data
    assert "produces no metric" in last_error(capsys)
    assert run([recipe, "eval.benchmarks=[fake]", "eval.data_root=/x", "checkpoint.best_metric=eval/fak/margin"]) == 2
    assert "close: eval/fake" in last_error(capsys)
    assert not run_dir(tmp_path).exists()


def test_best_metric_typo_of_a_benchmark_metric_stops_at_the_first_evaluation(recipe, tmp_path, fake_eval, capsys):
    assert run([recipe, "eval.benchmarks=[fake]", "eval.data_root=/x", "checkpoint.best_metric=eval/fake/margn"]) == 2
    err = last_error(capsys)
    assert "checkpoint.best_metric 'eval/fake/margn'" in err and "close: eval/fake/margin" in err
    assert "checkpoint of step 4 is kept" in err
    ckpts = run_dir(tmp_path) / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step-0000004.pt"
    assert not (run_dir(tmp_path) / "run.lock").exists()
    # fixed, the rerun evaluates the pending epoch first and writes `best`
    assert run([recipe, "eval.benchmarks=[fake]", "eval.data_root=/x", "checkpoint.best_metric=eval/fake/margin",
                "checkpoint.resume=auto"]) == 0
    assert (ckpts / "best").is_file()


# --- one-line errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("override, exit_code, words", [
    ("model.arch=ViT-B-23", 2, ["model.arch 'ViT-B-23': unknown architecture 'ViT-B-23'; did you mean ", "ViT-B-32"]),
    ("model.pretrained=/nowhere/weights.pt", 2, ["model.pretrained '/nowhere/weights.pt': ", "no such checkpoint"]),
    ("model.pretrained=opena", 2, ["model.pretrained 'opena': ", "neither a file nor an open_clip tag of 'micro-vit-32'"]),
])
def test_model_errors_are_one_line_before_anything_is_built(recipe, tmp_path, capsys, override, exit_code, words):
    assert run([recipe, override]) == exit_code
    err = last_error(capsys)
    assert all(w in err for w in words), err
    assert not run_dir(tmp_path).exists()


def test_invalid_yaml_names_the_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nmodel: {arch: micro-vit-32}\noptim:\n  lr: [1, 2\nschedule: {epochs: 1}\n")
    assert run([path]) == 2
    err = last_error(capsys)
    assert f"{path}: line " in err and "not valid YAML" in err


def test_disk_full_during_a_checkpoint_is_one_line_and_keeps_the_previous(recipe, tmp_path, capsys, monkeypatch):
    """torch's writer reports a full disk as an enforce failure that never says "space"; the disk
    is full (disk_usage reports 1 MiB free) once the first checkpoint is complete."""
    import shutil as shutil_module

    import torch
    from compclip.trainer import checkpointing
    ckpts = run_dir(tmp_path) / "checkpoints"
    real_save, real_usage = torch.save, shutil_module.disk_usage

    def full(*args, **kwargs):
        if (ckpts / "latest").is_file():
            raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing "
                               "file data/12: file write failed")
        return real_save(*args, **kwargs)

    def usage(path):
        total, used, free = real_usage(path)
        return type(real_usage(path))(total, used, 1 << 20) if (ckpts / "latest").is_file() else real_usage(path)

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(checkpointing.shutil, "disk_usage", usage)
    monkeypatch.setattr(checkpointing, "check_space", lambda *a: None)  # the write itself must fail
    assert run([recipe]) == 3
    err = last_error(capsys)
    assert err.startswith("error: no space left on device writing ") and str(ckpts) in err
    assert (ckpts / "latest").read_text().strip() == "step-0000004.pt"
    assert not list(ckpts.glob(".*tmp")) and not (ckpts / "step-0000008.state").exists()
    monkeypatch.undo()
    assert checkpointing.checkpoint_problem(ckpts / "step-0000004.pt") is None


def test_too_little_space_for_the_next_checkpoint_is_found_before_writing(recipe, tmp_path, capsys, monkeypatch):
    import shutil as shutil_module
    from compclip.trainer import checkpointing
    ckpts = run_dir(tmp_path) / "checkpoints"
    real_usage = shutil_module.disk_usage

    def usage(path):
        total, used, free = real_usage(path)
        return type(real_usage(path))(total, used, 4096 if (ckpts / "latest").is_file() else free)

    monkeypatch.setattr(checkpointing.shutil, "disk_usage", usage)
    assert run([recipe]) == 3
    err = last_error(capsys)
    assert "no space left on device writing" in err and "MiB free" in err and "step-0000004.pt is intact" in err
    assert (ckpts / "latest").read_text().strip() == "step-0000004.pt"


def test_read_only_output_folder_is_found_in_pre_flight(recipe, tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    if subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        assert run([recipe]) == 2
        err = last_error(capsys)
        assert f"logging.output_dir: cannot write in {out}" in err
    finally:
        subprocess.run(["chattr", "-i", str(out)])


# --- what the run prints ------------------------------------------------------------------------------

def test_eval_metrics_on_stderr_and_checkpoints_last_on_stdout(recipe, tmp_path, fake_eval, capsys):
    assert run([recipe, "eval.benchmarks=[fake]", "eval.data_root=/x", "checkpoint.best_metric=eval/fake/margin",
                "schedule.warmup_steps=100"]) == 0
    out, err = capsys.readouterr()
    assert "warning: schedule.warmup_steps=100 is longer than the run (8 steps)" in err
    assert [l.split(":")[0] for l in err.splitlines() if l.startswith("eval step")] == [
        "eval step 4 (epoch 1)", "eval step 8 (epoch 2)"]
    assert "fake/margin " in err
    ckpts = run_dir(tmp_path) / "checkpoints"
    last, best = out.strip().splitlines()[-2:]
    assert last == f"last checkpoint: {ckpts / 'step-0000008.pt'}"
    assert best.startswith(f"best checkpoint: {ckpts / (ckpts / 'best').read_text().strip()} (eval/fake/margin ")


# --- the CLI --------------------------------------------------------------------------------------------

def test_python_m_trainer_is_train_py_and_help_is_fast(recipe):
    times, outputs = [], []
    for argv in (["-m", "compclip.trainer"], ["trainer/train.py"]):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout)
    assert max(times) < 2.0, times
    assert outputs[0] == outputs[1] and "(default: False)" in outputs[0] and "--check" in outputs[0]
    check = subprocess.run([sys.executable, "-m", "compclip.trainer", str(recipe), "--check"], cwd=ROOT,
                           capture_output=True, text=True)
    assert check.returncode == 0 and "pre-flight checks passed" in check.stderr, check.stderr


def test_model_arch_may_be_left_to_a_compclip_checkpoint(recipe, tmp_path):
    """Finetuning from an earlier run: `model.pretrained` its run folder, `model.arch` null (the
    sidecar names it); resuming may name the checkpoint by its pointer file."""
    assert run([recipe, "schedule.epochs=1"]) == 0
    assert run([recipe, "schedule.epochs=1", f"model.pretrained={run_dir(tmp_path)}", "model.arch=null",
                "logging.run_name=second"]) == 0
    second = tmp_path / "runs" / "second" / "checkpoints"
    meta = json.loads((second / "step-0000004.json").read_text())
    assert meta["arch"] == "micro-vit-32" and meta["pretrained"] == str(run_dir(tmp_path))
    assert run([recipe, "schedule.epochs=2", f"checkpoint.resume={second / 'latest'}", "logging.run_name=second",
                f"model.pretrained={run_dir(tmp_path)}", "model.arch=null", "checkpoint.allow_recipe_change=true"]) == 0
    assert (second / "latest").read_text().strip() == "step-0000008.pt"
