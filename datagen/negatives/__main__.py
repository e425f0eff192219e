"""Command line: `python -m datagen negatives generate | audit | judged ...` (docs/cli.md).

    python -m datagen negatives generate --src captions_train2017.json --out out/ [--workers 1]
        [--mode all] [--kinds swap,add] [--images train2017/ [--skip-missing]]
    python -m datagen negatives generate --rules negclip --mode all --cap 64 --require-negative \
        --src captions.json --out out/           # NegCLIP's swaps, as its authors' script made them
    python -m datagen negatives audit --sugarcrepe ../shared/benchmarks/sugarcrepe \
        --json audit.json --markdown audit.md [--ours out/] [--judge-sample to_judge.tsv]
    python -m datagen negatives judged docs/data/negatives_judged/43bb405_sample.tsv \
        docs/data/negatives_judged/ddf1f4b_sample.tsv

`generate` writes a shard set (see datagen/negatives/pipeline.py); rerunning the same command
after a kill resumes. With `--images` each caption's image file is put into its sample (what
`python -m datagen prepare coco` runs; see docs/data_prep.md). `audit` without `--ours` runs
our rules on SugarCrepe's positive captions and compares with SugarCrepe's own negatives (see
datagen/negatives/audit.py).

`python -m datagen.negatives ...` still works until 0.3, with a deprecation note; so do the old
spellings `generate INPUT OUT` (positional), `--kinds swap add` (space-separated) and
`--shard-size` (now `--max-count`). Errors are one line on stderr: exit 2 for bad input (a
missing or empty input, an unknown column or kind, an --out that cannot be written), 3 for a
fault during the run. Nothing heavy (spaCy, torch) is imported before the arguments are parsed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from compclip.cli import (CommaList, InputError, add_subparsers, deprecated, exit_program, make_parser,
                          rename, run)
from compclip.datagen.negatives.base import SPACY_MODEL
from compclip.datagen.negatives.plausibility import DEFAULT_MARGIN, parse_margin

PROG = "python -m datagen negatives"
OLD_PROG = "python -m datagen.negatives"


def _margin_text(margin) -> str:
    return ",".join(f"{k}={v}" for k, v in margin.items()) if isinstance(margin, dict) else str(margin)


def _src_out(args: argparse.Namespace) -> tuple[str, str]:
    """--src / --out, or the old positional INPUT OUT (kept until 0.3, with a note)."""
    if args.paths:
        if len(args.paths) != 2 or args.src or args.out:
            raise InputError(f"generate: unexpected arguments {' '.join(args.paths)}; give the "
                             "input as --src and the output folder as --out")
        deprecated(f"generate {' '.join(args.paths)}", f"generate --src {args.paths[0]} --out {args.paths[1]}")
        return args.paths[0], args.paths[1]
    missing = [opt for opt, value in (("--src", args.src), ("--out", args.out)) if not value]
    if missing:
        raise InputError(f"generate: {' and '.join(missing)} missing; give the captions input as "
                         "--src and the output shard set folder as --out")
    return args.src, args.out


def _generate(args: argparse.Namespace) -> int:
    src, out = _src_out(args)
    from compclip.datagen.negatives.rules import select_kinds
    select_kinds(args.kinds or None, args.rules)  # an unknown kind is refused before any work
    if args.rules == "negclip" and (args.lm_model or args.no_plausibility):
        raise InputError("generate: --rules negclip has no plausibility filter (NegCLIP's script had "
                         "none); drop --lm-model / --no-plausibility")
    from compclip.datagen.negatives.pipeline import GenerateOptions, run_generate
    images = None
    if args.images:
        from compclip.datagen.prepare.imagefiles import ImageFiles
        images = ImageFiles(args.images)
    options = GenerateOptions(
        kinds=args.kinds or None, mode=args.mode, cap=args.cap, seed=args.seed, workers=args.workers,
        chunk_size=args.chunk_size, shard_size=args.max_count, vocab_path=args.vocab,
        vocab_sample=args.vocab_sample, max_words=args.max_words, progress=not args.quiet,
        image_col=args.image_col, caption_col=args.caption_col, limit=args.limit, images=images,
        skip_missing=args.skip_missing,
        plausibility=None if args.no_plausibility else (f"hf:{args.lm_model}" if args.lm_model else "auto"),
        margin=args.margin, rules=args.rules, spacy_model=args.spacy_model,
        require_negative=args.require_negative)
    result = run_generate(src, out, options)
    print(json.dumps(result["stats"], indent=1, sort_keys=True))
    return 0


def _audit(args: argparse.Namespace) -> int:
    from compclip.datagen.negatives import audit
    sugarcrepe = audit.load_sugarcrepe(args.sugarcrepe)  # bad input stops before the model loads
    coverage = coverage_kind = None
    if args.ours:
        ours_pairs = audit.pairs_from_shards(args.ours)
        corpus = f"shard set {args.ours}"
    else:
        captions = audit.sugarcrepe_captions(args.sugarcrepe)
        ours_pairs = audit.ours_on_captions(captions, seed=args.seed)
        coverage, coverage_kind = audit.coverage(ours_pairs, len(captions))
        corpus = f"SugarCrepe positive captions ({len(captions)} distinct)"
    if args.judge_sample:
        audit.write_judge_tsv(audit.judge_sample(ours_pairs, args.judge_per_kind, args.judge_seed),
                              args.judge_sample)
    encoder = audit.minilm_encoder()
    reference = audit.audit(sugarcrepe, encoder, args.max_pairs, args.seed)
    ours = audit.audit(ours_pairs, encoder, args.max_pairs, args.seed)
    report = {"corpus": corpus, "encoder": "all-MiniLM-L6-v2", "max_pairs": args.max_pairs,
              "seed": args.seed, "ours": ours, "sugarcrepe": reference, "coverage": coverage,
              "coverage_kind": coverage_kind}
    table = audit.markdown_table(ours, reference, coverage, coverage_kind)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, sort_keys=True))
    if args.markdown:
        Path(args.markdown).write_text(f"Ours on: {corpus}\n\n{table}")
    print(table)
    return 0


def _judged(args: argparse.Namespace) -> int:
    from compclip.datagen.negatives import audit
    rows = ["| file | kind | n | grammatical % | different % | plausible % | all three % |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for path in args.files:
        for kind, r in audit.judged_summary(path).items():
            rows.append(f"| {Path(path).name} | {kind} | {r['n']} | {100 * r['grammatical']:.0f} | "
                        f"{100 * r['different']:.0f} | {100 * r['plausible']:.0f} | {100 * r['all_three']:.0f} |")
    print("\n".join(rows))
    return 0


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = make_parser(prog, __doc__)
    sub = add_subparsers(parser)

    gen = sub.add_parser("generate", help="captions -> shard set with neg.json")
    gen.add_argument("paths", nargs="*", help=argparse.SUPPRESS)  # old positional INPUT OUT
    gen.add_argument("--src", default=None,
                     help="captions input: COCO / Karpathy JSON, CSV / TSV, .tar shard or shard set folder")
    gen.add_argument("--out", default=None, help="output shard set folder (resumed if it exists)")
    gen.add_argument("--rules", choices=("compclip", "negclip"), default="compclip",
                     help="rule set: compclip (guarded swap / replace / add with the plausibility "
                          "filter) or negclip (NegCLIP's swaps exactly as its authors' script made them)")
    gen.add_argument("--spacy-model", default=SPACY_MODEL,
                     help="installed spaCy pipeline to parse with (recorded in the manifest; "
                          "NegCLIP's authors used en_core_web_lg)")
    gen.add_argument("--require-negative", action="store_true",
                     help="leave out captions that get no negative (counted as no_negative), as "
                          "NegCLIP's script did")
    gen.add_argument("--kinds", action=CommaList, default=None,
                     help="comma-separated kinds or kind:sub-kind, e.g. swap,replace:obj,add "
                          "(if not given: every registered rule)")
    gen.add_argument("--mode", choices=("sample", "all"), default="sample",
                     help="one negative per sub-kind, or every distinct one up to --cap")
    gen.add_argument("--cap", type=int, default=8, help="negatives per sub-kind in --mode all (0: all)")
    gen.add_argument("--seed", type=int, default=0,
                     help="seed of the negatives (caption i draws from seed:i) and of the sample order")
    gen.add_argument("--workers", type=int, default=1, help="worker processes, one per free core")
    gen.add_argument("--chunk-size", type=int, default=1000, help="captions per work item")
    max_count = gen.add_argument("--max-count", type=int, default=10_000, help="samples per shard at most")
    rename(gen, "--shard-size", max_count)
    gen.add_argument("--vocab", default=None,
                     help="vocabulary JSON to reuse (if not given: mined from the input)")
    gen.add_argument("--vocab-sample", type=int, default=20_000,
                     help="captions the vocabulary is mined from when no --vocab is given")
    gen.add_argument("--max-words", type=int, default=100,
                     help="longer captions are skipped (counted as too_long)")
    gen.add_argument("--image-col", default=None,
                     help="CSV / TSV column of the image path (if not given: filepath, image, ...)")
    gen.add_argument("--caption-col", default=None,
                     help="CSV / TSV column of the caption (if not given: caption, title, text, ...)")
    gen.add_argument("--limit", type=int, default=None, help="read at most this many captions")
    gen.add_argument("--images", default=None,
                     help="folder the inputs' image paths are relative to: attach the images")
    gen.add_argument("--skip-missing", action="store_true",
                     help="with --images: skip and count missing images instead of stopping")
    gen.add_argument("--margin", type=parse_margin, default=_margin_text(DEFAULT_MARGIN),
                     help="plausibility filter: drop negatives more than this many nats per token "
                          "less likely than their caption; one number, or one per kind (* = the "
                          "others)")
    gen.add_argument("--no-plausibility", action="store_true",
                     help="no plausibility filter (rule negatives as drawn)")
    gen.add_argument("--lm-model", default=None,
                     help="local Hugging Face causal LM folder to score plausibility with "
                          "(if not given: the corpus n-gram model)")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.set_defaults(func=_generate)

    aud = sub.add_parser("audit", help="reorder share and blind separability, ours vs SugarCrepe")
    aud.add_argument("--sugarcrepe", required=True, help="folder with SugarCrepe's JSON files")
    aud.add_argument("--ours", default=None,
                     help="shard set to audit (default: our rules on SugarCrepe's captions)")
    aud.add_argument("--max-pairs", type=int, default=1000, help="pairs per group")
    aud.add_argument("--seed", type=int, default=0, help="seed of the pair sample")
    aud.add_argument("--json", default=None, help="write the full report here as JSON")
    aud.add_argument("--markdown", default=None, help="write the table here as Markdown")
    aud.add_argument("--judge-sample", default=None,
                     help="also write a TSV of our pairs to judge by hand (see `judged`)")
    aud.add_argument("--judge-per-kind", type=int, default=100, help="pairs per kind in --judge-sample")
    aud.add_argument("--judge-seed", type=int, default=17, help="seed of the --judge-sample draw")
    aud.set_defaults(func=_audit)

    jud = sub.add_parser("judged", help="summarise hand-judged TSV files (grammatical / different / plausible)")
    jud.add_argument("files", nargs="+", help="TSV files written by `audit --judge-sample`, judged")
    jud.set_defaults(func=_judged)
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """The negatives command (`python -m datagen negatives` calls this with its arguments)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser(prog).parse_args(argv)
    return run(lambda: args.func(args))


if __name__ == "__main__":
    deprecated(OLD_PROG, PROG)
    exit_program(main(prog=OLD_PROG))
