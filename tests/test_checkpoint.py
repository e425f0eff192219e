"""Checkpoint format: loads in plain open_clip with identical outputs; saves are atomic."""
import os
import signal
import subprocess
import sys
import time

import open_clip
import pytest
import torch

from compclip.models import CheckpointMeta, latest_checkpoint, load_model, read_meta, save_checkpoint
from compclip.models.text_length import enable_text_trimming


def test_round_trip_through_plain_open_clip(tmp_path, micro_model):
    model = micro_model.model.eval()
    meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none", step=7,
                          metrics={"eval/x": 0.5}, recipe={"name": "t"})
    path = save_checkpoint(tmp_path, "step_7", model, meta)
    plain, _, _ = open_clip.create_model_and_transforms("micro-vit-32", pretrained=str(path))
    plain.eval()
    enable_text_trimming(plain)  # the same text path as `load_model` gives (models/text_length.py)
    images = torch.randn(3, 3, 32, 32)
    tokens = micro_model.tokenizer(["a cat", "two dogs", "a red cube left of a ball"])
    with torch.no_grad():
        assert torch.equal(model.encode_image(images), plain.encode_image(images))
        assert torch.equal(model.encode_text(tokens), plain.encode_text(tokens))
    assert read_meta(path) == meta
    assert latest_checkpoint(tmp_path) == path
    ours = load_model(pretrained=str(path)).model.eval()
    with torch.no_grad():
        assert torch.equal(ours.encode_image(images), model.encode_image(images))


def test_failed_save_keeps_previous_latest(tmp_path, micro_model, monkeypatch):
    meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none")
    first = save_checkpoint(tmp_path, "step_1", micro_model.model, meta)
    real_save = torch.save

    def torn_save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full (injected)")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="injected"):
        save_checkpoint(tmp_path, "step_2", micro_model.model, meta)
    monkeypatch.setattr(torch, "save", real_save)
    assert latest_checkpoint(tmp_path) == first
    assert not (tmp_path / "step_2.pt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_1.json", "step_1.pt"]


SAVER = """
import sys, torch
from compclip.models import CheckpointMeta, load_model, save_checkpoint
model = load_model("micro-vit-32").model
meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none")
step = 0
while True:
    step += 1
    meta.step = step
    save_checkpoint(sys.argv[1], f"step_{step % 3}", model, meta)
    print(step, flush=True)
"""


def test_sigkill_during_saves_never_leaves_a_torn_latest(tmp_path, repo_root):
    env = dict(os.environ, PYTHONPATH=str(repo_root))
    proc = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path)], stdout=subprocess.PIPE,
                            env=env, text=True)
    try:
        for _ in range(4):  # let it complete a few saves, then kill it mid-loop
            assert proc.stdout.readline(), "saver died"
        time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    path = latest_checkpoint(tmp_path)
    meta = read_meta(path)
    assert meta.step >= 4
    model, _, _ = open_clip.create_model_and_transforms("micro-vit-32", pretrained=str(path))
    assert model is not None


def test_a_checkpoint_may_be_given_as_run_folder_checkpoints_folder_or_pointer(tmp_path, micro_model):
    """`load_model` (so the trainer's model.pretrained, datagen knn --pretrained and eval) reads every
    form docs/cli.md names; a missing path or a run that saved nothing is one line naming it."""
    from compclip.models import CheckpointNotFound, resolve_checkpoint
    run = tmp_path / "runs" / "x"
    meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none")
    first = save_checkpoint(run / "checkpoints", "step-0000001", micro_model.model, meta, pointers=("latest", "best"))
    second = save_checkpoint(run / "checkpoints", "step-0000002", micro_model.model, meta)
    assert resolve_checkpoint(run) == second and resolve_checkpoint(run / "checkpoints") == second
    assert resolve_checkpoint(run / "checkpoints" / "best") == first
    assert resolve_checkpoint(run / "checkpoints" / "latest") == second and resolve_checkpoint(first) == first
    for given in (run, run / "checkpoints" / "best"):
        loaded = load_model("micro-vit-32", str(given))
        assert loaded.info.pretrained in (str(first), str(second))
    assert load_model(pretrained=str(run)).info.arch == "micro-vit-32"  # the architecture from the sidecar
    (run / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(CheckpointNotFound, match=f"^{run / 'empty'}: its checkpoints/ folder holds no checkpoint yet"):
        load_model("micro-vit-32", str(run / "empty"))
    with pytest.raises(CheckpointNotFound, match=f"^{tmp_path / 'nope.pt'}: no such checkpoint; give a checkpoint"):
        load_model("micro-vit-32", str(tmp_path / "nope.pt"))
    second.unlink()
    with pytest.raises(CheckpointNotFound, match="names step-0000002.pt, which is missing"):
        load_model("micro-vit-32", str(run))


def test_a_corrupt_checkpoint_is_named(tmp_path, micro_model):
    from compclip.models import CorruptCheckpoint
    meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none")
    path = save_checkpoint(tmp_path, "step-0000001", micro_model.model, meta)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CorruptCheckpoint, match=f"^{path}: not a readable checkpoint .*truncated"):
        load_model(pretrained=str(path))
    path.write_bytes(b"")
    with pytest.raises(CorruptCheckpoint, match=f"^{path}: not a readable checkpoint"):
        load_model(pretrained=str(path))
