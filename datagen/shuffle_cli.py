"""`python -m datagen shuffle`: rewrite a shard set in a seeded global random order, in two passes
and bounded memory (`compclip.shardset.shuffle`).
"""
from __future__ import annotations

import argparse

from compclip.cli import deprecated
from compclip.datagen.cliargs import abs_path, check_shard_set, pin, positive_int, shard_args, shard_options


def cmd_shuffle(args) -> dict:
    check_shard_set(args.src)
    pin(args, {"--src": abs_path(args.src), "--seed": args.seed, "--buckets": args.buckets,
               **shard_options(args)}, inputs=[args.src])
    from compclip.shardset.shuffle import shuffle_shard_set
    return shuffle_shard_set(args.src, args.out, args.seed, args.buckets, args.work_dir,
                             args.max_count, args.max_bytes, progress=not args.quiet)


def add_parser(sub) -> None:
    """`shuffle` as a subcommand of `sub`."""
    p = sub.add_parser("shuffle", help="rewrite a shard set in a seeded global random order "
                       "(two passes, bounded memory)")
    p.add_argument("--src", default=None, help="input shard set (complete)")
    p.add_argument("legacy", nargs="*", metavar="SRC OUT", help=argparse.SUPPRESS)
    p.add_argument("--buckets", type=positive_int, default=None,
                   help="temporary buckets (if not given: one per 256 MiB of input)")
    p.add_argument("--work-dir", default=None, help="bucket folder (if not given: <out>/.shuffle)")
    shard_args(p)
    p.set_defaults(run=cmd_shuffle)
    for action in p._actions:  # --out given positionally (old spelling) is checked in main
        if action.dest == "out":
            action.required, action.default = False, None


def legacy_shuffle(parser: argparse.ArgumentParser, args) -> None:
    """`shuffle SRC OUT` (before 0.2) -> `shuffle --src SRC --out OUT`, with a note."""
    if args.legacy:
        if len(args.legacy) != 2 or args.src or args.out:
            parser.error("shuffle takes --src SRC --out OUT")
        deprecated("shuffle SRC OUT", "shuffle --src SRC --out OUT")
        args.src, args.out = args.legacy
    if not args.src or not args.out:
        parser.error("shuffle needs --src SRC and --out OUT")
