"""`python -m trainer export CHECKPOINT --out DIR`: a checkpoint in open_clip's local-dir / Hugging Face form.

DIR gets the three files open_clip's `local-dir:` loader (and its `hf-hub:` loader, once the folder
is uploaded to a hub repository) reads, plus a model card:

    open_clip_config.json        {"model_cfg": ..., "preprocess_cfg": ...}: the architecture's whole
                                 config, `quick_gelu` set to the activation the weights were trained
                                 with, so no registration of our architectures is needed to build it
    open_clip_model.safetensors  the weights (fp32)
    README.md                    model card: architecture, activation, lineage, base weights, recipe,
                                 training data, metrics from the checkpoint's sidecar

so `open_clip.create_model_and_transforms("local-dir:DIR")` and `open_clip.get_tokenizer(
"local-dir:DIR")` build the model, its transforms and tokenizer in a process that has never
imported compclip. CHECKPOINT is any form `models.checkpoint.resolve_checkpoint` reads (a file, a
pointer file, a run or its checkpoints/ folder); it must have its sidecar (the architecture and
activation come from it). Before it returns, the export is loaded back through open_clip's
`local-dir:` path and its image and text features compared with the checkpoint's as
`load_model(trim_text=False)` builds it: any difference is a fault (exit 3).

Every file is written atomically (`compclip.fileio.atomic_write`) and the config last; an earlier
export in DIR loses its config first, so an interrupted export leaves a folder open_clip refuses
(no config), never one that mixes two exports. DIR must be new, empty or an earlier export.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from compclip import cli
from compclip.errors import InputError, RunFault

PROG = "python -m trainer export"
CONFIG, WEIGHTS, CARD = "open_clip_config.json", "open_clip_model.safetensors", "README.md"


def build_parser():
    parser = cli.make_parser(PROG, __doc__.split("\n\n")[0].replace("\n", " "),
                             epilog="The format and what it guarantees: docs/trainer.md (Export), docs/ecosystem.md.")
    parser.add_argument("checkpoint", metavar="CHECKPOINT_OR_RUN",
                        help="a checkpoint file, a pointer file (best, latest), a run's checkpoints/ folder or the run folder")
    parser.add_argument("--out", required=True, help="the folder to write (new, empty or an earlier export)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the full traceback of an error")
    return parser


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder; give a new folder as --out")
    if out.is_dir() and any(out.iterdir()) and not (out / CONFIG).is_file():
        raise InputError(f"{out}: holds other files and no {CONFIG} (not an earlier export); "
                         "give a new or empty folder as --out")


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def open_clip_config(arch: str, activation: str, model) -> dict[str, Any]:
    """open_clip's `open_clip_config.json` for `model`, built as `arch` with `activation`."""
    import open_clip
    model_cfg = open_clip.get_model_config(arch)
    if activation in ("gelu", "quickgelu"):
        model_cfg["quick_gelu"] = activation == "quickgelu"
    preprocess = dict(getattr(model.visual, "preprocess_cfg", {}) or {})
    preprocess.setdefault("mean", list(model.visual.image_mean))
    preprocess.setdefault("std", list(model.visual.image_std))
    return {"model_cfg": _jsonable(model_cfg), "preprocess_cfg": _jsonable(preprocess)}


def model_card(meta, name: str, kwargs: dict[str, Any], checkpoint: Path) -> str:
    """README.md: the Hugging Face front matter open_clip writes, then what the sidecar records."""
    import yaml
    recipe = meta.recipe or {}
    data = recipe.get("data") or {}
    lines = ["---", "tags:", "- clip", "- compclip", "library_name: open_clip",
             "pipeline_tag: zero-shot-image-classification", "---",
             f"# {recipe.get('name') or checkpoint.stem}", "",
             f"A CLIP model finetuned with compclip (recipe `{recipe.get('name', 'unknown')}`), "
             f"step {meta.step}, epoch {meta.epoch}.", "", "## Model", "",
             f"- **Architecture:** `{meta.arch}`; plain open_clip name: `{name}`"
             + (f" with `{kwargs}`" if kwargs else ""),
             f"- **Activation:** {meta.activation} (lineage: {meta.lineage})",
             f"- **Base weights:** {meta.pretrained or 'none (random initialisation)'}",
             f"- **Precision in training:** {meta.precision or 'unknown'}", "", "## Usage", "", "```python",
             "import open_clip", 'model, _, preprocess = open_clip.create_model_and_transforms("local-dir:PATH")',
             'tokenizer = open_clip.get_tokenizer("local-dir:PATH")',
             "# or, uploaded to the Hugging Face hub: \"hf-hub:ORG/NAME\"", "```", "", "## Training data", ""]
    shards = data.get("train_shards") or []
    lines += [f"- shard set `{s}`" for s in shards] or ["- not recorded"]
    if data.get("partner"):
        lines.append(f"- partner images: {data['partner']}")
    negatives = recipe.get("negatives") or {}
    if negatives:
        lines.append("- hard negatives: " + ", ".join(f"{k}={v}" for k, v in negatives.items() if v not in (None, [], {})))
    if meta.overlap:
        lines.append("- training images also in an evaluation set: "
                     + ", ".join(f"{k}: {v}" for k, v in sorted(meta.overlap.items())))
    lines += ["", "## Metrics", ""]
    if meta.metrics:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in sorted(meta.metrics.items())]
    else:
        lines.append("None recorded with this checkpoint.")
    lines += ["", "## Recipe", "", "```yaml", yaml.safe_dump(recipe, sort_keys=False).rstrip() if recipe else "# not recorded",
              "```", ""]
    if meta.recipe_changes:
        lines += ["Recipe changes accepted on resume: " + json.dumps(meta.recipe_changes), ""]
    return "\n".join(lines)


def _same_features(ours, theirs, context_length: int, image_size) -> bool:
    import torch
    size = image_size if isinstance(image_size, (tuple, list)) else (image_size, image_size)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(2, 3, *size, generator=generator)
    tokens = torch.randint(1, 49000, (2, context_length), generator=generator)
    tokens[:, -1] = 49407
    with torch.no_grad():
        return (torch.equal(ours.encode_image(images), theirs.encode_image(images))
                and torch.equal(ours.encode_text(tokens), theirs.encode_text(tokens)))


def export(checkpoint: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the export of `checkpoint` to `out`; return the summary printed on stdout."""
    from compclip.fileio import atomic_write
    from compclip.models.checkpoint import read_meta, resolve_checkpoint, sidecar_path
    out = Path(out)
    path = resolve_checkpoint(checkpoint)
    meta = read_meta(path)
    if meta is None:
        raise InputError(f"{path}: has no sidecar ({sidecar_path(path).name}) saying its architecture and "
                         "activation; export takes checkpoints written by the trainer")
    _check_out(out)

    import open_clip
    import safetensors.torch
    from compclip.models.load import load_model
    from compclip.models.openclip_name import plain_open_clip_name
    loaded = load_model(pretrained=str(path), trim_text=False)
    model = loaded.model.eval()
    activation = loaded.info.activation
    name, kwargs = plain_open_clip_name(meta.arch, activation)
    config = open_clip_config(meta.arch, activation, model)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    weights = safetensors.torch.save(state, metadata={"format": "pt"})

    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG).unlink(missing_ok=True)  # an earlier export stops loading before any file changes
    atomic_write(out / WEIGHTS, lambda f: f.write(weights))
    atomic_write(out / CARD, lambda f: f.write(model_card(meta, name, kwargs, path)), mode="w")
    atomic_write(out / CONFIG, lambda f: json.dump(config, f, indent=2), mode="w")

    theirs, _, _ = open_clip.create_model_and_transforms(f"local-dir:{out}")
    vision, text = config["model_cfg"]["vision_cfg"], config["model_cfg"]["text_cfg"]
    if not _same_features(model, theirs.eval(), text.get("context_length", 77), vision.get("image_size", 224)):
        raise RunFault(f"{out}: open_clip's local-dir load of the export gives other features than {path}; "
                       "report this with the checkpoint's sidecar")
    return {"out": str(out), "checkpoint": str(path), "arch": meta.arch, "activation": activation,
            "open_clip_arch": name, "open_clip_kwargs": kwargs, "files": [CONFIG, WEIGHTS, CARD]}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def run() -> int:
        print(json.dumps(export(args.checkpoint, args.out)))
        return 0
    return cli.run(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
