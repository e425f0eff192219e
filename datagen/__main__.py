"""Command line for making data: `python -m datagen COMMAND ...` (docs/cli.md).

`stitch`, `knn`, `genimages`, `prepare coco|trohn`, `shuffle` each write a shard set into
`--out` (resuming one a killed run left), read it back with `verify_shard_set` and print the
manifest summary as JSON on stdout; `prepare cocobank` writes an object bank folder and prints
its counts. `prepare coco|trohn|cocobank` turn COCO, TROHN-Text/-Img and COCO instances into
shard sets / an object bank (docs/data_prep.md), leaving benchmark images out unless
`--keep-benchmark-images`. Every set is written in a seeded global order (`compclip.shardset.order`);
`shuffle` puts an existing set into one in bounded memory. `negatives` (hard-negative captions,
datagen/negatives) and `world` (the synthetic world, datagen/world/cli.py) hand their arguments
to their own programs unchanged. This module only dispatches: each group's commands and options
live with it (`datagen/images/cli.py`, `datagen/prepare/cli.py`, `datagen/shuffle_cli.py`; what
they share in `datagen/cliargs.py`).

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
import sys
from typing import Optional, Sequence

from compclip.cli import add_subparsers, exit_program, make_parser, run
from compclip.datagen import shuffle_cli
from compclip.datagen.cliargs import summary
from compclip.datagen.images import cli as images_cli
from compclip.datagen.prepare import cli as prepare_cli

DELEGATED = {"negatives": ("compclip.datagen.negatives.__main__", "hard-negative captions for captions "
                           "files or shard sets (python -m datagen negatives --help)"),
             "world": ("compclip.datagen.world.cli", "the synthetic world: build its data, render a "
                       "caption (python -m datagen world --help)")}


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser("python -m datagen", __doc__.split("\n\n")[0].splitlines()[0] + " "
                         "Each command's --help says more; docs/data_prep.md, docs/images.md, "
                         "docs/world.md and docs/negatives.md describe what they make.")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log details, and show the full traceback of an error")
    sub = add_subparsers(parser)

    images_cli.add_parsers(sub)
    prepare_cli.add_parsers(sub)
    shuffle_cli.add_parser(sub)

    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


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
        shuffle_cli.legacy_shuffle(parser, args)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")

    def work() -> int:
        with contextlib.ExitStack() as args.locks:  # the output locks `pin` takes, released at the end
            print(json.dumps(summary(args, args.run(args)), indent=1))
        return 0
    return run(work, verbose=args.verbose)


if __name__ == "__main__":
    exit_program(main())
