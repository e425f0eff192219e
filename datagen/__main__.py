"""Command line for making data: `python -m datagen COMMAND ...` (docs/cli.md).

`stitch`, `knn`, `genimages`, `prepare coco|trohn`, `shuffle` each write a shard set into
`--out` (resuming one a killed run left), read it back with `verify_shard_set` and print the
manifest summary as JSON on stdout; `prepare cocobank` writes an object bank folder and prints
its counts. `prepare coco|trohn|cocobank` turn COCO, TROHN-Text/-Img and COCO instances into
shard sets / an object bank (docs/data_prep.md), leaving benchmark images out unless
`--keep-benchmark-images`. Every set is written in a seeded global order (`compclip.shardset.order`);
`shuffle` puts an existing set into one in bounded memory. `negatives` (hard-negative captions,
datagen/negatives) and `world` (the synthetic world, datagen/world/cli.py) hand their arguments
to their own programs unchanged.

Every writer takes the lock of its --out (`datagen.outlock`, held until the command ends) and
records the options that change its output, and the fingerprints of its input files and sets,
in the output (`pin`: `compclip.shardset.shards.pin_options`) before any work; it refuses, in one line, a
second writer while one holds the lock and a rerun with another value of an option or another
input. Bad
input is found before heavy work (a missing or unfinished --src, an empty bank, an unknown
model) and every error is one line on stderr: exit 2 for bad input, 3 for a fault during the
run (`compclip.cli.run`). Progress bars go to stderr (`--quiet`: none). Nothing heavy is
imported before the arguments are parsed, so `--help` is quick.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from compclip.cli import (InputError, add_subparsers, comma_list, deprecated, exit_program, make_parser,
                          one_line, run)
from datagen.negatives.base import SPACY_MODEL

DELEGATED = {"negatives": ("datagen.negatives.__main__", "hard-negative captions for captions "
                           "files or shard sets (python -m datagen negatives --help)"),
             "world": ("datagen.world.cli", "the synthetic world: build its data, render a "
                       "caption (python -m datagen world --help)")}


# ---------------------------------------------------------------- option values

def _size(text: str) -> tuple[int, int]:
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


def _scale(text: str) -> tuple[float, float]:
    """`LO,HI`: object sizes as fractions of the canvas side, 0 < LO <= HI <= 1."""
    try:
        lo, hi = (float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a range; give LO,HI as fractions of the canvas, e.g. 0.25,0.45") from None
    if not 0 < lo <= hi <= 1:
        raise argparse.ArgumentTypeError(f"'{text}': need 0 < LO <= HI <= 1, e.g. 0.25,0.45")
    return lo, hi


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': must be at least 1")
    return value


def _path(value: Optional[str]) -> Optional[str]:
    """An input path as recorded among a writer's options (absolute, so a rerun from another
    folder with the same relative path is seen as another input)."""
    return str(Path(value).resolve()) if value else None


# ---------------------------------------------------------------- checks before the work

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

    from models.load import resolve_model
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
    from datagen.outlock import hold
    from compclip.shardset.shards import pin_options
    out = out or args.out
    check_out(out)
    args.locks.enter_context(hold(out))
    pin_options(out, options, file, [p for p in inputs if p])


def _shard_options(args) -> dict[str, Any]:
    return {"--max-count": args.max_count, "--max-bytes": args.max_bytes}


def _model_options(args) -> dict[str, Any]:
    return {"--arch": args.arch, "--pretrained": args.pretrained}


# ---------------------------------------------------------------- commands

def _diffusers_backend(args):
    from datagen.images.genimages import DiffusersBackend, tiny_pipeline
    common = dict(steps=args.steps, guidance=args.guidance, size=args.size,
                  batch_size=args.batch_size, device=args.device)
    if args.model == "tiny":  # random weights: a smoke test, not real images
        return DiffusersBackend(tiny_pipeline(args.seed, args.size or 32), name="diffusers:tiny", **common)
    try:
        return DiffusersBackend.from_pretrained(args.model, **common)
    except (OSError, ValueError) as err:
        raise InputError(f"--model {args.model}: cannot load a diffusers pipeline; give a local "
                         "pipeline folder, a hub id this machine can reach (or has cached), or "
                         "'tiny'") from err


def _scorer(args):
    from eval.scorer import OpenClipScorer
    from models import load_model
    loaded = load_model(args.arch, args.pretrained or None, device=args.device)
    return OpenClipScorer.from_loaded(loaded, batch_size=args.batch_size, device=args.device)


def cmd_stitch(args) -> dict:
    if args.nouns and not args.model:
        raise InputError("--nouns needs --model (a diffusers model id, local folder or 'tiny')")
    bank = Path(args.bank)
    if not (args.world_bank or args.nouns):
        from compclip.shardset.imageio import list_image_files
        if not bank.is_dir():
            raise InputError(f"{bank}: no such folder; give a folder of object images (--bank)")
        if not list_image_files(bank):
            raise InputError(f"{bank}: no object images (.png, .jpg, ...) in this folder; give "
                             "a bank folder (python -m datagen prepare cocobank) or --world-bank SIZE")
    pin(args, {"--bank": _path(args.bank), "--world-bank": args.world_bank,
                   "--nouns": comma_list(args.nouns), "--n": args.n,
                   "--canvas": "%dx%d" % args.canvas, "--relations": comma_list(args.relations),
                   "--scale": list(args.scale), "--gap": args.gap, "--ext": args.ext,
                   "--backgrounds": _path(args.backgrounds), "--key-prefix": args.key_prefix,
                   "--seed": args.seed, **_shard_options(args)},
        inputs=[args.backgrounds] + ([] if args.world_bank or args.nouns else [args.bank]))  # else made here
    from datagen.images.stitch import write_stitched
    if args.world_bank:
        from datagen.world import write_object_bank
        write_object_bank(bank, args.world_bank, args.seed)
    elif args.nouns:
        from datagen.images.genimages import write_generated_object_bank
        write_generated_object_bank(_diffusers_backend(args), comma_list(args.nouns), bank, args.seed)
    return write_stitched(args.out, bank, args.n, args.seed, args.canvas, comma_list(args.relations),
                          args.scale, args.gap, args.ext, args.backgrounds,
                          args.key_prefix, args.max_count, args.max_bytes, progress=not args.quiet)


def cmd_knn(args) -> dict:
    check_shard_set(args.src)
    if args.workers is not None and args.workers < 0:
        raise InputError(f"--workers {args.workers}: give 0 (decode in this process) or more")
    check_model(args)
    pin(args, {"--src": _path(args.src), "--k": args.k, "--method": args.method,
               "--dtype": args.dtype, "--dup-threshold": args.dup_threshold,
               "--factory": args.factory, "--nprobe": args.nprobe, **_model_options(args),
               **_shard_options(args)}, inputs=[args.src])
    from datagen.images.knn import run_knn
    return run_knn(args.src, args.out, _scorer(args), args.k, args.method, args.batch_size,
                   args.dtype, args.dup_threshold, args.factory, args.nprobe, args.work_dir,
                   args.max_count, args.max_bytes, args.workers, progress=not args.quiet)


def cmd_genimages(args) -> dict:
    check_shard_set(args.src)
    if args.backend == "diffusers" and not args.model:
        raise InputError("genimages --backend diffusers needs --model (hub id, local folder or 'tiny')")
    options = {"--src": _path(args.src), "--backend": args.backend,
               "--kinds": comma_list(args.kinds), "--subkinds": comma_list(args.subkinds),
               "--per-sample": args.per_sample, "--candidates": args.candidates,
               "--pick": args.pick, "--seed": args.seed, "--ext": args.ext, "--size": args.size,
               **_shard_options(args)}
    if args.backend == "diffusers":
        options.update({"--model": args.model, "--steps": args.steps, "--guidance": args.guidance})
    if args.pick == "clip":
        check_model(args)
        options.update(_model_options(args))
    pin(args, options, inputs=[args.src])
    from datagen.images.genimages import RendererBackend, write_generated
    if args.backend == "renderer":
        backend = RendererBackend(size=args.size or 224)
    else:
        backend = _diffusers_backend(args)
    scorer = _scorer(args) if args.pick == "clip" else None
    return write_generated(args.src, args.out, backend, comma_list(args.kinds) or None,
                           comma_list(args.subkinds) or None, args.per_sample, args.candidates,
                           args.pick, scorer, args.seed, args.ext, args.gen_batch, args.max_count,
                           args.max_bytes, progress=not args.quiet)


def _input_file(path: Optional[str], option: str) -> None:
    if path and not Path(path).is_file():
        raise InputError(f"{path}: no such file ({option})")


def cmd_prepare_coco(args) -> dict:
    from datagen.prepare.coco import default_base
    if (args.captions is None) == (args.karpathy is None):
        raise InputError("give exactly one caption source: --captions FILE (COCO 2017) or "
                         "--karpathy FILE (dataset_coco.json)")
    _input_file(args.captions, "--captions")
    _input_file(args.karpathy, "--karpathy")
    if args.negatives is None:  # every kind of the rule set
        args.negatives = "swap,replace,add" if args.rules == "compclip" else "swap"
    if not Path(args.images).is_dir():
        raise InputError(f"{args.images}: no such folder of images (--images)")
    stage1 = {"--captions": _path(args.captions), "--karpathy": _path(args.karpathy),
              "--split": comma_list(args.split) if args.karpathy else None,
              "--images": _path(args.images), "--negatives": comma_list(args.negatives),
              "--rules": args.rules, "--spacy-model": args.spacy_model,
              "--require-negative": args.require_negative,
              "--one-caption-per-image": args.one_caption_per_image,
              "--mode": args.mode, "--cap": args.cap, "--seed": args.seed, "--vocab": _path(args.vocab),
              "--max-side": args.max_side, "--limit": args.limit, "--max-count": args.max_count}
    captions = [args.captions or args.karpathy]
    if args.knn:
        check_model(args)
        base = Path(args.base) if args.base else default_base(args.out)
        pin(args, {**stage1, "--knn": args.knn, "--method": args.method,
                   "--dtype": args.dtype, **_model_options(args)}, captions)
        from compclip.shardset.shards import check_pinned, is_complete
        if is_complete(base):  # reused as it is, read-only: compared, not written
            check_pinned(base, stage1, captions)
        elif not is_complete(args.out):
            pin(args, stage1, captions, out=str(base))
    else:
        pin(args, stage1, captions)
    from datagen.prepare.coco import prepare_coco
    knn_options = {"method": args.method, "batch_size": args.batch_size, "dtype": args.dtype}
    return prepare_coco(args.out, args.images, captions=args.captions, karpathy=args.karpathy,
                        splits=comma_list(args.split), kinds=comma_list(args.negatives) or None,
                        rules=args.rules, spacy_model=args.spacy_model,
                        require_negative=args.require_negative,
                        one_caption_per_image=args.one_caption_per_image,
                        mode=args.mode, cap=args.cap, seed=args.seed, workers=args.workers,
                        shard_size=args.max_count, skip_missing=args.skip_missing,
                        max_side=args.max_side, limit=args.limit, vocab=args.vocab, knn=args.knn,
                        scorer_factory=lambda: _scorer(args), base=args.base,
                        knn_options=knn_options, progress=not args.quiet,
                        **_exclusion_kwargs(args))


def cmd_prepare_trohn(args) -> dict:
    if not Path(args.images_root).is_dir():
        raise InputError(f"{args.images_root}: no such folder of images (--images-root)")
    pin(args, {"--dataset": args.dataset, "--split": args.split, "--revision": args.revision,
               "--images-root": _path(args.images_root), "--group": args.group,
               "--label": args.label, "--max-side": args.max_side, "--limit": args.limit,
               "--seed": args.seed, **_shard_options(args)})  # the dataset's files: by prepare_trohn
    from datagen.prepare.trohn import prepare_trohn
    return prepare_trohn(args.dataset, args.out, args.images_root, split=args.split,
                         revision=args.revision, group=args.group, label=args.label,
                         skip_missing=args.skip_missing, max_side=args.max_side,
                         shard_size=args.max_count, max_bytes=args.max_bytes, limit=args.limit,
                         progress=not args.quiet, seed=args.seed, **_exclusion_kwargs(args))


def _exclusion_kwargs(args) -> dict:
    return {"benchmarks_root": args.benchmarks_root, "keep_benchmark_images": args.keep_benchmark_images,
            "karpathy_ref": args.karpathy_ref, "val2017": args.val2017}


def cmd_shuffle(args) -> dict:
    check_shard_set(args.src)
    pin(args, {"--src": _path(args.src), "--seed": args.seed, "--buckets": args.buckets,
               **_shard_options(args)}, inputs=[args.src])
    from compclip.shardset.shuffle import shuffle_shard_set
    return shuffle_shard_set(args.src, args.out, args.seed, args.buckets, args.work_dir,
                             args.max_count, args.max_bytes, progress=not args.quiet)


COCOBANK_RECORD = "cocobank.json"  # the options of `prepare cocobank`, in its bank folder


def cmd_prepare_cocobank(args) -> dict:
    _input_file(args.instances, "--instances")
    if not Path(args.images).is_dir():
        raise InputError(f"{args.images}: no such folder of images (--images)")
    from datagen.prepare.exclude import benchmark_exclusion, sibling_val2017
    exclusion = benchmark_exclusion(args.benchmarks_root, karpathy=args.karpathy_ref,
                                    val2017=args.val2017 or sibling_val2017(args.instances),
                                    keep=args.keep_benchmark_images)
    pin(args, {"--instances": _path(args.instances), "--per-class": args.per_class,
               "--min-size": args.min_size, "--min-fill": args.min_fill,
               "--max-side": args.max_side, "--seed": args.seed,
               "benchmark images left out": exclusion.fingerprint()}, [args.instances], COCOBANK_RECORD)
    from datagen.prepare.cocobank import write_coco_object_bank
    return write_coco_object_bank(args.instances, args.images, args.out, args.per_class,
                                  args.min_size, args.min_fill, args.max_side, args.seed,
                                  args.skip_missing, progress=not args.quiet, exclusion=exclusion)


# ---------------------------------------------------------------- parsers

def _shard_args(p: argparse.ArgumentParser, seed: bool = True) -> None:
    p.add_argument("--out", required=True, help="output shard set folder (resumed if it exists)")
    p.add_argument("--max-count", type=_positive, default=10_000, help="samples per shard at most")
    p.add_argument("--max-bytes", type=_positive, default=1 << 30, help="bytes per shard at most")
    if seed:
        p.add_argument("--seed", type=int, default=0, help="seed of the sample order and of every draw")
    _quiet(p)


def _quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _diffusers_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="", help="diffusers model id or local folder ('tiny': random)")
    p.add_argument("--steps", type=_positive, default=25, help="diffusion steps per image")
    p.add_argument("--guidance", type=float, default=7.5, help="classifier-free guidance scale")
    p.add_argument("--size", type=_positive, default=None, help="generated image size in pixels")
    p.add_argument("--device", default="cpu", help="torch device of the models")
    if not any(a.dest == "batch_size" for a in p._actions):
        p.add_argument("--batch-size", type=_positive, default=8, help="images per model batch")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default=None, help="open_clip architecture (models.load_model); may be left "
                   "out with a compclip checkpoint, which names its own")
    p.add_argument("--pretrained", default="", help="open_clip tag, or a checkpoint: file, best/latest "
                   "pointer, checkpoints/ folder or run folder ('': random weights)")
    if not any(a.dest == "device" for a in p._actions):
        p.add_argument("--device", default="cpu", help="torch device of the model")
    if not any(a.dest == "batch_size" for a in p._actions):
        p.add_argument("--batch-size", type=_positive, default=64, help="images per model batch")


def _prepare_parsers(sub) -> None:
    prep = sub.add_parser("prepare", help="real data sources -> shard sets (docs/data_prep.md)")
    psub = add_subparsers(prep, title="sources")
    psub.dest = "source"  # args.cmd stays "prepare"

    p = psub.add_parser("coco", help="COCO / Karpathy captions + images -> shards with neg.json "
                        "(and nn.json + keys.tsv with --knn)")
    p.add_argument("--captions", default=None, help="COCO 2017 captions_<split>2017.json")
    p.add_argument("--karpathy", default=None, help="Karpathy dataset_coco.json (instead of --captions)")
    p.add_argument("--split", default="train",
                   help="Karpathy splits to keep, comma-separated (train, restval, val, test)")
    p.add_argument("--images", required=True, help="images folder: train2017/ for --captions; "
                   "the folder holding train2014/ and val2014/ for --karpathy")
    p.add_argument("--rules", choices=("compclip", "negclip"), default="compclip",
                   help="negative rule set: compclip (guarded swap / replace / add, plausibility filter) "
                        "or negclip (NegCLIP's swaps as its authors' script made them)")
    p.add_argument("--spacy-model", default=SPACY_MODEL, help="installed spaCy pipeline for the negatives")
    p.add_argument("--require-negative", action="store_true",
                   help="leave out captions that get no negative, as NegCLIP's script did")
    p.add_argument("--one-caption-per-image", action="store_true",
                   help="keep only the first caption of each image (input order), as NegCLIP's data script did")
    p.add_argument("--negatives", default=None,
                   help="negative kinds, comma-separated (swap, replace:obj, add, ...; "
                        "default: every kind of the rule set)")
    p.add_argument("--mode", choices=("sample", "all"), default="sample",
                   help="one negative per sub-kind, or every distinct one up to --cap")
    p.add_argument("--cap", type=_positive, default=8, help="negatives per sub-kind at most with --mode all")
    p.add_argument("--workers", type=_positive, default=1, help="negative-generation processes")
    p.add_argument("--vocab", default=None, help="replacement vocabulary JSON to reuse")
    p.add_argument("--knn", type=int, default=0, metavar="K",
                   help="then add the K nearest-neighbour images (NegCLIP: 3)")
    p.add_argument("--base", default=None, help="with --knn: where the images + negatives set "
                   "goes first (default <out>_base; a complete set there is reused)")
    p.add_argument("--method", default="auto", choices=["auto", "exact", "flat", "approx"],
                   help="with --knn: neighbour search (see `datagen knn --help`)")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"],
                   help="with --knn: embeddings stored as")
    _prepare_common(p)
    _model_args(p)
    _shard_args(p, seed=True)
    p.set_defaults(run=cmd_prepare_coco)

    p = psub.add_parser("trohn", help="TROHN-Text / TROHN-Img (Hugging Face) -> shards")
    p.add_argument("--dataset", required=True, help="imirandam/TROHN-Text or imirandam/TROHN-Img, "
                   "a save_to_disk folder, a local clone or a .parquet file")
    p.add_argument("--split", default="train", help="dataset split")
    p.add_argument("--revision", default=None, help="dataset revision (commit) on the hub")
    p.add_argument("--images-root", required=True, help="COCO train2017/ folder (anchor images)")
    p.add_argument("--group", action=argparse.BooleanOptionalAction, default=None,
                   help="one sample per (image, caption) with all its negatives "
                        "(if not given: yes for TROHN-Text, no for TROHN-Img)")
    p.add_argument("--label", default="auto", help="negative labels: auto (type/subtype columns "
                   "if present, else inferred), infer, dataset, or a fixed KIND:SUBKIND")
    _prepare_common(p)
    _shard_args(p)
    p.set_defaults(run=cmd_prepare_trohn)

    p = psub.add_parser("cocobank", help="COCO instance cut-outs -> object bank folder for stitch")
    p.add_argument("--instances", required=True, help="COCO instances_train2017.json")
    p.add_argument("--images", required=True, help="train2017/ folder")
    p.add_argument("--out", required=True, help="object bank folder (resumed if it exists)")
    p.add_argument("--per-class", type=_positive, default=100, help="cut-outs per category at most")
    p.add_argument("--min-size", type=int, default=48, help="box sides in pixels, at least")
    p.add_argument("--min-fill", type=float, default=0.3, help="outline area / box area, at least")
    p.add_argument("--max-side", type=_positive, default=128, help="cut-outs shrunk to this size")
    p.add_argument("--seed", type=int, default=0, help="seed of the per-category draw")
    p.add_argument("--skip-missing", action="store_true",
                   help="skip and count missing / unreadable images instead of stopping")
    _exclusion_args(p, "the --instances file")
    _quiet(p)
    p.set_defaults(run=cmd_prepare_cocobank)


def _prepare_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--skip-missing", action="store_true",
                   help="skip and count missing / unreadable images instead of stopping")
    p.add_argument("--max-side", type=_positive, default=None,
                   help="re-encode images larger than this (JPEG q95); if not given: bytes as they are")
    p.add_argument("--limit", type=_positive, default=None, help="read at most this many items")
    _exclusion_args(p, "the captions file")


def _exclusion_args(p: argparse.ArgumentParser, beside: str) -> None:
    p.add_argument("--benchmarks-root", default="data/benchmarks",
                   help="benchmark files whose COCO images are left out (docs/benchmark_data.md)")
    p.add_argument("--keep-benchmark-images", action="store_true",
                   help="do not leave benchmark images out (the output's record says so)")
    p.add_argument("--karpathy-ref", default=None, help="Karpathy dataset_coco.json whose val and "
                   "test images are left out (if not given: prepare coco's --karpathy input, if any)")
    p.add_argument("--val2017", default=None, help="captions_val2017.json whose images are left "
                   f"out (if not given: one next to {beside}, if any)")


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser("python -m datagen", __doc__.split("\n\n")[0].splitlines()[0] + " "
                         "Each command's --help says more; docs/data_prep.md, docs/images.md, "
                         "docs/world.md and docs/negatives.md describe what they make.")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log details, and show the full traceback of an error")
    sub = add_subparsers(parser)

    p = sub.add_parser("stitch", help="left-right / above-below stitched pairs from an object bank")
    p.add_argument("--bank", required=True, help="folder of object images (+ backgrounds/)")
    p.add_argument("--world-bank", type=int, default=0, metavar="SIZE",
                   help="first write the synthetic world's object bank at this size into --bank")
    p.add_argument("--nouns", default="", help="first generate a bank from these comma-separated "
                   "nouns with diffusers (--model)")
    p.add_argument("--n", type=_positive, required=True, help="number of pairs (samples)")
    p.add_argument("--canvas", type=_size, default="224", help="canvas size, e.g. 224 or 320x224")
    p.add_argument("--relations", default="left,above", help="left, above or both, comma-separated")
    p.add_argument("--scale", type=_scale, default="0.25,0.45",
                   help="object size range, fractions of the canvas side")
    p.add_argument("--gap", type=int, default=4, help="pixels between the two objects at least")
    p.add_argument("--backgrounds", default=None, help="backgrounds folder (if not given: <bank>/backgrounds)")
    p.add_argument("--ext", default="jpg", choices=["jpg", "png"], help="image format")
    p.add_argument("--key-prefix", default="lr", help="sample keys are <prefix><pair index>")
    _diffusers_args(p)
    _shard_args(p)
    p.set_defaults(run=cmd_stitch)

    p = sub.add_parser("knn", help="add the K nearest-neighbour images (nn.json) to a shard set")
    p.add_argument("--src", required=True, help="input shard set")
    p.add_argument("--k", type=_positive, default=3, help="neighbours per image")
    p.add_argument("--method", default="auto", choices=["auto", "exact", "flat", "approx"],
                   help="auto: exact up to 300k images, else approx; flat: faiss IndexFlatIP "
                        "(same answers as exact, slower here)")
    p.add_argument("--factory", default=None,
                   help="faiss index factory for approx (if not given: IVF<4sqrtN>,Flat)")
    p.add_argument("--nprobe", type=_positive, default=16, help="IVF lists searched per query (approx)")
    p.add_argument("--dup-threshold", type=float, default=0.999,
                   help="cosine at or above which two images count as duplicates")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"], help="embeddings stored as")
    p.add_argument("--work-dir", default=None, help="embeddings memmap folder (if not given: <out>/.knn)")
    p.add_argument("--workers", type=int, default=None,
                   help="image decoding processes for the embedding pass (if not given: min(4, cores); 0: none)")
    _model_args(p)
    _shard_args(p, seed=False)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)  # no effect; old scripts pass it
    p.set_defaults(run=cmd_knn)

    p = sub.add_parser("genimages", help="an image per negative caption, as the partner pair")
    p.add_argument("--src", required=True, help="input shard set with neg.json")
    p.add_argument("--backend", default="renderer", choices=["renderer", "diffusers"],
                   help="renderer: the synthetic world (offline); diffusers: --model")
    p.add_argument("--kinds", default="", help="negative kinds to depict, comma-separated ('': all)")
    p.add_argument("--subkinds", default="", help="negative sub-kinds to depict, comma-separated ('': all)")
    p.add_argument("--per-sample", type=_positive, default=1, help="partners per source sample at most")
    p.add_argument("--candidates", type=_positive, default=1, help="images drawn per caption")
    p.add_argument("--pick", default="first", choices=["first", "clip"],
                   help="which candidate to keep (clip: best score under --arch/--pretrained)")
    p.add_argument("--gen-batch", type=_positive, default=16, help="captions per generation batch")
    p.add_argument("--ext", default="jpg", choices=["jpg", "png"], help="image format")
    _diffusers_args(p)
    _model_args(p)
    _shard_args(p)
    p.set_defaults(run=cmd_genimages)
    _prepare_parsers(sub)

    p = sub.add_parser("shuffle", help="rewrite a shard set in a seeded global random order "
                       "(two passes, bounded memory)")
    p.add_argument("--src", default=None, help="input shard set (complete)")
    p.add_argument("legacy", nargs="*", metavar="SRC OUT", help=argparse.SUPPRESS)
    p.add_argument("--buckets", type=_positive, default=None,
                   help="temporary buckets; memory holds one (if not given: one per 256 MiB of input)")
    p.add_argument("--work-dir", default=None, help="bucket folder (if not given: <out>/.shuffle)")
    _shard_args(p)
    p.set_defaults(run=cmd_shuffle)
    for action in p._actions:  # --out given positionally (old spelling) is checked in main
        if action.dest == "out":
            action.required, action.default = False, None

    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


def _legacy_shuffle(parser: argparse.ArgumentParser, args) -> None:
    """`shuffle SRC OUT` (before 0.2) -> `shuffle --src SRC --out OUT`, with a note."""
    if args.legacy:
        if len(args.legacy) != 2 or args.src or args.out:
            parser.error("shuffle takes --src SRC --out OUT")
        deprecated("shuffle SRC OUT", "shuffle --src SRC --out OUT")
        args.src, args.out = args.legacy
    if not args.src or not args.out:
        parser.error("shuffle needs --src SRC and --out OUT")


def _summary(args, manifest: dict) -> dict:
    if args.cmd == "prepare" and args.source == "cocobank":
        return manifest
    from compclip.shardset.shards import verify_shard_set
    # what this run wrote, finished or not (a writer stopped early leaves `complete: false`)
    totals = verify_shard_set(args.out, allow_incomplete=True)
    skipped: dict[str, int] = {}
    for shard in manifest["shards"]:
        for reason, count in shard["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + count
    extra = {k: manifest[k] for k in ("knn", "genimages", "object_bank", "source", "order",
                                      "excluded", "exclusion", "image_ids", "shuffle")
             if k in manifest}
    return {"out": str(args.out), "verified": totals, "skipped": skipped, **extra}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:  # their own parsers, arguments unchanged
        import importlib
        module = importlib.import_module(DELEGATED[argv[0]][0])
        if argv[0] == "world":
            return module.main(argv[1:], prog="python -m datagen world")
        return module.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd in DELEGATED:
        parser.error(f"'{args.cmd}' takes its own options: python -m datagen {args.cmd} ...")
    if args.cmd == "shuffle":
        _legacy_shuffle(parser, args)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")

    def work() -> int:
        with contextlib.ExitStack() as args.locks:  # the output locks `pin` takes, released at the end
            print(json.dumps(_summary(args, args.run(args)), indent=1))
        return 0
    return run(work, verbose=args.verbose)


if __name__ == "__main__":
    exit_program(main())
