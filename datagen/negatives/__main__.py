"""Command line: `python -m datagen.negatives generate | audit ...`.

    python -m datagen.negatives generate captions_train2017.json out/ [--workers 1] [--mode all]
        [--images train2017/ [--skip-missing]]
    python -m datagen.negatives audit --sugarcrepe ../shared/benchmarks/sugarcrepe \
        --json audit.json --markdown audit.md [--ours out/] [--judge-sample to_judge.tsv]
    python -m datagen.negatives judged docs/negatives_judged_before.tsv docs/negatives_judged_after.tsv

`generate` writes a shard set (see datagen/negatives/pipeline.py); rerunning the same command
after a kill resumes. With `--images` each caption's image file is put into its sample (what
`python -m datagen prepare coco` runs; see docs/data_prep.md). `audit` without `--ours` runs
our rules on SugarCrepe's positive captions and compares with SugarCrepe's own negatives (see
datagen/audit.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from datagen.negatives.plausibility import DEFAULT_MARGIN, parse_margin


def _generate(args: argparse.Namespace) -> int:
    from datagen.negatives.pipeline import run_generate
    images = None
    if args.images:
        from datagen.prepare.imagefiles import ImageFiles
        images = ImageFiles(args.images)
    result = run_generate(args.input, args.out, kinds=args.kinds, mode=args.mode, cap=args.cap,
                          seed=args.seed, workers=args.workers, chunk_size=args.chunk_size,
                          shard_size=args.shard_size, vocab_path=args.vocab,
                          vocab_sample=args.vocab_sample, max_words=args.max_words,
                          progress=not args.quiet, image_col=args.image_col,
                          caption_col=args.caption_col, limit=args.limit, images=images,
                          skip_missing=args.skip_missing,
                          plausibility=None if args.no_plausibility else (
                              f"hf:{args.lm_model}" if args.lm_model else "ngram"),
                          margin=args.margin)
    print(json.dumps(result["stats"], indent=1, sort_keys=True))
    return 0


def _audit(args: argparse.Namespace) -> int:
    from datagen import audit
    encoder = audit.minilm_encoder()
    reference = audit.audit(audit.load_sugarcrepe(args.sugarcrepe), encoder, args.max_pairs, args.seed)
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
    from datagen import audit
    rows = ["| file | kind | n | grammatical % | different % | plausible % | all three % |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for path in args.files:
        for kind, r in audit.judged_summary(path).items():
            rows.append(f"| {Path(path).name} | {kind} | {r['n']} | {100 * r['grammatical']:.0f} | "
                        f"{100 * r['different']:.0f} | {100 * r['plausible']:.0f} | {100 * r['all_three']:.0f} |")
    print("\n".join(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(prog="python -m datagen.negatives", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="captions -> shard set with neg.json")
    gen.add_argument("input", help="COCO / Karpathy JSON, CSV / TSV, .tar shard or shard set folder")
    gen.add_argument("out", help="output shard set folder (resumed if it exists)")
    gen.add_argument("--kinds", nargs="*", default=None,
                     help="e.g. swap replace:obj add (default: every registered rule)")
    gen.add_argument("--mode", choices=("sample", "all"), default="sample",
                     help="one negative per sub-kind, or every distinct one up to --cap")
    gen.add_argument("--cap", type=int, default=8, help="negatives per sub-kind in --mode all")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--workers", type=int, default=1, help="worker processes, one per free core (default 1)")
    gen.add_argument("--chunk-size", type=int, default=1000)
    gen.add_argument("--shard-size", type=int, default=10_000)
    gen.add_argument("--vocab", default=None, help="vocabulary JSON to reuse")
    gen.add_argument("--vocab-sample", type=int, default=20_000,
                     help="captions the vocabulary is mined from when no --vocab is given")
    gen.add_argument("--max-words", type=int, default=100)
    gen.add_argument("--image-col", default=None)
    gen.add_argument("--caption-col", default=None)
    gen.add_argument("--limit", type=int, default=None, help="read at most this many captions")
    gen.add_argument("--images", default=None,
                     help="folder the inputs' image paths are relative to: attach the images")
    gen.add_argument("--skip-missing", action="store_true",
                     help="with --images: skip and count missing images instead of stopping")
    gen.add_argument("--margin", type=parse_margin, default=DEFAULT_MARGIN,
                     help="plausibility filter: drop negatives more than this many nats per token "
                          "less likely than their caption; one number or per kind, e.g. "
                          "swap=1.2,replace=0.5,add=0.5 (default %(default)s)")
    gen.add_argument("--no-plausibility", action="store_true",
                     help="no plausibility filter (rule negatives as drawn)")
    gen.add_argument("--lm-model", default=None,
                     help="local Hugging Face causal LM folder to score plausibility with "
                          "(default: the corpus n-gram model)")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.set_defaults(func=_generate)

    aud = sub.add_parser("audit", help="reorder share and blind separability, ours vs SugarCrepe")
    aud.add_argument("--sugarcrepe", required=True, help="folder with SugarCrepe's JSON files")
    aud.add_argument("--ours", default=None,
                     help="shard set to audit (default: our rules on SugarCrepe's captions)")
    aud.add_argument("--max-pairs", type=int, default=1000, help="pairs per group")
    aud.add_argument("--seed", type=int, default=0)
    aud.add_argument("--json", default=None)
    aud.add_argument("--markdown", default=None)
    aud.add_argument("--judge-sample", default=None,
                     help="also write a TSV of our pairs to judge by hand (see `judged`)")
    aud.add_argument("--judge-per-kind", type=int, default=100)
    aud.add_argument("--judge-seed", type=int, default=17)
    aud.set_defaults(func=_audit)

    jud = sub.add_parser("judged", help="summarise hand-judged TSV files (grammatical / different / plausible)")
    jud.add_argument("files", nargs="+")
    jud.set_defaults(func=_judged)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
