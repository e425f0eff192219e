"""What the data-making commands share: option value types, the checks made before any work,
`pin` (the output's lock and recorded options), common options, the model that embeds images,
and the JSON summary printed at the end. The commands: `datagen/images/cli.py`,
`datagen/prepare/cli.py`, `datagen/shuffle_cli.py`; `python -m datagen` dispatches to them.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Optional, Sequence

from compclip.cli import InputError, one_line


def size_arg(text: str) -> tuple[int, int]:
    """`224` or `320x224` (width x height) in pixels."""
    w, _, h = text.lower().partition("x")
    try:
        size = int(w), int(h or w)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a size; give SIDE or WIDTHxHEIGHT in pixels, e.g. 224 or 320x224") from None
    if min(size) < 8:
        raise argparse.ArgumentTypeError(f"'{text}': sides of at least 8 pixels, e.g. 224")
    return size


def scale_arg(text: str) -> tuple[float, float]:
    """`LO,HI`: object sizes as fractions of the canvas side, 0 < LO <= HI <= 1."""
    try:
        lo, hi = (float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a range; give LO,HI as fractions of the canvas, e.g. 0.25,0.45") from None
    if not 0 < lo <= hi <= 1:
        raise argparse.ArgumentTypeError(f"'{text}': need 0 < LO <= HI <= 1, e.g. 0.25,0.45")
    return lo, hi


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': must be at least 1")
    return value


def abs_path(value: Optional[str]) -> Optional[str]:
    """An input path as recorded among a writer's options (absolute, so a rerun from another
    folder with the same relative path is seen as another input)."""
    return str(Path(value).resolve()) if value else None


def check_shard_set(src: str, option: str = "--src") -> dict[str, Any]:
    """The manifest of a complete input shard set, or an InputError naming what is wrong."""
    from compclip.shardset.shards import read_manifest
    path = Path(src)
    if not path.exists():
        raise InputError(f"{src}: no such folder; give a shard set folder ({option})")
    if not path.is_dir() or not (path / "manifest.json").is_file():
        raise InputError(f"{src}: not a shard set (no manifest.json); give a folder written by "
                         f"python -m datagen ({option})")
    manifest = read_manifest(path)
    if not manifest.get("complete"):
        raise InputError(f"{src}: shard set is not complete; finish (rerun) the command that "
                         f"writes it first ({option})")
    return manifest


def check_model(args) -> None:
    """`--arch` / `--pretrained` as `models.load.resolve_model` checks them (a checkpoint in any
    form, its architecture from its sidecar when `--arch` is left out, a known architecture and
    tag), then the weights of a tag are in the local cache or fetched now rather than after the
    work. Sets `args.arch` / `args.pretrained` to what will be built. Imports open_clip: call it
    after the cheap checks, before any other work."""
    import open_clip

    from compclip.models.load import resolve_model
    args.arch, args.pretrained = resolve_model(args.arch, args.pretrained or None)
    if args.pretrained and not os.path.isfile(args.pretrained):
        try:  # the weights in the local cache, or fetched now rather than after the work
            open_clip.pretrained.download_pretrained(open_clip.get_pretrained_cfg(args.arch, args.pretrained))
        except Exception as err:  # noqa: BLE001 -- hub, network and cache errors alike
            raise InputError(f"--pretrained {args.pretrained}: cannot get the weights of {args.arch} "
                             f"({one_line(err)}); run where the hub is reachable once, or give a "
                             "checkpoint file") from None


def check_out(out: str) -> None:
    """`--out` is a folder or can be made one."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise InputError(f"{out}: exists and is not a folder; give a folder for --out")


def pin(args, options: dict[str, Any], inputs: Sequence[Optional[str]] = (), file: str = "manifest.json",
        out: Optional[str] = None) -> None:
    """Before the first write into `out` (default `args.out`): take its lock (`datagen.outlock`,
    held until the command ends), then record `options` and the fingerprints of `inputs` (paths;
    None is left out) or refuse a rerun with other ones (`compclip.shardset.shards.pin_options`)."""
    from compclip.datagen.outlock import hold
    from compclip.shardset.shards import pin_options
    out = out or args.out
    check_out(out)
    args.locks.enter_context(hold(out))
    pin_options(out, options, file, [p for p in inputs if p])


def shard_options(args) -> dict[str, Any]:
    return {"--max-count": args.max_count, "--max-bytes": args.max_bytes}


def model_options(args) -> dict[str, Any]:
    return {"--arch": args.arch, "--pretrained": args.pretrained}


def load_scorer(args):
    from compclip.models import load_model
    from compclip.models.encode import OpenClipEncoder
    loaded = load_model(args.arch, args.pretrained or None, device=args.device)
    return OpenClipEncoder.from_loaded(loaded, batch_size=args.batch_size, device=args.device)


def shard_args(p: argparse.ArgumentParser, seed: bool = True) -> None:
    p.add_argument("--out", required=True, help="output shard set folder (resumed if it exists)")
    p.add_argument("--max-count", type=positive_int, default=10_000, help="samples per shard at most")
    p.add_argument("--max-bytes", type=positive_int, default=1 << 30, help="bytes per shard at most")
    if seed:
        p.add_argument("--seed", type=int, default=0, help="seed of the sample order and of every draw")
    quiet_arg(p)


def quiet_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default=None, help="open_clip architecture (models.load_model); may be left "
                   "out with a compclip checkpoint, which names its own")
    p.add_argument("--pretrained", default="", help="open_clip tag, or a checkpoint: file, best/latest "
                   "pointer, checkpoints/ folder or run folder ('': random weights)")
    if not any(a.dest == "device" for a in p._actions):
        p.add_argument("--device", default="cpu", help="torch device of the model")
    if not any(a.dest == "batch_size" for a in p._actions):
        p.add_argument("--batch-size", type=positive_int, default=64, help="images per model batch")


def summary(args, manifest: dict) -> dict:
    if args.cmd == "prepare" and args.source == "cocobank":
        return manifest
    from compclip.shardset.shards import verify_shard_set
    if args.cmd == "shuffle":  # samples checked on the way in: hashes and counts from headers
        from compclip.shardset.shuffle import check_output
        totals = check_output(args.out)
    else:  # what this run wrote, finished or not (a writer stopped early leaves `complete: false`)
        totals = verify_shard_set(args.out, allow_incomplete=True)
    skipped: dict[str, int] = {}
    for shard in manifest["shards"]:
        for reason, count in shard["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + count
    extra = {k: manifest[k] for k in ("knn", "genimages", "object_bank", "source", "order",
                                      "excluded", "exclusion", "image_ids", "shuffle")
             if k in manifest}
    return {"out": str(args.out), "verified": totals, "skipped": skipped, **extra}
