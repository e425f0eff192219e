"""Command line for the image generators and real-data preparation:
`python -m datagen {stitch,knn,genimages,prepare,shuffle} ...`.

Each subcommand writes a shard set (resuming one a killed run left), reads it back with
`verify_shard_set` and prints the manifest summary as JSON (`prepare cocobank` writes an object
bank folder and prints its counts). `prepare coco|trohn|cocobank` turn COCO, TROHN-Text/-Img and
COCO instances into shard sets / an object bank (docs/data_prep.md); they leave benchmark images
out unless `--keep-benchmark-images`. Every set is written in a seeded global order
(`datagen.order`); `shuffle` puts an existing sharded set into one in bounded memory. Hard-negative captions have
their own CLI, `python -m datagen.negatives`; the synthetic world, `python -m datagen.world`.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _size(text: str) -> tuple[int, int]:
    w, _, h = text.lower().partition("x")
    return int(w), int(h or w)


def _floats(text: str) -> tuple[float, float]:
    lo, hi = (float(t) for t in text.split(","))
    return lo, hi


def _shard_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output shard set folder (resumed if it exists)")
    p.add_argument("--max-count", type=int, default=10_000, help="samples per shard at most")
    p.add_argument("--max-bytes", type=int, default=1 << 30, help="bytes per shard at most")
    p.add_argument("--seed", type=int, default=0)


def _diffusers_backend(args):
    from datagen.genimages import DiffusersBackend, tiny_pipeline
    common = dict(steps=args.steps, guidance=args.guidance, size=args.size,
                  batch_size=args.batch_size, device=args.device)
    if args.model == "tiny":  # random weights: a smoke test, not real images
        return DiffusersBackend(tiny_pipeline(args.seed, args.size or 32), name="diffusers:tiny", **common)
    return DiffusersBackend.from_pretrained(args.model, **common)


def _scorer(args):
    from eval.scorer import OpenClipScorer
    from models import load_model
    loaded = load_model(args.arch, args.pretrained or None, device=args.device)
    return OpenClipScorer.from_loaded(loaded, batch_size=args.batch_size, device=args.device)


def cmd_stitch(args) -> dict:
    from datagen.stitch import write_stitched
    bank = Path(args.bank)
    if args.world_bank:
        from datagen.world import write_object_bank
        write_object_bank(bank, args.world_bank, args.seed)
    elif args.nouns:
        from datagen.genimages import write_generated_object_bank
        write_generated_object_bank(_diffusers_backend(args), _csv(args.nouns), bank, args.seed)
    return write_stitched(args.out, bank, args.n, args.seed, _size(args.canvas), _csv(args.relations),
                          _floats(args.scale), args.gap, args.ext, args.backgrounds,
                          args.key_prefix, args.max_count, args.max_bytes)


def cmd_knn(args) -> dict:
    from datagen.knn import run_knn
    return run_knn(args.src, args.out, _scorer(args), args.k, args.method, args.batch_size,
                   args.dtype, args.dup_threshold, args.factory, args.nprobe, args.work_dir,
                   args.max_count, args.max_bytes, args.workers, progress=True)


def cmd_genimages(args) -> dict:
    from datagen.genimages import RendererBackend, write_generated
    if args.backend == "renderer":
        backend = RendererBackend(size=args.size or 224)
    else:
        if not args.model:
            raise SystemExit("genimages --backend diffusers needs --model (hub id, local folder or 'tiny')")
        backend = _diffusers_backend(args)
    scorer = _scorer(args) if args.pick == "clip" else None
    return write_generated(args.src, args.out, backend, _csv(args.kinds) or None,
                           _csv(args.subkinds) or None, args.per_sample, args.candidates, args.pick,
                           scorer, args.seed, args.ext, args.gen_batch, args.max_count, args.max_bytes)


def cmd_prepare_coco(args) -> dict:
    from datagen.prepare.coco import prepare_coco
    knn_options = {"method": args.method, "batch_size": args.batch_size, "dtype": args.dtype}
    return prepare_coco(args.out, args.images, captions=args.captions, karpathy=args.karpathy,
                        splits=_csv(args.split), kinds=_csv(args.negatives) or None,
                        mode=args.mode, cap=args.cap, seed=args.seed, workers=args.workers,
                        shard_size=args.max_count, skip_missing=args.skip_missing,
                        max_side=args.max_side, limit=args.limit, vocab=args.vocab, knn=args.knn,
                        scorer_factory=lambda: _scorer(args), base=args.base,
                        knn_options=knn_options, progress=not args.quiet,
                        **_exclusion_kwargs(args))


def cmd_prepare_trohn(args) -> dict:
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
    from datagen.shuffle import shuffle_shard_set
    return shuffle_shard_set(args.src, args.out, args.seed, args.buckets, args.work_dir,
                             args.max_count, args.max_bytes, progress=not args.quiet)


def cmd_prepare_cocobank(args) -> dict:
    from datagen.prepare.cocobank import write_coco_object_bank
    return write_coco_object_bank(args.instances, args.images, args.out, args.per_class,
                                  args.min_size, args.min_fill, args.max_side, args.seed,
                                  args.skip_missing)


def _prepare_parsers(sub) -> None:
    prep = sub.add_parser("prepare", help="real data sources -> shard sets (docs/data_prep.md)")
    psub = prep.add_subparsers(dest="source", required=True)

    p = psub.add_parser("coco", help="COCO / Karpathy captions + images -> shards with neg.json "
                        "(and nn.json + keys.tsv with --knn)")
    p.add_argument("--captions", default=None, help="COCO 2017 captions_<split>2017.json")
    p.add_argument("--karpathy", default=None, help="Karpathy dataset_coco.json (instead of --captions)")
    p.add_argument("--split", default="train",
                   help="Karpathy splits to keep, comma-separated (train, restval, val, test)")
    p.add_argument("--images", required=True, help="images folder: train2017/ for --captions; "
                   "the folder holding train2014/ and val2014/ for --karpathy")
    p.add_argument("--negatives", default="swap,replace,add",
                   help="negative kinds, comma-separated (swap, replace:obj, add, ...)")
    p.add_argument("--mode", choices=("sample", "all"), default="sample",
                   help="one negative per sub-kind, or every distinct one up to --cap")
    p.add_argument("--cap", type=int, default=8)
    p.add_argument("--workers", type=int, default=1, help="negative-generation processes")
    p.add_argument("--vocab", default=None, help="replacement vocabulary JSON to reuse")
    p.add_argument("--knn", type=int, default=0, metavar="K",
                   help="then add the K nearest-neighbour images (NegCLIP: 3)")
    p.add_argument("--base", default=None, help="with --knn: where the images + negatives set "
                   "goes first (default <out>_base; a complete set there is reused)")
    p.add_argument("--method", default="auto", choices=["auto", "exact", "flat", "approx"])
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"])
    _prepare_common(p)
    _model_args(p)
    _shard_args(p)
    p.set_defaults(run=cmd_prepare_coco)

    p = psub.add_parser("trohn", help="TROHN-Text / TROHN-Img (Hugging Face) -> shards")
    p.add_argument("--dataset", required=True, help="imirandam/TROHN-Text or imirandam/TROHN-Img, "
                   "a save_to_disk folder, a local clone or a .parquet file")
    p.add_argument("--split", default="train")
    p.add_argument("--revision", default=None, help="dataset revision (commit) on the hub")
    p.add_argument("--images-root", required=True, help="COCO train2017/ folder (anchor images)")
    p.add_argument("--group", action=argparse.BooleanOptionalAction, default=None,
                   help="one sample per (image, caption) with all its negatives "
                        "(default: yes for TROHN-Text, no for TROHN-Img)")
    p.add_argument("--label", default="auto", help="negative labels: auto (type/subtype columns "
                   "if present, else inferred), infer, dataset, or a fixed KIND:SUBKIND")
    _prepare_common(p)
    _shard_args(p)
    p.set_defaults(run=cmd_prepare_trohn)

    p = psub.add_parser("cocobank", help="COCO instance cut-outs -> object bank folder for stitch")
    p.add_argument("--instances", required=True, help="COCO instances_train2017.json")
    p.add_argument("--images", required=True, help="train2017/ folder")
    p.add_argument("--out", required=True, help="object bank folder")
    p.add_argument("--per-class", type=int, default=100)
    p.add_argument("--min-size", type=int, default=48, help="box sides in pixels, at least")
    p.add_argument("--min-fill", type=float, default=0.3, help="outline area / box area, at least")
    p.add_argument("--max-side", type=int, default=128, help="cut-outs shrunk to this size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-missing", action="store_true")
    p.set_defaults(run=cmd_prepare_cocobank)


def _prepare_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--skip-missing", action="store_true",
                   help="skip and count missing / unreadable images instead of stopping")
    p.add_argument("--max-side", type=int, default=None,
                   help="re-encode images larger than this (JPEG q95); default: bytes as they are")
    p.add_argument("--limit", type=int, default=None, help="read at most this many items")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--benchmarks-root", default="data/benchmarks",
                   help="benchmark files whose COCO images are left out (docs/benchmark_data.md)")
    p.add_argument("--keep-benchmark-images", action="store_true",
                   help="do not leave benchmark images out (the manifest says so)")
    p.add_argument("--karpathy-ref", default=None, help="Karpathy dataset_coco.json whose val and "
                   "test images are left out (default: the --karpathy input, if any)")
    p.add_argument("--val2017", default=None, help="captions_val2017.json whose images are left "
                   "out (default: one next to the captions file, if any)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m datagen", description=__doc__.splitlines()[0],
        epilog="Hard-negative captions: python -m datagen.negatives; synthetic world: "
               "python -m datagen.world. See docs/images.md.")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stitch", help="left-right / above-below stitched pairs from an object bank")
    p.add_argument("--bank", required=True, help="folder of object images (+ backgrounds/)")
    p.add_argument("--world-bank", type=int, default=0, metavar="SIZE",
                   help="first write the synthetic world's object bank at this size into --bank")
    p.add_argument("--nouns", default="", help="first generate a bank from these comma-separated "
                   "nouns with diffusers (--model)")
    p.add_argument("--n", type=int, required=True, help="number of pairs (samples)")
    p.add_argument("--canvas", default="224", help="canvas size, e.g. 224 or 320x224")
    p.add_argument("--relations", default="left,above", help="left, above or both")
    p.add_argument("--scale", default="0.25,0.45", help="object size range, fraction of the canvas")
    p.add_argument("--gap", type=int, default=4, help="pixels between the two objects at least")
    p.add_argument("--backgrounds", default=None, help="backgrounds folder (default <bank>/backgrounds)")
    p.add_argument("--ext", default="jpg", choices=["jpg", "png"])
    p.add_argument("--key-prefix", default="lr")
    _diffusers_args(p)
    _shard_args(p)
    p.set_defaults(run=cmd_stitch)

    p = sub.add_parser("knn", help="add the K nearest-neighbour images (nn.json) to a shard set")
    p.add_argument("--src", required=True, help="input shard set")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--method", default="auto", choices=["auto", "exact", "flat", "approx"],
                   help="auto: exact up to 300k images, else approx; flat: faiss IndexFlatIP "
                        "(same answers as exact, slower here)")
    p.add_argument("--factory", default=None, help="faiss index factory for approx (default IVF<4sqrtN>,Flat)")
    p.add_argument("--nprobe", type=int, default=16)
    p.add_argument("--dup-threshold", type=float, default=0.999,
                   help="cosine at or above which two images count as duplicates")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"])
    p.add_argument("--work-dir", default=None, help="embeddings memmap folder (default <out>/.knn)")
    p.add_argument("--workers", type=int, default=None,
                   help="image decoding processes for the embedding pass (default min(4, cores); 0: none)")
    _model_args(p)
    _shard_args(p)
    p.set_defaults(run=cmd_knn)

    p = sub.add_parser("genimages", help="an image per negative caption, as the partner pair")
    p.add_argument("--src", required=True, help="input shard set with neg.json")
    p.add_argument("--backend", default="renderer", choices=["renderer", "diffusers"])
    p.add_argument("--kinds", default="", help="negative kinds to depict (default all)")
    p.add_argument("--subkinds", default="", help="negative sub-kinds to depict (default all)")
    p.add_argument("--per-sample", type=int, default=1)
    p.add_argument("--candidates", type=int, default=1, help="images drawn per caption")
    p.add_argument("--pick", default="first", choices=["first", "clip"],
                   help="which candidate to keep (clip: best score under --arch/--pretrained)")
    p.add_argument("--gen-batch", type=int, default=16, help="captions per generation batch")
    p.add_argument("--ext", default="jpg", choices=["jpg", "png"])
    _diffusers_args(p)
    _model_args(p)
    _shard_args(p)
    p.set_defaults(run=cmd_genimages)
    _prepare_parsers(sub)

    p = sub.add_parser("shuffle", help="rewrite a shard set in a seeded global random order "
                       "(two passes, bounded memory)")
    p.add_argument("src", help="input shard set (complete)")
    p.add_argument("out", help="output shard set folder (resumed if it exists)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--buckets", type=int, default=None,
                   help="temporary buckets; memory holds one (default: one per 256 MiB of input)")
    p.add_argument("--work-dir", default=None, help="bucket folder (default <out>/.shuffle)")
    p.add_argument("--max-count", type=int, default=10_000, help="samples per shard at most")
    p.add_argument("--max-bytes", type=int, default=1 << 30, help="bytes per shard at most")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=cmd_shuffle)
    return parser


def _diffusers_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="", help="diffusers model id or local folder ('tiny': random)")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--guidance", type=float, default=7.5)
    p.add_argument("--size", type=int, default=None, help="generated image size in pixels")
    p.add_argument("--device", default="cpu")
    if not any(a.dest == "batch_size" for a in p._actions):
        p.add_argument("--batch-size", type=int, default=8, help="images per model batch")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default="ViT-B-32", help="open_clip architecture (models.load_model)")
    p.add_argument("--pretrained", default="", help="open_clip tag or checkpoint file")
    if not any(a.dest == "device" for a in p._actions):
        p.add_argument("--device", default="cpu")
    if not any(a.dest == "batch_size" for a in p._actions):
        p.add_argument("--batch-size", type=int, default=64, help="images per model batch")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from datagen.order import OrderMismatch
    from datagen.shards import verify_shard_set
    try:
        manifest = args.run(args)
    except (ValueError, OSError) as err:  # OSError: missing files, an unreachable hub
        if args.command not in ("prepare", "shuffle") and not isinstance(err, OrderMismatch):
            raise
        print(f"error: {err}", file=sys.stderr)  # one line naming the file / key / row
        return 2
    if args.command == "prepare" and args.source == "cocobank":
        print(json.dumps(manifest, indent=1))
        return 0
    totals = verify_shard_set(args.out)
    skipped: dict[str, int] = {}
    for shard in manifest["shards"]:
        for reason, count in shard["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + count
    extra = {k: manifest[k] for k in ("knn", "genimages", "object_bank", "source", "order",
                                      "excluded", "exclusion", "image_ids", "shuffle")
             if k in manifest}
    print(json.dumps({"out": str(args.out), "verified": totals, "skipped": skipped, **extra}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
