"""`python -m datagen prepare coco|trohn|cocobank`: real data sources -> shard sets (or an object
bank folder), benchmark images left out (docs/data_prep.md).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from compclip.cli import InputError, add_subparsers, comma_list
from compclip.datagen.cliargs import (abs_path, check_model, load_scorer, model_args, model_options, pin, positive_int,
                             quiet_arg, shard_args, shard_options)
from compclip.datagen.negatives.base import SPACY_MODEL


def _input_file(path: Optional[str], option: str) -> None:
    if path and not Path(path).is_file():
        raise InputError(f"{path}: no such file ({option})")


def cmd_prepare_coco(args) -> dict:
    from compclip.datagen.prepare.coco import default_base
    if (args.captions is None) == (args.karpathy is None):
        raise InputError("give exactly one caption source: --captions FILE (COCO 2017) or "
                         "--karpathy FILE (dataset_coco.json)")
    _input_file(args.captions, "--captions")
    _input_file(args.karpathy, "--karpathy")
    if args.negatives is None:  # every kind of the rule set
        args.negatives = "swap,replace,add" if args.rules == "compclip" else "swap"
    if not Path(args.images).is_dir():
        raise InputError(f"{args.images}: no such folder of images (--images)")
    stage1 = {"--captions": abs_path(args.captions), "--karpathy": abs_path(args.karpathy),
              "--split": comma_list(args.split) if args.karpathy else None,
              "--images": abs_path(args.images), "--negatives": comma_list(args.negatives),
              "--rules": args.rules, "--spacy-model": args.spacy_model,
              "--require-negative": args.require_negative,
              "--one-caption-per-image": args.one_caption_per_image,
              "--mode": args.mode, "--cap": args.cap, "--seed": args.seed, "--vocab": abs_path(args.vocab),
              "--max-side": args.max_side, "--limit": args.limit, "--max-count": args.max_count}
    captions = [args.captions or args.karpathy]
    if args.knn:
        check_model(args)
        base = Path(args.base) if args.base else default_base(args.out)
        pin(args, {**stage1, "--knn": args.knn, "--method": args.method,
                   "--dtype": args.dtype, **model_options(args)}, captions)
        from compclip.shardset.shards import check_pinned, is_complete
        if is_complete(base):  # reused as it is, read-only: compared, not written
            check_pinned(base, stage1, captions)
        elif not is_complete(args.out):
            pin(args, stage1, captions, out=str(base))
    else:
        pin(args, stage1, captions)
    from compclip.datagen.prepare.coco import CocoOptions, prepare_coco
    knn_options = {"method": args.method, "batch_size": args.batch_size, "dtype": args.dtype}
    options = CocoOptions(captions=args.captions, karpathy=args.karpathy,
                          splits=comma_list(args.split), kinds=comma_list(args.negatives) or None,
                          rules=args.rules, spacy_model=args.spacy_model,
                          require_negative=args.require_negative,
                          one_caption_per_image=args.one_caption_per_image,
                          mode=args.mode, cap=args.cap, seed=args.seed, workers=args.workers,
                          shard_size=args.max_count, skip_missing=args.skip_missing,
                          max_side=args.max_side, limit=args.limit, vocab=args.vocab, knn=args.knn,
                          scorer_factory=lambda: load_scorer(args), base=args.base,
                          knn_options=knn_options, progress=not args.quiet,
                          **_exclusion_kwargs(args))
    return prepare_coco(args.out, args.images, options)


def cmd_prepare_trohn(args) -> dict:
    if not Path(args.images_root).is_dir():
        raise InputError(f"{args.images_root}: no such folder of images (--images-root)")
    pin(args, {"--dataset": args.dataset, "--split": args.split, "--revision": args.revision,
               "--images-root": abs_path(args.images_root), "--group": args.group,
               "--label": args.label, "--max-side": args.max_side, "--limit": args.limit,
               "--seed": args.seed, **shard_options(args)})  # the dataset's files: by prepare_trohn
    from compclip.datagen.prepare.trohn import TrohnOptions, prepare_trohn
    options = TrohnOptions(split=args.split, revision=args.revision, group=args.group, label=args.label,
                           skip_missing=args.skip_missing, max_side=args.max_side,
                           shard_size=args.max_count, max_bytes=args.max_bytes, limit=args.limit,
                           progress=not args.quiet, seed=args.seed, **_exclusion_kwargs(args))
    return prepare_trohn(args.dataset, args.out, args.images_root, options)


def _exclusion_kwargs(args) -> dict:
    """The benchmark-exclusion fields of `CocoOptions` / `TrohnOptions`."""
    return {"benchmarks_root": args.benchmarks_root, "keep_benchmark_images": args.keep_benchmark_images,
            "karpathy_ref": args.karpathy_ref, "val2017": args.val2017}


COCOBANK_RECORD = "cocobank.json"  # the options of `prepare cocobank`, in its bank folder


def cmd_prepare_cocobank(args) -> dict:
    _input_file(args.instances, "--instances")
    if not Path(args.images).is_dir():
        raise InputError(f"{args.images}: no such folder of images (--images)")
    from compclip.datagen.prepare.exclude import benchmark_exclusion, sibling_val2017
    exclusion = benchmark_exclusion(args.benchmarks_root, karpathy=args.karpathy_ref,
                                    val2017=args.val2017 or sibling_val2017(args.instances),
                                    keep=args.keep_benchmark_images)
    pin(args, {"--instances": abs_path(args.instances), "--per-class": args.per_class,
               "--min-size": args.min_size, "--min-fill": args.min_fill,
               "--max-side": args.max_side, "--seed": args.seed,
               "benchmark images left out": exclusion.fingerprint()}, [args.instances], COCOBANK_RECORD)
    from compclip.datagen.prepare.cocobank import write_coco_object_bank
    return write_coco_object_bank(args.instances, args.images, args.out, args.per_class,
                                  args.min_size, args.min_fill, args.max_side, args.seed,
                                  args.skip_missing, progress=not args.quiet, exclusion=exclusion)


def add_parsers(sub) -> None:
    """`prepare coco|trohn|cocobank` as a subcommand of `sub`."""
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
    p.add_argument("--cap", type=positive_int, default=8, help="negatives per sub-kind at most with --mode all")
    p.add_argument("--workers", type=positive_int, default=1, help="negative-generation processes")
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
    model_args(p)
    shard_args(p, seed=True)
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
    shard_args(p)
    p.set_defaults(run=cmd_prepare_trohn)

    p = psub.add_parser("cocobank", help="COCO instance cut-outs -> object bank folder for stitch")
    p.add_argument("--instances", required=True, help="COCO instances_train2017.json")
    p.add_argument("--images", required=True, help="train2017/ folder")
    p.add_argument("--out", required=True, help="object bank folder (resumed if it exists)")
    p.add_argument("--per-class", type=positive_int, default=100, help="cut-outs per category at most")
    p.add_argument("--min-size", type=int, default=48, help="box sides in pixels, at least")
    p.add_argument("--min-fill", type=float, default=0.3, help="outline area / box area, at least")
    p.add_argument("--max-side", type=positive_int, default=128, help="cut-outs shrunk to this size")
    p.add_argument("--seed", type=int, default=0, help="seed of the per-category draw")
    p.add_argument("--skip-missing", action="store_true",
                   help="skip and count missing / unreadable images instead of stopping")
    _exclusion_args(p, "the --instances file")
    quiet_arg(p)
    p.set_defaults(run=cmd_prepare_cocobank)


def _prepare_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--skip-missing", action="store_true",
                   help="skip and count missing / unreadable images instead of stopping")
    p.add_argument("--max-side", type=positive_int, default=None,
                   help="re-encode images larger than this (JPEG q95); if not given: bytes as they are")
    p.add_argument("--limit", type=positive_int, default=None, help="read at most this many items")
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
