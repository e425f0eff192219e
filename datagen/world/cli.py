"""`python -m datagen.world build`: one command for a seed's split, training shards, object bank
and every benchmark set.

    DIR/split.json              held-out compositions (splits.py)
    DIR/train/                  shard set: images + captions (+ negatives with --negatives)
    DIR/train_generated/        with --partners generated|all: + negatives + generated partners
    DIR/train_mirrored/         with --partners mirrored|all: + mirrored partners
    DIR/object_bank/            single objects (held-out bindings excluded) + backgrounds
    DIR/benchmarks/             VISLA, SugarCrepe, SugarCrepe++, BiVLC, ARO (benchmarks.py)
    DIR/world.json              the arguments, counts and timings of the run

Deterministic for a seed; an interrupted build resumes its shard sets where they stopped.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from datagen.world.bank import write_object_bank
from datagen.world.benchmarks import BenchSizes, write_benchmarks
from datagen.world.shards import PARTNERS, write_train_set
from datagen.world.splits import Split

DEFAULT_TRAIN_SIZE = 4000
DEFAULT_SIZE = 64


def build(out: str | Path, seed: int = 0, train_size: int = DEFAULT_TRAIN_SIZE,
          size: int = DEFAULT_SIZE, negatives: bool = False, partners: str = "none",
          bench_scale: float = 1.0, shard_size: int = 1000, progress: bool = True) -> dict:
    """Write everything for one seed under `out`; returns the run summary (also world.json)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kinds = list(PARTNERS) if partners == "all" else [] if partners == "none" else [partners]
    for kind in kinds:
        if kind not in PARTNERS:
            raise ValueError(f"--partners must be one of generated, mirrored, all, none; got '{partners}'")
    split = Split.make(seed)
    split.save(out, seed=seed)
    summary: dict = {"seed": seed, "size": size, "train_size": train_size, "negatives": negatives,
                     "partners": kinds, "bench_scale": bench_scale, "sets": {}, "seconds": {}}

    def log(msg: str) -> None:
        if progress:
            print(msg, file=sys.stderr, flush=True)

    def timed(name: str, fn):
        t0 = time.time()
        result = fn()
        summary["seconds"][name] = round(time.time() - t0, 2)
        return result

    log(f"world: seed {seed}, {size} px -> {out}")
    sets = [("train", None)] + [(f"train_{k}", k) for k in kinds]
    for name, kind in sets:
        manifest = timed(name, lambda: write_train_set(
            out / name, train_size, seed, split, size, with_negatives=negatives,
            partner=kind, shard_size=shard_size, progress=progress))
        summary["sets"][name] = sum(s["samples"] for s in manifest["shards"])
    bank = timed("object_bank", lambda: write_object_bank(
        out / "object_bank", size=size, seed=seed, exclude=split.bindings))
    summary["sets"]["object_bank"] = len(bank)
    log("  benchmarks ...")
    counts = timed("benchmarks", lambda: write_benchmarks(
        out / "benchmarks", split, seed, size, BenchSizes().scaled(bench_scale), progress=progress))
    summary["sets"].update({f"benchmarks/{k}": v for k, v in counts.items()})
    summary["seconds"]["total"] = round(sum(summary["seconds"].values()), 2)
    (out / "world.json").write_text(json.dumps(summary, indent=1))
    log(f"world: done in {summary['seconds']['total']} s")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m datagen.world",
                                     description="The built-in synthetic scene world.")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write training shards, object bank and all benchmarks")
    b.add_argument("--out", required=True, help="output folder")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--train-size", type=int, default=DEFAULT_TRAIN_SIZE)
    b.add_argument("--size", type=int, default=DEFAULT_SIZE, help="image side in pixels")
    b.add_argument("--negatives", action="store_true", help="add hard negatives to DIR/train")
    b.add_argument("--partners", default="none", choices=["generated", "mirrored", "all", "none"],
                   help="also write DIR/train_<kind> with partner images")
    b.add_argument("--bench-scale", type=float, default=1.0, help="multiply benchmark sizes")
    b.add_argument("--shard-size", type=int, default=1000, help="samples per tar shard")
    b.add_argument("--quiet", action="store_true")
    r = sub.add_parser("render", help="render one caption of the grammar to an image file")
    r.add_argument("caption")
    r.add_argument("--out", required=True)
    r.add_argument("--size", type=int, default=DEFAULT_SIZE)
    r.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.out, args.seed, args.train_size, args.size, args.negatives, args.partners,
              args.bench_scale, args.shard_size, progress=not args.quiet)
    else:
        from datagen.world import ParseError, render_caption
        try:
            render_caption(args.caption, args.size, args.seed).save(args.out)
        except ParseError as err:
            print(err, file=sys.stderr)
            return 2
    return 0
