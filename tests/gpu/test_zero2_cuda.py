"""DeepSpeed ZeRO-2 on one GPU, one process: `accelerate launch` with a DEEPSPEED config
(`zero_stage: 2`, bf16, `num_processes: 1`) runs trainer/train.py on the NegCLIP-style fixture
recipe of test_train_cuda.py: finite losses that go down, the first loss within 2 % of the same
recipe's run through launch/gpu_1.yaml (same seed, weights and batch; both forward in bf16), and a
checkpoint recorded as bf16 that loads on the CPU. Skipped where DeepSpeed is not installed (the
`deepspeed` extra)."""
import json

import pytest
import torch

from tests.gpu.test_train_cuda import RECIPE, ROOT, scalars, shards  # noqa: F401  (shards: the fixture)

pytest.importorskip("deepspeed")

ZERO2_1GPU = """compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 2
  offload_optimizer_device: none
  offload_param_device: none
  gradient_accumulation_steps: auto
  gradient_clipping: auto
  zero3_init_flag: false
num_machines: 1
num_processes: 1
machine_rank: 0
mixed_precision: bf16
use_cpu: false
"""


def launch(tmp, shards, config: str, steps: int = 24):
    import os
    import subprocess
    import sys
    recipe = tmp / "gpu.yaml"
    recipe.write_text(RECIPE.format(shards=shards, samples=16 * steps, out=tmp / "runs", compile="false"))
    cmd = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--config_file", config,
           "trainer/train.py", str(recipe)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp / "runs" / "gpu"


def test_zero2_one_process_learns_like_the_plain_run_and_saves(tmp_path, shards):  # noqa: F811
    config = tmp_path / "zero2_1gpu.yaml"
    config.write_text(ZERO2_1GPU)
    (tmp_path / "z").mkdir()
    (tmp_path / "p").mkdir()
    zero = launch(tmp_path / "z", shards, str(config))
    plain = launch(tmp_path / "p", shards, "launch/gpu_1.yaml")
    z_loss, p_loss = scalars(zero, "train/loss"), scalars(plain, "train/loss")
    assert len(z_loss) == len(p_loss) == 24 and all(torch.isfinite(torch.tensor(z_loss)))
    assert abs(z_loss[0] - p_loss[0]) <= 0.02 * abs(p_loss[0]), (z_loss[0], p_loss[0])
    assert sum(z_loss[-6:]) / 6 < 0.9 * sum(z_loss[:6]) / 6, z_loss

    ckpts = zero / "checkpoints"
    name = (ckpts / "latest").read_text().strip()
    meta = json.loads((ckpts / name).with_suffix(".json").read_text())
    assert meta["precision"] == "bf16" and meta["step"] == 24
    from compclip.models import load_model
    loaded = load_model(pretrained=str(ckpts / name), device="cpu")
    assert all(torch.isfinite(p).all() for p in loaded.model.parameters())
