"""`python -m datagen world build`: one command for a seed's split, training shards, object bank
and every benchmark set.

    DIR/split.json              held-out compositions (splits.py)
    DIR/train/                  shard set: images + captions (+ negatives with --negatives;
                                --leftright-fraction F: that share of its captions state a
                                left/right relation, the others none; --object-pool K: the
                                scenes of every training set hold only K bindings;
                                --pool-per-shard: K bindings of their own per shard;
                                --object-couples: every binding, paired in fixed couples,
                                a scene showing one couple;
                                --fixed-order: a caption stating left/right names its two
                                objects in one fixed order)
    DIR/train_generated/        with --partners generated|all: + negatives + generated partners
    DIR/train_mirrored/         with --partners mirrored|all: + mirrored partners (their captions
                                keep the anchor's argument order; --mirrored-order drawn: a coin)
    DIR/object_bank/            single objects (held-out bindings excluded) + backgrounds
    DIR/benchmarks/             VISLA, SugarCrepe, SugarCrepe++, BiVLC, ARO (benchmarks.py)
    DIR/world.json              the arguments, counts and timings of the run (when done)
    DIR/build_options.json      the options that change the output (when it starts)

Deterministic for a seed; an interrupted build resumes its shard sets where they stopped. A
build holds DIR's lock (`datagen.outlock`) while it runs: a second build into DIR is refused in
one line naming the first. The
options that change the output are recorded in DIR/build_options.json when a build starts; rerunning into
DIR with another value of one is refused in one line. `world render CAPTION --out FILE` draws one
caption of the grammar. Errors are one line (exit 2: bad input, 3: a fault during the run,
docs/cli.md). Heavy modules are imported after the arguments are parsed, so `--help` is quick.
`python -m datagen.world` is the old spelling (a deprecation note, then the same program).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from compclip.cli import InputError, add_subparsers, make_parser, rename, run
from compclip.datagen.world.vocab import COLOURS, SHAPES

DEFAULT_TRAIN_SIZE = 4000
DEFAULT_SIZE = 64
MIN_SIZE = 16
PARTNER_CHOICES = ("generated", "mirrored", "all", "none")
SUMMARY = "world.json"  # written when the build is done
OPTIONS = "build_options.json"  # the options that change the output, written when it starts
MIN_POOL = 3  # --object-pool: a scene holds up to 3 objects
MAX_POOL = len(COLOURS) * len(SHAPES) - min(len(COLOURS), len(SHAPES))  # less the held-out bindings (splits.py)


def build_options(seed: int, train_size: int, size: int, negatives: bool, partners: str,
                  bench_scale: float, max_count: int, leftright_fraction: float | None = None,
                  object_pool: int | None = None, fixed_order: bool = False,
                  pool_per_shard: bool = False, mirrored_order: str = "same",
                  object_couples: bool = False) -> dict:
    """The options of `build` that change what it writes, by their command-line names
    (`--leftright-fraction`, `--object-pool`, `--pool-per-shard`, `--object-couples`,
    `--fixed-order` and `--mirrored-order` only when given, so a build without them records what
    it always did)."""
    options = {"--seed": seed, "--train-size": train_size, "--size": size, "--negatives": negatives,
               "--partners": partners, "--bench-scale": bench_scale, "--max-count": max_count}
    if leftright_fraction is not None:
        options["--leftright-fraction"] = leftright_fraction
    if object_pool is not None:
        options["--object-pool"] = object_pool
    if pool_per_shard:
        options["--pool-per-shard"] = True
    if object_couples:
        options["--object-couples"] = True
    if fixed_order:
        options["--fixed-order"] = True
    if mirrored_order != "same":
        options["--mirrored-order"] = mirrored_order
    return options


def check_options(train_size: int, size: int, partners: str, bench_scale: float, max_count: int,
           leftright_fraction: float | None = None, object_pool: int | None = None,
           pool_per_shard: bool = False, object_couples: bool = False) -> None:
    if object_couples and object_pool is not None:
        raise InputError("--object-couples and --object-pool: give one (each says which objects "
                         "a training scene holds)")
    if pool_per_shard and object_pool is None:
        raise InputError("--pool-per-shard: give --object-pool K too (the bindings of each shard's scenes)")
    if object_pool is not None and not MIN_POOL <= object_pool <= MAX_POOL:
        raise InputError(f"--object-pool {object_pool}: must be between {MIN_POOL} (a scene holds up "
                         f"to 3 objects) and {MAX_POOL} (the colour-shape bindings training may show)")
    if leftright_fraction is not None and not 0 <= leftright_fraction <= 1:
        raise InputError(f"--leftright-fraction {leftright_fraction}: must be between 0 and 1 "
                         f"(the share of DIR/train's captions that state a left/right relation)")
    if partners not in PARTNER_CHOICES:
        raise InputError(f"--partners {partners}: not one of {', '.join(PARTNER_CHOICES)}")
    if size < MIN_SIZE:
        raise InputError(f"--size {size}: images need at least {MIN_SIZE} pixels a side; "
                         f"give --size {MIN_SIZE} or more (default {DEFAULT_SIZE})")
    for name, value in (("--train-size", train_size), ("--max-count", max_count)):
        if value < 1:
            raise InputError(f"{name} {value}: must be at least 1")
    if not bench_scale > 0:
        raise InputError(f"--bench-scale {bench_scale}: must be above 0 (1 = the default sizes)")


def build(out: str | Path, seed: int = 0, train_size: int = DEFAULT_TRAIN_SIZE,
          size: int = DEFAULT_SIZE, negatives: bool = False, partners: str = "none",
          bench_scale: float = 1.0, shard_size: int = 1000, progress: bool = True,
          leftright_fraction: float | None = None, object_pool: int | None = None,
          fixed_order: bool = False, pool_per_shard: bool = False,
          mirrored_order: str = "same", object_couples: bool = False) -> dict:
    """Write everything for one seed under `out`; returns the run summary (also world.json).
    `shard_size`: samples per shard (`--max-count`); `leftright_fraction`: the share of
    DIR/train's captions that state a left/right relation (None: the world's own mix);
    `object_pool`: the training sets' scenes hold only that many bindings (None: any), the same
    ones throughout or, with `pool_per_shard`, their own per shard; `object_couples`: every
    binding, paired by the seed, a scene showing one couple;
    `fixed_order`: the training sets' left/right captions name their objects in one fixed order;
    `mirrored_order`: DIR/train_mirrored's partner captions keep the anchor's argument order
    ("same") or draw it ("drawn")."""
    check_options(train_size, size, partners, bench_scale, shard_size, leftright_fraction, object_pool,
           pool_per_shard, object_couples)
    from compclip.datagen.outlock import hold
    from compclip.shardset.shards import pin_options
    from compclip.datagen.world.bank import write_object_bank
    from compclip.datagen.world.benchmarks import BenchSizes, write_benchmarks
    from compclip.datagen.world.shards import PARTNERS, write_train_set
    from compclip.datagen.world.splits import Split
    out = Path(out)
    with hold(out):  # one writer at a time in `out`, released however the build ends
        options = pin_options(out, build_options(seed, train_size, size, negatives, partners,
                                                 bench_scale, shard_size, leftright_fraction,
                                                 object_pool, fixed_order, pool_per_shard,
                                                 mirrored_order, object_couples), OPTIONS)
        kinds = list(PARTNERS) if partners == "all" else [] if partners == "none" else [partners]
        split = Split.make(seed)
        split.save(out, seed=seed)
        summary: dict = {"seed": seed, "size": size, "train_size": train_size, "negatives": negatives,
                         "partners": kinds, "bench_scale": bench_scale, "sets": {}, "seconds": {},
                         "options": options}

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
                partner=kind, shard_size=shard_size, progress=progress,
                leftright_fraction=leftright_fraction if kind is None else None,
                object_pool=object_pool, fixed_order=fixed_order, pool_per_shard=pool_per_shard,
                mirrored_order=mirrored_order, object_couples=object_couples))
            summary["sets"][name] = sum(s["samples"] for s in manifest["shards"])
        bank = timed("object_bank", lambda: write_object_bank(
            out / "object_bank", size=size, seed=seed, exclude=split.bindings))
        summary["sets"]["object_bank"] = len(bank)
        log("  benchmarks ...")
        counts = timed("benchmarks", lambda: write_benchmarks(
            out / "benchmarks", split, seed, size, BenchSizes().scaled(bench_scale), progress=progress))
        summary["sets"].update({f"benchmarks/{k}": v for k, v in counts.items()})
        summary["seconds"]["total"] = round(sum(summary["seconds"].values()), 2)
        (out / SUMMARY).write_text(json.dumps(summary, indent=1))
        log(f"world: done in {summary['seconds']['total']} s")
        return summary


def build_parser(prog: str = "python -m datagen world"):
    parser = make_parser(prog, "The built-in synthetic scene world (docs/world.md): build its "
                         "training sets, object bank and benchmarks, or render one caption.")
    sub = add_subparsers(parser)
    b = sub.add_parser("build", help="write training shards, object bank and all benchmarks into --out")
    b.add_argument("--out", required=True, help="output folder (resumed if it exists)")
    b.add_argument("--seed", type=int, default=0, help="seed of the split, scenes and order")
    b.add_argument("--train-size", type=int, default=DEFAULT_TRAIN_SIZE,
                   help="training samples in DIR/train (and each DIR/train_<kind>)")
    b.add_argument("--size", type=int, default=DEFAULT_SIZE, help="image side in pixels")
    b.add_argument("--negatives", action="store_true", help="add hard negatives to DIR/train")
    b.add_argument("--partners", default="none", choices=PARTNER_CHOICES,
                   help="also write DIR/train_<kind> with partner images")
    b.add_argument("--bench-scale", type=float, default=1.0, help="multiply benchmark sizes")
    b.add_argument("--leftright-fraction", type=float, default=None, metavar="F",
                   help="share of DIR/train's captions that state a left/right relation (true from "
                        "the viewer's side; the others state none); default: the world's own mix, "
                        "about half")
    b.add_argument("--object-pool", type=int, default=None, metavar="K",
                   help=f"the scenes of every training set hold only K colour-shape bindings ({MIN_POOL}-{MAX_POOL}), "
                        "chosen by the seed, so scenes of the same objects meet in ordinary batches; "
                        "benchmarks and object bank unchanged")
    b.add_argument("--pool-per-shard", action="store_true",
                   help="with --object-pool K: each shard's scenes hold K bindings of their own (chosen by "
                        "the seed and the shard's number), so the pool changes as shards are read")
    b.add_argument("--object-couples", action="store_true",
                   help="the scenes of every training set show two objects, one of the fixed couples the "
                        "seed pairs every trainable binding into, so all bindings appear and a scene's "
                        "mirror image still meets it in ordinary batches (as with --object-pool 6)")
    b.add_argument("--fixed-order", action="store_true",
                   help="every training caption that states a left/right relation names its two objects "
                        "in one fixed order (by colour, then shape), so the relation word alone tells a "
                        "scene from its mirror image; default: either order, drawn per caption")
    b.add_argument("--mirrored-order", default="same", choices=("same", "drawn"),
                   help="DIR/train_mirrored: a partner caption keeps the anchor's argument order (same: the "
                        "pair differs in the relation word) or draws it with a fair coin (drawn, as the "
                        "stitched pairs do: about half the pairs differ in argument order only)")
    count = b.add_argument("--max-count", type=int, default=1000, help="samples per tar shard")
    rename(b, "--shard-size", count)
    b.add_argument("--quiet", action="store_true", help="no progress on stderr")
    r = sub.add_parser("render", help="render one caption of the grammar to an image file")
    r.add_argument("caption", help="a caption of the world's grammar, e.g. 'a red circle above a blue star'")
    r.add_argument("--out", required=True, help="image file to write (PNG, JPEG, ... by its suffix)")
    r.add_argument("--size", type=int, default=DEFAULT_SIZE, help="image side in pixels")
    r.add_argument("--seed", type=int, default=0, help="seed of the layout and drawing")
    return parser


def _render(args) -> int:
    from compclip.datagen.world import ParseError, render_caption
    if args.size < MIN_SIZE:
        raise InputError(f"--size {args.size}: images need at least {MIN_SIZE} pixels a side")
    try:
        image = render_caption(args.caption, args.size, args.seed)
    except ParseError as err:
        raise InputError(str(err)) from None
    out = Path(args.out)
    try:
        image.save(out)
    except ValueError as err:  # PIL: unknown file extension
        raise InputError(f"{out}: {err}; give a file name ending in .png or .jpg") from None
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m datagen world") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.cmd == "build":
        def work() -> int:
            summary = build(args.out, args.seed, args.train_size, args.size, args.negatives,
                            args.partners, args.bench_scale, args.max_count, progress=not args.quiet,
                            leftright_fraction=args.leftright_fraction, object_pool=args.object_pool,
                            fixed_order=args.fixed_order, pool_per_shard=args.pool_per_shard,
                            mirrored_order=args.mirrored_order, object_couples=args.object_couples)
            print(json.dumps(summary, indent=1))  # results on stdout (docs/cli.md)
            return 0
        return run(work)
    return run(lambda: _render(args))
