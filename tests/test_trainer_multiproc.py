"""train.py as users run it, in subprocesses: 2-process DDP and DeepSpeed ZeRO-2 on CPU through
`accelerate launch` (flags from ../shared/ENVIRONMENT.md), evaluating synthetic-world compositional
benchmarks every epoch on rank 0, and resume after SIGKILL giving the same final weights as an
uninterrupted run (bit-identical on CPU), and one optimiser step in 2 processes (DDP, ZeRO-2) equal
to 1 process on the concatenated batch (tests/_one_step.py)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import open_clip
import psutil
import pytest
import torch

import compclip.models.registry  # noqa: F401  (the tiny architectures, for open_clip in this process)
from tests.fixtures.trainer_data import write_fixture_shards

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))
CPU2 = ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
RECIPE = """
name: mp
seed: 5
model: {{arch: micro-vit-32}}
data: {{train_shards: ["{shards}"], samples_per_epoch: {spe}, batch_size: 4, workers: {workers},
        shuffle_buffer: 8, partner: generated}}
negatives: {{per_image: 2}}
optim: {{lr: 1.0e-3, grad_clip: 1.0}}
schedule: {{epochs: 2, warmup_steps: 1}}
logging: {{output_dir: "{out}", progress: false}}
checkpoint: {{every_n_steps: 5, keep_last: 2, resume: auto}}
"""

EVAL_METRICS = {"sugarcrepe": "macro", "bivlc": "group"}  # benchmark -> a headline metric it must log

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_fixture_shards(tmp_path_factory.mktemp("mp") / "set", n=32, per_shard=8, partner="generated")


def env():
    e = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1",
             TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions")))
    return e


PAUSED = "tests/_paused_train.py"  # trainer/train.py pausing after a step until a stop signal (or a kill)


def recipe(tmp_path, shards, name, spe=16, workers=1):
    path = tmp_path / f"{name}.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / name, spe=spe, workers=workers))
    return path


def final_weights(run_root):
    ckpts = run_root / "mp" / "checkpoints"
    return torch.load(ckpts / (ckpts / "latest").read_text().strip())["state_dict"]


@pytest.mark.parametrize("mode", ["ddp", "zero2"])
def test_two_processes_through_accelerate_launch(tmp_path, shards, world_benchmark_root, mode):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    flags = ["--multi_gpu"] if mode == "ddp" else ["--use_deepspeed", "--zero_stage", "2"]
    out = subprocess.run([ACCELERATE, "launch", *flags, *CPU2, "trainer/train.py",
                          recipe(tmp_path, shards, mode, spe=32), f"eval.benchmarks=[{', '.join(EVAL_METRICS)}]",
                          f"eval.data_root={world_benchmark_root}"], cwd=ROOT, env=env(),
                         capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "parameters identical across 2 rank(s)" in out.stdout
    run_dir = tmp_path / mode / "mp"
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step-0000008.pt"  # 32 / (4 x 2 ranks) x 2 epochs
    ckpt = ckpts / "step-0000008.pt"
    model, _, _ = open_clip.create_model_and_transforms("micro-vit-32", pretrained=str(ckpt))
    assert model.logit_scale.dim() == 0
    # each epoch end (steps 4 and 8) rank 0 alone scored the benchmarks and logged them: one event
    # file and one eval.jsonl line per evaluation (a second writer would double them)
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert list((tmp_path / mode).rglob("eval.jsonl")) == [run_dir / "eval.jsonl"]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    evals = {t for t in events.Tags()["scalars"] if t.startswith("eval/")}
    assert {f"eval/{b}/{m}" for b, m in EVAL_METRICS.items()} <= evals, evals
    for tag in evals:
        scalars = events.Scalars(tag)
        assert [e.step for e in scalars] == [4, 8], tag
        assert all(0.0 <= e.value <= 1.0 for e in scalars), (tag, scalars)
    lines = [json.loads(l) for l in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert [(l["epoch"], l["step"]) for l in lines] == [(1, 4), (2, 8)]
    for line in lines:
        assert {f"eval/{k}" for k in line["metrics"]} == evals
    assert json.loads((ckpts / "step-0000008.json").read_text())["metrics"] == lines[-1]["metrics"]


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process under it: torch's elastic agent starts the ranks
    (and they their loader workers) outside the launcher's process group, so killpg alone left
    paused ranks sleeping after the test."""
    family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    for pid in family:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


@pytest.mark.parametrize("mode", ["single", "ddp", "zero2", "ddp-exact"])
def test_resume_after_sigkill_is_bit_identical(tmp_path, shards, mode):
    """`ddp-exact`: exact-pass epochs (32 samples / (4 x 2 ranks) = 4 steps an epoch), resumed mid-epoch."""
    if mode == "single":
        launch, spe = [sys.executable], 16
    else:
        flags = ["--multi_gpu"] if mode.startswith("ddp") else ["--use_deepspeed", "--zero_stage", "2"]
        launch, spe = [ACCELERATE, "launch", *flags, *CPU2], 32
    train = [*launch, "trainer/train.py"]
    extra = ["data.sampling=exact", "data.samples_per_epoch=null"] if mode == "ddp-exact" else []
    full = subprocess.run(train + [recipe(tmp_path, shards, "full", spe=spe, workers=2), *extra], cwd=ROOT,
                          env=env(), capture_output=True, text=True, timeout=300)
    assert full.returncode == 0, full.stderr[-3000:]

    killed_recipe = recipe(tmp_path, shards, "killed", spe=spe, workers=2)
    log = open(tmp_path / "killed.log", "w")
    # 4 steps per epoch, checkpoints at steps 4 (epoch end) and 5 (epoch 1, batch 1: an odd batch,
    # so the 2 loader workers' streams are rotated on resume); killed after step 7
    proc = subprocess.Popen([*launch, PAUSED, "7", killed_recipe, *extra], cwd=ROOT, env=env(),
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 300
    while "paused at step 7" not in (tmp_path / "killed.log").read_text():
        assert proc.poll() is None and time.time() < deadline, (tmp_path / "killed.log").read_text()[-3000:]
        time.sleep(0.5)
    kill_tree(proc)
    proc.wait()
    ckpts = tmp_path / "killed" / "mp" / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step-0000005.pt"

    resumed = subprocess.run(train + [killed_recipe, *extra], cwd=ROOT, env=env(), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "(step 5, epoch 1)" in resumed.stderr
    want, got = final_weights(tmp_path / "full"), final_weights(tmp_path / "killed")
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), key


def test_two_processes_share_the_lock_and_agree_on_time_based_checkpoints(tmp_path, shards):
    """2-process DDP: a folder another live run holds is refused (one line naming it, no hang).
    Then tests/_skewed_clock.py: by rank 0's clock a checkpoint is due after every step
    (`checkpoint.every_minutes=1`, its clock a million times fast), by rank 1's never; the save is
    collective, so the run finishes, with a checkpoint at every step, only if both follow rank 0.
    Its own lock never stops its second rank."""
    import socket
    rec = recipe(tmp_path, shards, "t", spe=32)
    launch = [ACCELERATE, "launch", "--multi_gpu", *CPU2]
    holder = subprocess.Popen(["sleep", "120"])
    try:
        lock = tmp_path / "t" / "mp" / "run.lock"
        lock.parent.mkdir(parents=True)
        lock.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                    "started": psutil.Process(holder.pid).create_time()}))
        refused = subprocess.run(launch + ["trainer/train.py", rec], cwd=ROOT, env=env(), capture_output=True,
                                 text=True, timeout=120)
        assert refused.returncode != 0
        assert f"is in use by another run (pid {holder.pid} on " in refused.stderr, refused.stderr[-3000:]
    finally:
        holder.kill()
        holder.wait()
    proc = subprocess.Popen(launch + ["tests/_skewed_clock.py", rec, "checkpoint.every_minutes=1",
                                      "checkpoint.every_n_steps=0", "checkpoint.keep_last=20"],
                            cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        kill_tree(proc)  # the ranks disagreed and hang in mismatched collectives
        pytest.fail("the 2-process run hung: the ranks did not agree on when to checkpoint")
    assert proc.returncode == 0, stderr[-3000:]
    assert "taking over the lock" in stderr  # the holder is dead now
    assert "parameters identical across 2 rank(s)" in stdout
    steps = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "t" / "mp" / "checkpoints").glob("step-*.pt"))
    assert steps == list(range(1, 9)), steps
    assert not lock.exists()


ONE_STEP = ["optim.lr=1.0", "optim.eps=1.0", "optim.weight_decay=0.0", "optim.grad_clip=1000.0",
            "schedule.warmup_steps=0", "logging.tensorboard=false"]


def one_step(tmp_path, shards, mode, *extra):
    """tests/_one_step.py: one Trainer.step on the fixed global batch; returns what rank 0 saved."""
    out = tmp_path / f"{mode}.pt"
    launch = {"single": [sys.executable],
              "ddp": [ACCELERATE, "launch", "--multi_gpu", *CPU2],
              "zero2": [ACCELERATE, "launch", "--use_deepspeed", "--zero_stage", "2", *CPU2]}[mode]
    done = subprocess.run([*launch, "tests/_one_step.py", out, recipe(tmp_path, shards, mode), *ONE_STEP, *extra],
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def one_process_step(tmp_path_factory, shards):
    return one_step(tmp_path_factory.mktemp("single"), shards, "single")


@pytest.mark.parametrize("mode", ["ddp", "zero2"])
def test_two_process_step_equals_one_process_on_the_whole_batch(tmp_path, shards, one_process_step, mode):
    """One real optimiser step (gathered loss, backward, DDP/ZeRO-2 gradient averaging, clipping,
    AdamW) in 2 processes, each on half of a fixed global batch with partners and hard negatives,
    gives the loss and parameters of 1 process on the whole batch. AdamW's first step divides the
    gradient by |g| + eps, so eps=1 (and lr=1, no weight decay) keeps the update proportional to
    the gradient: a gradient off by a factor (e.g. `loss.gather_with_grad=false` halves it) shows."""
    want, got = one_process_step, one_step(tmp_path, shards, mode)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-6, abs=1e-6)
    assert want["after"].keys() == got["after"].keys()
    moved = max((want["after"][k] - want["before"][k]).abs().max().item() for k in want["after"])
    assert moved > 1e-2  # the step did change the parameters
    for key in want["after"]:
        torch.testing.assert_close(got["before"][key], want["before"][key], rtol=0, atol=0)
        torch.testing.assert_close(got["after"][key], want["after"][key], rtol=1e-5, atol=1e-6,
                                   msg=lambda m, key=key: f"{key}: {m}")
