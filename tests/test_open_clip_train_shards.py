"""open_clip's own trainer (`open_clip_train`) trains on a shard set our writer made, in this
environment: the installed webdataset is one open_clip_train's loader reads (docs/shard_schema.md,
"Plain open_clip_train"), and a few steps run on shards carrying every member of the schema."""
import io
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from PIL import Image

from compclip.shardset.schema import Negative, Neighbour, Partner, ShardSample
from compclip.shardset.shards import ShardSetWriter

ROOT = Path(__file__).resolve().parents[1]


def jpeg(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(buf, format="JPEG")
    return buf.getvalue()


def full_sample(i: int) -> ShardSample:
    """A sample with every member the schema knows (negatives, partner, neighbours)."""
    return ShardSample(
        key=f"s{i:05d}", caption=f"a red circle left of a square {i}", image=jpeg((10 * i, 0, 0)),
        meta={"source": "test", "image_id": str(i)},
        negatives=[Negative("a red square left of a circle", "swap", "obj", "rules")],
        partner=Partner(image=jpeg((0, 0, 200)), caption="a red square left of a circle",
                        kind="generated", negative_index=0),
        neighbours=[Neighbour(f"s{(i + 1) % 16:05d}", 0.5)])


def webdataset_requirements() -> list[Requirement]:
    """Ours (pyproject.toml) and open_clip's training extra's requirements on webdataset."""
    ours = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    theirs = [Requirement(r) for r in metadata.requires("open_clip_torch") or []
              if "extra" in r and "training" in r]
    return [r for r in ours + theirs if r.name == "webdataset"]


def test_installed_webdataset_is_one_both_we_and_open_clip_train_accept():
    reqs = webdataset_requirements()
    assert len(reqs) == 2, reqs
    installed = metadata.version("webdataset")
    for req in reqs:
        assert req.specifier.contains(installed), f"webdataset {installed} is outside {req}"


@pytest.mark.slow
def test_open_clip_train_runs_a_few_steps_on_our_shards(tmp_path):
    data = tmp_path / "shards"
    with ShardSetWriter(data, max_count=8, features={"negatives": True, "partner": "generated",
                                                     "neighbours": 1}) as writer:
        for i in range(16):
            writer.add(full_sample(i))
    logs = tmp_path / "logs"
    cmd = [sys.executable, "bench/_open_clip_train_entry.py", "--model", "micro-vit-32",
           "--train-data", str(data / "shard-{000000..000001}.tar"), "--dataset-type", "webdataset",
           "--train-num-samples", "16", "--batch-size", "4", "--epochs", "1", "--workers", "1",
           "--lr", "1e-4", "--warmup", "0", "--precision", "fp32", "--device", "cpu", "--seed", "0",
           "--logs", str(logs), "--name", "run", "--report-to", "", "--zeroshot-frequency", "0",
           "--val-frequency", "0", "--save-frequency", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    log = (logs / "run" / "out.log").read_text()
    assert "Train Epoch: 0 [16/16 (100%)]" in log, log[-2000:]
    assert "Handling webdataset error" not in log + done.stderr
    assert (logs / "run" / "checkpoints" / "epoch_1.pt").is_file()
