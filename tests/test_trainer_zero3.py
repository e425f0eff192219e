"""DeepSpeed ZeRO-3 is refused in the pre-flight, in one line naming where the stage was set and
the stage, before any model is built: from the accelerate launch settings (`--zero_stage 3`) and
from a DeepSpeed JSON config; ZeRO-2 passes. One real `accelerate launch --zero_stage 3` (2 CPU
processes, flags from ../shared/ENVIRONMENT.md) stops before its first step."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.trainer_data import train_in_process as run, write_fixture_shards

ROOT = Path(__file__).resolve().parents[1]
RECIPE = """
name: z3
seed: 5
model: {{arch: micro-vit-32}}
data: {{train_shards: ["{shards}"], samples_per_epoch: 16, batch_size: 4, workers: 1, shuffle_buffer: 8,
        partner: generated}}
negatives: {{per_image: 2}}
optim: {{lr: 1.0e-3}}
schedule: {{epochs: 1, warmup_steps: 1}}
logging: {{output_dir: "{out}", progress: false}}
checkpoint: {{every_n_steps: 1}}
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_fixture_shards(tmp_path_factory.mktemp("z3") / "set", n=32, per_shard=8, partner="generated")


@pytest.fixture
def recipe(tmp_path, shards):
    path = tmp_path / "z3.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    return path


def refusal(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert "DeepSpeed ZeRO stage 3" in err and "is not supported" in err, err
    return err


def test_zero_stage_3_from_the_launch_settings_is_refused(recipe, monkeypatch, capsys):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert run([recipe, "--check"]) == 2
    assert "zero_stage of the accelerate launch config" in refusal(capsys)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    assert run([recipe, "--check"]) == 0


def test_zero_stage_3_from_a_deepspeed_config_file_is_refused(recipe, tmp_path, monkeypatch, capsys):
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_batch_size": "auto"}))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")  # the JSON file wins, as in accelerate
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(config))
    assert run([recipe, "--check"]) == 2
    assert f"zero_optimization.stage in the DeepSpeed config {config}" in refusal(capsys)
    config.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    assert run([recipe, "--check"]) == 0


@pytest.mark.slow
def test_accelerate_launch_with_zero_stage_3_stops_before_any_step(recipe, tmp_path):
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    done = subprocess.run([accelerate, "launch", "--use_deepspeed", "--zero_stage", "3", "--num_processes", "2",
                           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                           "trainer/train.py", str(recipe)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert lines and all("DeepSpeed ZeRO stage 3 (zero_stage of the accelerate launch config) is not supported"
                         in line for line in lines), done.stderr[-3000:]
    assert not (tmp_path / "runs" / "z3" / "checkpoints").exists()
    assert not (tmp_path / "runs" / "z3" / "tensorboard").exists()
