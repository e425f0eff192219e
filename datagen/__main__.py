"""Command line for the image generators: `python -m datagen {stitch,knn,genimages} ...`.

Each subcommand writes a shard set (resuming one a killed run left), reads it back with
`verify_shard_set` and prints the manifest summary as JSON. Hard-negative captions have their
own CLI, `python -m datagen.negatives`; the synthetic world, `python -m datagen.world`.
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
                   args.max_count, args.max_bytes)


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
    from datagen.shards import verify_shard_set
    manifest = args.run(args)
    totals = verify_shard_set(args.out)
    skipped: dict[str, int] = {}
    for shard in manifest["shards"]:
        for reason, count in shard["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + count
    extra = {k: manifest[k] for k in ("knn", "genimages", "object_bank") if k in manifest}
    print(json.dumps({"out": str(args.out), "verified": totals, "skipped": skipped, **extra}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
