"""Short trainer runs on CUDA: `accelerate launch --config_file launch/gpu_1.yaml trainer/train.py`
with `precision: bf16` and a NegCLIP-style batch (neighbour partner, one negative of the anchor's
caption and one of the neighbour's) on fixture shards: finite losses that go down, and a
checkpoint recorded as bf16 that loads on the CPU with the weights it saved. Then the pinned-memory
loader with `non_blocking` copies, and `model.compile: true` for a few steps."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

RECIPE = """
name: gpu
seed: 0
precision: bf16
model: {{arch: tiny-vit-64, compile: {compile}}}
data: {{train_shards: ["{shards}"], samples_per_epoch: {samples}, batch_size: 16, workers: 2, shuffle_buffer: 64,
        partner: neighbour}}
negatives: {{per_image: 1, per_partner: 1}}
optim: {{lr: 1.0e-3, weight_decay: 0.0}}
schedule: {{epochs: 1, warmup_steps: 2, kind: constant}}
logging: {{output_dir: "{out}", every_n_steps: 1, progress: false}}
checkpoint: {{keep_last: 1}}
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from tests.fixtures.trainer_data import write_fixture_shards
    return write_fixture_shards(tmp_path_factory.mktemp("gpu") / "nn", n=256, per_shard=64, neighbours=3)


def train(tmp: Path, shards: Path, steps: int, compile: bool = False, launcher: bool = True) -> Path:
    recipe = tmp / "gpu.yaml"
    recipe.write_text(RECIPE.format(shards=shards, samples=16 * steps, out=tmp / "runs",
                                    compile=str(compile).lower()))
    cmd = [sys.executable, "trainer/train.py", str(recipe)]
    if launcher:
        cmd = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--config_file",
               "launch/gpu_1.yaml"] + cmd[1:]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp / "runs" / "gpu"


def scalars(run_dir: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.value for e in sorted(acc.Scalars(tag), key=lambda e: e.step)]


def test_bf16_negclip_run_learns_and_its_checkpoint_loads_on_cpu(tmp_path, shards):
    run_dir = train(tmp_path, shards, steps=48)
    losses = scalars(run_dir, "train/loss")
    assert len(losses) == 48 and all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8
    assert last < 0.9 * first, (first, last)
    assert max(scalars(run_dir, "train/memory_mb")) > 0  # torch.cuda.max_memory_allocated on a GPU

    ckpts = run_dir / "checkpoints"
    name = (ckpts / "latest").read_text().strip()
    meta = json.loads((ckpts / name).with_suffix(".json").read_text())
    assert meta["precision"] == "bf16" and meta["step"] == 48  # ran in bf16, so on the GPU
    saved = torch.load(ckpts / name, map_location="cpu", weights_only=False)["state_dict"]
    from compclip.models import load_model
    loaded = load_model(pretrained=str(ckpts / name), device="cpu")
    state = loaded.model.state_dict()
    assert all(v.device.type == "cpu" and torch.equal(state[k], v) for k, v in saved.items())
    from PIL import Image
    with torch.no_grad():
        pixels = loaded.preprocess(Image.new("RGB", (64, 64), (200, 30, 30))).unsqueeze(0)
        img = loaded.model.encode_image(pixels)
        txt = loaded.model.encode_text(loaded.tokenizer(["a red square left of a blue square"]))
    assert torch.isfinite(img).all() and torch.isfinite(txt).all()


def test_pinned_batches_copy_non_blocking_unchanged(micro_model, shards):
    from compclip.trainer.compose import Composer
    from compclip.trainer.data import ShardStream, make_loader, resolve_sources
    comp = Composer(micro_model.preprocess_train, micro_model.tokenizer, 8, partner="neighbour",
                    partners_per_batch=8, negatives_per_image=1)
    stream = ShardStream(resolve_sources([str(shards)]), None, comp, seed=7, rank=0, world_size=1,
                         batches_per_epoch=4, num_streams=2, shuffle_buffer=8, max_bad_fraction=0.01)
    batches = [b for b, _ in make_loader(stream, 2, 0, 0)]
    assert len(batches) == 4
    stream_copy = torch.cuda.Stream()
    for b in batches:
        assert b.images.is_pinned() and b.texts.is_pinned()
        with torch.cuda.stream(stream_copy):
            fast = b.to("cuda", non_blocking=True)
        stream_copy.synchronize()
        assert fast.images.device.type == "cuda"
        assert torch.equal(fast.images.cpu(), b.images) and torch.equal(fast.texts.cpu(), b.texts)
        assert torch.equal(fast.text_valid.cpu(), b.text_valid)


def test_compiled_model_trains_a_few_steps(tmp_path, shards):
    run_dir = train(tmp_path, shards, steps=8, compile=True, launcher=False)
    losses = scalars(run_dir, "train/loss")
    assert len(losses) == 8 and all(torch.isfinite(torch.tensor(losses)))
