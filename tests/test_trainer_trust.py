"""What the trainer reads and writes can be trusted (issue "trust"), in-process on tiny fixture shards:
resuming never runs code from a checkpoint's pickles (a payload in each kind of pickled state file
is refused unread; the earlier state format is still read, safely); weights with NaN / inf values
are never written and a `latest` holding them is fallen back from; a resume with a recipe that
trains differently is refused naming every change (unless `checkpoint.allow_recipe_change`, which
then takes the new values and records them); fp16 on CPU says it runs fp32; written files honour
the umask; a failed first checkpoint does not claim an intact previous one; an open_clip tag whose
weights are not cached is refused in pre-flight when offline; an image above datagen's pixel limit
is a bad sample, never decoded."""
import io
import json
import os
import random
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from tests.fixtures.faults import after_step, no_step_faults
from tests.fixtures.trainer_data import train_in_process as run, write_fixture_shards
from tests.test_trainer import RECIPE as BASE_RECIPE, shards  # noqa: F401 (a fixture)

RECIPE = BASE_RECIPE.replace("keep_last: 1", "keep_last: 2")


def _touch(path):
    Path(path).touch()


class Payload:
    """A pickle that creates `marker` when it is unpickled by a loader that runs code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (_touch, (self.marker,))


def write_recipe(tmp_path, shards) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory, shards):
    """A finished 2-epoch run (checkpoints at steps 4 and 8), copied by each test that needs one."""
    tmp = tmp_path_factory.mktemp("finished")
    assert run([write_recipe(tmp, shards)]) == 0
    return tmp / "runs" / "tiny"


@pytest.fixture
def recipe(tmp_path, shards):
    return write_recipe(tmp_path, shards)


@pytest.fixture
def copied(tmp_path, finished, recipe):
    """This test's copy of the finished run, and its recipe."""
    shutil.copytree(finished, tmp_path / "runs" / "tiny")
    return tmp_path / "runs" / "tiny" / "checkpoints", recipe


def errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]


def crash_at(monkeypatch, step: int) -> None:
    def stop(at):
        raise KeyboardInterrupt
    after_step(step, stop, monkeypatch)


def stopped(argv) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt:
        return 130


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


# --- S1: no code runs on resume -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin"])
def test_a_payload_in_a_state_file_is_never_run(copied, tmp_path, capsys, name):
    """Each pickled file kind of a state folder: the checkpoint holding a payload is set aside with a
    note and the run resumes from the earlier one; the payload never runs."""
    ckpts, recipe = copied
    marker = tmp_path / "marker"
    torch.save({"state": Payload(marker)}, ckpts / "step-0000008.state" / name)
    capsys.readouterr()
    code = run([recipe, "checkpoint.resume=auto"])
    assert not marker.exists()
    assert code == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("note: checkpoint unusable: ")]
    assert len(notes) == 1, err
    assert f"{ckpts / 'step-0000008.state' / name} does not load with torch.load(weights_only=True)" in notes[0]
    assert "resuming from step-0000004.pt" in notes[0] and "(step 4, epoch 1)" in err
    assert (ckpts / "corrupt" / "step-0000008.state" / name).is_file()


def test_a_payload_without_an_earlier_checkpoint_stops_in_one_line(copied, tmp_path, capsys):
    ckpts, recipe = copied
    marker = tmp_path / "marker"
    torch.save({"state": Payload(marker)}, ckpts / "step-0000008.state" / "random_states_0.pkl")
    assert run([recipe, f"checkpoint.resume={ckpts / 'step-0000008.pt'}"]) == 2
    assert not marker.exists()
    (line,) = errors(capsys)
    state = ckpts / "step-0000008.state"
    assert line.startswith(f"error: checkpoint.resume: cannot resume: {state / 'random_states_0.pkl'} does not load")


def to_earlier_format(state: Path) -> None:
    """Rewrite a state folder as the trainer wrote it before trainer_state.json: the scheduler and the
    TrainState as accelerate's custom objects 0 and 1 (torch.save'd state dicts)."""
    saved = json.loads((state / "trainer_state.json").read_text())
    streams = saved["train_state"]["streams"]
    saved["train_state"]["streams"] = {int(k): v for k, v in streams.items()}
    saved["train_state"].pop("recipe_changes")
    torch.save(saved["scheduler"], state / "custom_checkpoint_0.pkl")
    torch.save(saved["train_state"], state / "custom_checkpoint_1.pkl")
    (state / "trainer_state.json").unlink()


def test_the_earlier_state_format_resumes_bit_identically_and_safely(finished, tmp_path, shards, monkeypatch, capsys):
    recipe = write_recipe(tmp_path, shards)
    crash_at(monkeypatch, 6)
    assert stopped([recipe, "checkpoint.every_n_steps=5"]) == 130  # checkpoints at steps 4 and 5
    ckpts = tmp_path / "runs" / "tiny" / "checkpoints"
    to_earlier_format(ckpts / "step-0000005.state")
    no_step_faults(monkeypatch)
    capsys.readouterr()
    assert run([recipe, "checkpoint.every_n_steps=5", "checkpoint.resume=auto"]) == 0
    assert "(step 5, epoch 1)" in capsys.readouterr().err
    want = torch.load(finished / "checkpoints" / "step-0000008.pt")["state_dict"]
    got = torch.load(ckpts / "step-0000008.pt")["state_dict"]
    assert all(torch.equal(want[k], got[k]) for k in want)
    # a payload in the earlier format's TrainState: never run
    marker = tmp_path / "marker"
    state = ckpts / "step-0000008.state"
    to_earlier_format(state)
    torch.save(Payload(marker), state / "custom_checkpoint_1.pkl")
    assert run([recipe, "checkpoint.every_n_steps=5", f"checkpoint.resume={ckpts / 'step-0000008.pt'}"]) == 2
    assert not marker.exists()
    (line,) = errors(capsys)
    assert f"{state / 'custom_checkpoint_1.pkl'} does not load with torch.load(weights_only=True)" in line


def test_deepspeed_reads_its_checkpoint_files_through_the_safe_loader(tmp_path):
    """DeepSpeed's own loader unpickles with weights_only=False; guarded, a payload is refused unread
    while a ZeRO optimiser state (its LossScaler, ZeroStageEnum, fragment_address) still loads."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address
    from compclip.trainer import safe_load

    class Engine:
        checkpoint_engine = TorchCheckpointEngine()

    engine = Engine()
    safe_load.guard_deepspeed(engine)
    marker, bad, good = tmp_path / "marker", tmp_path / "bad.pt", tmp_path / "good.pt"
    torch.save({"optimizer_state_dict": Payload(marker)}, bad)
    with pytest.raises(safe_load.UnsafeFile, match="bad.pt does not load with torch.load"):
        engine.checkpoint_engine.load(str(bad), map_location=torch.device("cpu"))
    assert not marker.exists()
    state = {"loss_scaler": LossScaler(1.0), "zero_stage": ZeroStageEnum.gradients,
             "param_slice_mappings": [{"w": fragment_address(numel=4, start=0)}], "step": torch.ones(2)}
    torch.save(state, good)
    loaded = engine.checkpoint_engine.load(str(good), map_location=lambda storage, loc: storage)
    assert loaded["zero_stage"] == ZeroStageEnum.gradients and loaded["loss_scaler"].cur_scale == 1.0
    assert loaded["param_slice_mappings"][0]["w"].numel == 4


# --- S3: non-finite weights are never a checkpoint -------------------------------------------------

def test_a_diverged_first_step_writes_no_checkpoint(recipe, tmp_path, capsys):
    assert run([recipe, "optim.lr=1.0e39", "checkpoint.every_n_steps=1"]) == 3
    (line,) = errors(capsys)
    assert line.startswith("error: not writing checkpoint step-0000001.pt: the weights hold ")
    assert "non-finite value(s) at step 1" in line and "no checkpoint was written before this one" in line
    assert "previous checkpoint" not in line
    ckpts = tmp_path / "runs" / "tiny" / "checkpoints"
    assert not (ckpts / "latest").exists() and not list(ckpts.glob("step-*"))


def test_divergence_after_a_checkpoint_keeps_it_as_latest(copied, capsys):
    """Resumed at step 8 with lr 1e39 (allowed): step 9's weights overflow; no step-9 checkpoint."""
    ckpts, recipe = copied
    assert run([recipe, "checkpoint.resume=auto", "schedule.epochs=3", "optim.lr=1.0e39",
                "checkpoint.every_n_steps=1", "checkpoint.allow_recipe_change=true"]) == 3
    (line,) = errors(capsys)
    assert "not writing checkpoint step-0000009.pt" in line and "at step 9" in line
    assert f"the previous checkpoint {ckpts / 'step-0000008.pt'} is intact" in line
    assert (ckpts / "latest").read_text().strip() == "step-0000008.pt"
    assert not (ckpts / "step-0000009.pt").exists() and not (ckpts / "step-0000009.state").exists()


def test_a_latest_with_non_finite_weights_falls_back(copied, capsys):
    ckpts, recipe = copied
    weights = torch.load(ckpts / "step-0000008.pt")
    next(v for v in weights["state_dict"].values() if v.is_floating_point()).view(-1)[:3] = float("nan")
    torch.save(weights, ckpts / "step-0000008.pt")
    capsys.readouterr()
    assert run([recipe, "checkpoint.resume=auto"]) == 0
    err = capsys.readouterr().err
    assert f"note: checkpoint unusable: {ckpts / 'step-0000008.pt'} holds 3 non-finite weight value(s); " \
           f"resuming from step-0000004.pt" in err
    assert (ckpts / "latest").read_text().strip() == "step-0000008.pt"  # trained again from step 4
    assert (ckpts / "corrupt" / "step-0000008.pt").is_file()


# --- S4: a resume with a recipe that trains differently ---------------------------------------------

def test_a_resume_with_changed_training_keys_is_refused_naming_each(copied, capsys):
    ckpts, recipe = copied
    changed = [recipe, "checkpoint.resume=auto", "optim.lr=2.0e-3", "data.batch_size=16", "seed=4"]
    for argv in (changed + ["--check"], changed):  # pre-flight, and the run itself
        assert run(argv) == 2
        (line,) = errors(capsys)
        assert line.startswith(f"error: checkpoint.resume: {ckpts / 'step-0000008.pt'} was trained with another "
                               f"recipe: data.batch_size 8 -> 16, optim.lr 0.001 -> 0.002, seed 3 -> 4; ")
        assert "checkpoint.allow_recipe_change=true" in line
    assert sorted(p.name for p in ckpts.glob("step-*.pt")) == ["step-0000004.pt", "step-0000008.pt"]


def test_a_resume_that_would_regroup_the_optimiser_is_refused_even_when_changes_are_allowed(copied, capsys):
    """`optim.text_lr` set where the checkpoint had none: four parameter groups against the saved two."""
    ckpts, recipe = copied
    assert run([recipe, "checkpoint.resume=auto", "optim.text_lr=1.0e-4", "checkpoint.allow_recipe_change=true"]) == 2
    (line,) = errors(capsys)
    assert line.startswith(f"error: checkpoint.resume: {ckpts / 'step-0000008.pt'}: optim.text_lr null -> 0.0001 "
                           "changes the optimiser's parameter groups")
    assert sorted(p.name for p in ckpts.glob("step-*.pt")) == ["step-0000004.pt", "step-0000008.pt"]


def test_keys_that_do_not_change_training_may_change_silently(copied, capsys):
    ckpts, recipe = copied
    assert run([recipe, "checkpoint.resume=auto", "schedule.epochs=2", "logging.every_n_steps=3",
                "checkpoint.keep_last=5", "checkpoint.every_minutes=60", "data.workers=1",
                "data.max_bad_fraction=0.5", "eval.batch_size=7"]) == 0
    err = capsys.readouterr().err
    assert "recipe" not in err and "error" not in err


def test_an_allowed_recipe_change_takes_the_new_values_and_is_recorded(copied, capsys):
    """lr 1e-3 -> 5e-4 and 2 -> 3 epochs from step 8: the logged lr is the new lr on the new schedule."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from compclip.trainer.optim import lr_factor
    from compclip.trainer.recipe import ScheduleConfig
    ckpts, recipe = copied
    assert run([recipe, "checkpoint.resume=auto", "schedule.epochs=3", "optim.lr=5.0e-4",
                "checkpoint.allow_recipe_change=true"]) == 0
    err = capsys.readouterr().err
    assert "note: resuming with a changed recipe (checkpoint.allow_recipe_change): optim.lr 0.001 -> 0.0005, " \
           "schedule.epochs 2 -> 3; recorded in the checkpoints' sidecars" in err
    meta = json.loads((ckpts / "step-0000012.json").read_text())
    assert meta["recipe_changes"] == [{"step": 8, "changes": {"optim.lr": [0.001, 0.0005], "schedule.epochs": [2, 3]}}]
    assert meta["recipe"]["optim"]["lr"] == 0.0005 and meta["recipe"]["checkpoint"]["allow_recipe_change"]
    events = EventAccumulator(str(ckpts.parent / "tensorboard"))
    events.Reload()
    logged = {e.step: e.value for e in events.Scalars("train/lr")}
    schedule = ScheduleConfig(epochs=3, warmup_steps=1)
    for step in (9, 10, 11):  # train/lr of step s is the lr after its scheduler step: factor(s)
        assert logged[step] == pytest.approx(5.0e-4 * lr_factor(step, 12, schedule), rel=1e-6), step


def test_training_and_free_keys_cover_every_recipe_key_once():
    from compclip.trainer.recipe import FREE_KEYS, TRAINING_KEYS, Recipe, _known_keys, _under, is_training_key
    known = _known_keys(Recipe)
    leaves = [k for k in known if not any(other.startswith(k + ".") for other in known)]
    assert [k for k in leaves if _under(k, TRAINING_KEYS) == _under(k, FREE_KEYS)] == []
    assert is_training_key("optim.lr") and is_training_key("data.batch_size") and is_training_key("model.arch")
    assert not is_training_key("data.workers") and not is_training_key("checkpoint.keep_last")
    assert is_training_key("some.future_key")  # a key in neither list counts as a training key


# --- S8: precision on CPU ------------------------------------------------------------------------------

def test_fp16_on_cpu_says_it_runs_fp32_and_records_it(recipe, tmp_path, capsys):
    assert run([recipe, "precision=fp16", "schedule.epochs=1"]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "precision" in line]
    assert notes == ["note: precision=fp16 runs as fp32 on CPU (the trainer uses mixed precision on a GPU only); "
                     "the checkpoints' sidecars record precision: fp32"]
    meta = json.loads((tmp_path / "runs" / "tiny" / "checkpoints" / "step-0000004.json").read_text())
    assert meta["precision"] == "fp32" and meta["recipe"]["precision"] == "fp16"


# --- F5: file modes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664)])
def test_atomic_write_honours_the_umask(tmp_path, mask, mode):
    from compclip.fileio import atomic_write
    with umask(mask):
        path = atomic_write(tmp_path / "f.json", lambda f: f.write("{}"), "w")
    assert path.stat().st_mode & 0o777 == mode


def test_checkpoints_manifests_and_sample_indexes_honour_the_umask(tmp_path, shards):
    from compclip.trainer.sample_index import SampleIndex
    with umask(0o002):
        folder = write_fixture_shards(tmp_path / "set", n=16, per_shard=8)
        SampleIndex.load(folder)
        assert run([write_recipe(tmp_path, shards), "schedule.epochs=1"]) == 0
    ckpts = tmp_path / "runs" / "tiny" / "checkpoints"
    files = [folder / "manifest.json", folder / "sample_index.npz", ckpts / "latest", ckpts / "step-0000004.pt",
             ckpts / "step-0000004.json", *sorted((ckpts / "step-0000004.state").iterdir())]
    assert ckpts / "step-0000004.state" / "model.safetensors" in files
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in files} == {f.name: "0o664" for f in files}


# --- smaller items --------------------------------------------------------------------------------------

def test_a_failed_first_checkpoint_claims_no_previous_one(recipe, tmp_path, capsys, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("PytorchStreamWriter failed writing file data/3: file write failed")
    monkeypatch.setattr(torch, "save", fail)
    assert run([recipe, "schedule.epochs=1"]) == 3
    (line,) = errors(capsys)
    assert line.startswith("error: writing checkpoint ") and "failed" in line
    assert "no checkpoint was written before this one, so a rerun starts from the beginning" in line
    assert "intact" not in line


def fake_hub_cache(root: Path, repo: str, filename: str) -> None:
    """A file as huggingface_hub caches it: models--org--name/{refs/main, snapshots/<commit>/<file>}."""
    folder = root / ("models--" + repo.replace("/", "--"))
    commit = "0" * 40
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "snapshots" / commit / filename).write_bytes(b"weights")


def test_an_uncached_pretrained_tag_is_refused_in_pre_flight_when_offline(recipe, tmp_path, capsys, monkeypatch):
    import huggingface_hub.constants as hub_constants
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    tag = ["model.arch=ViT-B-32", "model.pretrained=openai", "--check"]
    assert run([recipe, *tag]) == 2
    (line,) = errors(capsys)
    assert line.startswith("error: model.pretrained 'openai': the weights of open_clip tag 'openai' of ViT-B-32 are "
                           "not available: timm/vit_base_patch32_clip_224.openai (open_clip_pytorch_model.bin) is not "
                           "in the local Hugging Face cache and huggingface_hub is offline (HF_HUB_OFFLINE=1); ")
    assert line.endswith("give a local weights file: model.pretrained=/path/to/weights.pt")
    fake_hub_cache(tmp_path / "hub", "timm/vit_base_patch32_clip_224.openai", "open_clip_model.safetensors")
    assert run([recipe, *tag]) == 0  # cached: found where open_clip looks first


def big_png(width: int, height: int) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("1", (width, height)).save(buf, format="PNG")
    return buf.getvalue()


def test_an_image_above_datagens_pixel_limit_is_a_bad_sample_never_decoded(micro_model, monkeypatch):
    from PIL import Image, ImageFile

    from compclip.shardset.imageio import BadImage, decode_image
    from compclip.trainer.compose import BadSample, Composer
    data = big_png(13_000, 13_000)  # 169 M pixels, above PIL's limit (89.5 M), under twice it
    assert 13_000 * 13_000 > Image.MAX_IMAGE_PIXELS and len(data) < 1 << 20
    with pytest.raises(BadImage):
        decode_image(data)  # datagen refuses it
    loads = []
    real_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: loads.append(self.size) or real_load(self))
    composer = Composer(micro_model.preprocess_train, micro_model.tokenizer, 1)
    raw = {"__key__": "big", "__url__": "shard-000000.tar", "jpg": data, "txt": b"a black square",
           "json": json.dumps({"source": "t"}).encode()}
    with pytest.raises(BadSample, match=r"^sample 'big' in shard-000000.tar: image too large, not decoded "):
        composer.item(raw, random.Random(0))
    assert loads == []
    raw["jpg"] = big_png(64, 64)
    assert composer.item(raw, random.Random(0)).key == "big" and set(loads) == {(64, 64)}
