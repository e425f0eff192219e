"""`python -m trainer export`: open_clip's local-dir / hub form loads in plain open_clip, in a process
that imports no compclip code, with our features; sidecars name the plain open_clip architecture
that builds a checkpoint with its activation (docs/architecture.md section 3, docs/ecosystem.md)."""
import json
import subprocess
import sys
from pathlib import Path

import open_clip
import pytest
import torch

from compclip.models import CheckpointMeta, load_model, read_meta, save_checkpoint
from compclip.models.openclip_name import plain_open_clip_name
from compclip.trainer import export as export_cli

CAPTIONS = ["a cat", "two dogs left of a red cube", "a horse riding a man"]

# Runs under `python -I` (no PYTHONPATH, no current folder on sys.path): plain open_clip only.
PLAIN_LOAD = r"""
import json, sys
import numpy as np, open_clip, torch
from PIL import Image
out, images, names = sys.argv[1], torch.load(sys.argv[2]), json.loads(sys.argv[3])
captions = json.loads(sys.argv[4])
picture = Image.fromarray(np.arange(40 * 50 * 3, dtype=np.uint8).reshape(40, 50, 3))
result = {"registered": "micro-vit-32" in open_clip.list_models()}
for name in names:
    model, _, preprocess = open_clip.create_model_and_transforms(name)
    model.eval()
    tokens = open_clip.get_tokenizer(name)(captions)
    with torch.no_grad():
        result[name] = {"image": model.encode_image(images), "text": model.encode_text(tokens), "tokens": tokens,
                        "pixels": preprocess(picture),
                        "quickgelu": any(type(m).__name__ == "QuickGELU" for m in model.modules())}
result["project_code"] = sorted(m for m in sys.modules if m.split(".")[0] in ("compclip", "models", "trainer"))
torch.save(result, out)
"""


def _checkpoint(folder: Path, arch: str, activation: str, lineage: str) -> Path:
    torch.manual_seed(1)
    model = load_model(arch, activation=activation).model
    with torch.no_grad():  # not the initialisation anyone would build
        for param in model.parameters():
            param.add_(0.01 * torch.randn_like(param))
    recipe = {"name": "negclip", "data": {"train_shards": ["data/coco_negclip"], "partner": "neighbour"},
              "negatives": {"per_image": 1, "kinds": ["swap"]}, "optim": {"lr": 1e-5}}
    meta = CheckpointMeta(arch=arch, activation=activation, lineage=lineage, pretrained="openai", step=40, epoch=2,
                          recipe=recipe, metrics={"eval/sugarcrepe/macro": 0.8125, "val/loss": 1.5})
    return save_checkpoint(folder / "checkpoints", "step-0000040", model, meta, pointers=("latest", "best"))


def _hub_cache(cache: Path, repo: str, export_dir: Path) -> None:
    """The Hugging Face cache layout huggingface_hub reads offline, holding the export as `repo`."""
    commit = "0" * 40
    base = cache / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit)
    snapshot = base / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for item in export_dir.iterdir():
        (snapshot / item.name).write_bytes(item.read_bytes())


def test_export_loads_in_plain_open_clip_with_our_features(tmp_path, repo_root):
    """QuickGELU weights on an architecture plain open_clip does not know: the local-dir and hub
    forms build it from open_clip_config.json alone, with QuickGELU, and give our features."""
    run = tmp_path / "run"
    checkpoint = _checkpoint(run, "micro-vit-32", "quickgelu", "openai")
    out = tmp_path / "export"
    done = subprocess.run([sys.executable, "-m", "trainer", "export", str(run), "--out", str(out)],
                          cwd=repo_root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["open_clip_arch"] == "micro-vit-32" and summary["open_clip_kwargs"] == {"force_quick_gelu": True}
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "open_clip_config.json", "open_clip_model.safetensors"]
    config = json.loads((out / "open_clip_config.json").read_text())
    assert config["model_cfg"]["quick_gelu"] is True and set(config["model_cfg"]) >= {"embed_dim", "vision_cfg", "text_cfg"}
    card = (out / "README.md").read_text()
    for needed in ("library_name: open_clip", "micro-vit-32", "quickgelu", "lineage: openai", "data/coco_negclip",
                   "| eval/sugarcrepe/macro | 0.8125 |", "lr: 1.0e-05", "step 40"):
        assert needed in card, needed

    cache = tmp_path / "hub"
    _hub_cache(cache, "someone/negclip-micro", out)
    torch.manual_seed(2)
    images = torch.randn(3, 3, 32, 32)
    torch.save(images, tmp_path / "images.pt")
    names = [f"local-dir:{out}", "hf-hub:someone/negclip-micro"]
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-I", "-c", PLAIN_LOAD, str(tmp_path / "plain.pt"), str(tmp_path / "images.pt"),
                           json.dumps(names), json.dumps(CAPTIONS)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    plain = torch.load(tmp_path / "plain.pt")
    assert plain["project_code"] == [] and plain["registered"] is False  # built from the config file alone

    ours = load_model(pretrained=str(checkpoint), trim_text=False)
    trimmed = load_model(pretrained=str(checkpoint)).model.eval()  # the per-batch text length (to 1e-5)
    model = ours.model.eval()
    tokens = ours.tokenizer(CAPTIONS)
    from PIL import Image
    import numpy as np
    picture = Image.fromarray(np.arange(40 * 50 * 3, dtype=np.uint8).reshape(40, 50, 3))
    with torch.no_grad():
        image, text = model.encode_image(images), model.encode_text(tokens)
        trimmed_text = trimmed.encode_text(tokens)
    for name in names:
        got = plain[name]
        assert got["quickgelu"] is True, name
        assert torch.equal(got["tokens"], tokens), name
        assert torch.equal(got["pixels"], ours.preprocess(picture)), name
        assert torch.equal(got["image"], image), name
        assert torch.equal(got["text"], text), name
        torch.testing.assert_close(got["text"], trimmed_text, atol=1e-5, rtol=0)


def test_gelu_weights_on_a_quickgelu_name_export_as_gelu(tmp_path):
    checkpoint = _checkpoint(tmp_path, "tiny-vit-64-quickgelu", "gelu", "other")
    summary = export_cli.export(checkpoint, tmp_path / "export")
    config = json.loads((tmp_path / "export" / "open_clip_config.json").read_text())
    assert config["model_cfg"]["quick_gelu"] is False and summary["activation"] == "gelu"
    assert summary["open_clip_arch"] == "tiny-vit-64"
    plain, _, _ = open_clip.create_model_and_transforms(f"local-dir:{tmp_path / 'export'}")
    assert not any(isinstance(m, open_clip.transformer.QuickGELU) for m in plain.modules())


@pytest.mark.parametrize("arch,activation,name,kwargs", [
    ("ViT-B-32", "quickgelu", "ViT-B-32-quickgelu", {}),
    ("ViT-B-32", "gelu", "ViT-B-32", {}),
    ("ViT-B-32-quickgelu", "gelu", "ViT-B-32", {}),
    ("tiny-vit-64", "quickgelu", "tiny-vit-64-quickgelu", {}),
    ("micro-vit-32", "quickgelu", "micro-vit-32", {"force_quick_gelu": True}),
    ("micro-vit-32", "n/a", "micro-vit-32", {}),
])
def test_plain_open_clip_name(arch, activation, name, kwargs):
    assert plain_open_clip_name(arch, activation) == (name, kwargs)


@pytest.mark.parametrize("arch,plain_name,kwargs", [
    ("tiny-vit-64", "tiny-vit-64-quickgelu", {}),
    ("micro-vit-32", "micro-vit-32", {"force_quick_gelu": True}),
])
def test_sidecar_names_the_plain_open_clip_build(tmp_path, arch, plain_name, kwargs):
    """docs/architecture.md section 3: `create_model_and_transforms(open_clip_arch, pretrained=path,
    **open_clip_kwargs)` gives our outputs; the bare architecture name builds GELU and does not."""
    checkpoint = _checkpoint(tmp_path, arch, "quickgelu", "openai")
    meta = read_meta(checkpoint)
    assert (meta.open_clip_arch, meta.open_clip_kwargs) == (plain_name, kwargs)
    ours = load_model(pretrained=str(checkpoint), trim_text=False)
    size = ours.model.visual.image_size
    images = torch.randn(2, 3, *size)
    tokens = ours.tokenizer(CAPTIONS)
    plain, _, _ = open_clip.create_model_and_transforms(meta.open_clip_arch, pretrained=str(checkpoint),
                                                        **meta.open_clip_kwargs)
    wrong, _, _ = open_clip.create_model_and_transforms(arch, pretrained=str(checkpoint))
    with torch.no_grad():
        mine = ours.model.eval()
        assert torch.equal(plain.eval().encode_image(images), mine.encode_image(images))
        assert torch.equal(plain.encode_text(tokens), mine.encode_text(tokens))
        assert not torch.allclose(wrong.eval().encode_image(images), mine.encode_image(images), atol=1e-4)


def test_export_errors_are_one_line(tmp_path, capsys):
    bare = tmp_path / "bare.pt"
    torch.save({"state_dict": {"x": torch.zeros(1)}}, bare)
    assert export_cli.main([str(bare), "--out", str(tmp_path / "e")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {bare}: has no sidecar (bare.json) saying its architecture "
                                               "and activation; export takes checkpoints written by the trainer")
    assert export_cli.main([str(tmp_path / "nope"), "--out", str(tmp_path / "e")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'nope'}: no such checkpoint")
    checkpoint = _checkpoint(tmp_path, "micro-vit-32", "gelu", "none")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert export_cli.main([str(checkpoint), "--out", str(busy)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "holds other files and no open_clip_config.json" in err[0], err
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
