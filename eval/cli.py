"""`python -m eval ...`: score models on benchmarks, list benchmarks, download data.

    python -m eval score --model ViT-B-32 --pretrained openai \\
                         --model ViT-B-32 --pretrained runs/negclip/best.pt \\
                         --text-model minilm --benchmarks visla sugarcrepe --data-root data --out reports/
    python -m eval list
    python -m eval download visla sugarcrepe --data-root data [--images]

Each `--model` pairs with the `--pretrained` at the same position (`none` for random weights);
models load through `models.load_model` (QuickGELU guard included). `--text-model minilm` (or a
sentence-transformers folder) adds a text-only scorer. All models are scored on the same
benchmarks and reported side by side (`eval.report`). `--precision fp16` scores as the ARO /
SugarCrepe++ reference scripts do for OpenAI CLIP and NegCLIP (`eval.precision`).

Before any model is loaded, every requested benchmark's files are checked
(`eval.api.check_data`): what is missing is printed as one message listing each file and the
command that fetches it, and the command exits with status 2 (also for malformed files, unknown
benchmark names and bad options).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys


def _scorers(args):
    from eval.scorer import OpenClipScorer, SentenceTransformerScorer
    models, pretrained = args.model or [], args.pretrained or []
    if len(pretrained) not in (0, len(models)):
        raise SystemExit(f"error: {len(models)} --model but {len(pretrained)} --pretrained; give one per model")
    pretrained = pretrained or [None] * len(models)
    labels = args.label or []
    for i, (arch, tag) in enumerate(zip(models, pretrained)):
        from models import load_model
        tag = None if tag in (None, "none", "") else tag
        loaded = load_model(arch, tag, lineage=args.lineage, device=args.device)
        label = labels[i] if i < len(labels) else f"{arch}:{tag or 'random'}"
        yield label, OpenClipScorer.from_loaded(loaded, name=label, batch_size=args.batch_size, device=args.device,
                                                precision=args.precision)
    for j, text_model in enumerate(args.text_model or []):
        scorer = SentenceTransformerScorer.minilm(precision=args.precision) if text_model == "minilm" else \
            SentenceTransformerScorer(text_model, device=args.device, precision=args.precision)
        i = len(models) + j
        yield (labels[i] if i < len(labels) else scorer.name), scorer


def _options(text: str | None) -> dict:
    if not text:
        return {}
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--options is not valid JSON ({e})") from None
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise ValueError('--options must be a JSON object of objects, e.g. \'{"aro": {"seeds": [0, 1]}}\'')
    return options


def cmd_score(args) -> int:
    from eval.api import check_data, flatten, run
    from eval.report import write_reports
    if not (args.model or args.text_model):
        raise SystemExit("error: give at least one --model or --text-model")
    options = _options(args.options)
    # every file of every benchmark, before any model is loaded (image scorers need the images)
    check_data(args.benchmarks, args.data_root, options, require_images=bool(args.model))
    results = {}
    for label, scorer in _scorers(args):
        logging.info("scoring %s", label)
        results[label] = run(scorer, args.benchmarks, args.data_root, options, progress=not args.quiet,
                             per_instance=args.per_instance, batch_size=args.batch_size)
        for k, v in flatten(results[label]).items():
            print(f"{label}\t{k}\t{v:.4f}")
    if args.out:
        written = write_reports(results, args.out, per_instance=args.per_instance, plots=not args.no_plots)
        print(f"reports written to {args.out}: {', '.join(p.name for p in written.values())}")
    return 0


def cmd_list(args) -> int:
    from eval.registry import get_benchmark, list_benchmarks
    for name in list_benchmarks():
        cls = get_benchmark(name)
        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "-").strip().splitlines()[0]
        print(f"{name:16s} {'images' if cls.needs_images else 'text-ok':8s} {doc}")
    return 0


def cmd_download(args) -> int:
    from eval.download import download
    try:
        download(args.benchmarks, args.data_root, images=args.images, force=args.force)
    except RuntimeError as e:  # every failed file, listed once
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="score models on benchmarks and write reports")
    s.add_argument("--model", action="append", help="open_clip architecture (repeat for several models)")
    s.add_argument("--pretrained", action="append", help="tag, checkpoint path or 'none', one per --model")
    s.add_argument("--text-model", action="append", help="'minilm' or a sentence-transformers folder")
    s.add_argument("--label", action="append", help="display name per model, in order")
    s.add_argument("--lineage", default="auto", choices=["auto", "openai", "other"])
    s.add_argument("--benchmarks", nargs="+", required=True)
    s.add_argument("--data-root", required=True)
    s.add_argument("--out", help="report folder (JSON, Markdown, plots)")
    s.add_argument("--options", help='JSON per benchmark, e.g. \'{"aro": {"seeds": [0, 1]}}\'')
    s.add_argument("--per-instance", action="store_true")
    s.add_argument("--batch-size", type=int, default=256)
    s.add_argument("--device", default="cpu")
    s.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"],
                   help="towers and score arithmetic (fp16: as the ARO / SugarCrepe++ reference scripts "
                        "score OpenAI CLIP and NegCLIP on CUDA; see docs/eval.md)")
    s.add_argument("--no-plots", action="store_true")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(fn=cmd_score)
    sub.add_parser("list", help="list the benchmarks").set_defaults(fn=cmd_list)
    d = sub.add_parser("download", help="fetch benchmark files into a data root")
    d.add_argument("benchmarks", nargs="+")
    d.add_argument("--data-root", required=True)
    d.add_argument("--images", action="store_true", help="also fetch the (large) image archives")
    d.add_argument("--force", action="store_true", help="re-download files that are present")
    d.set_defaults(fn=cmd_download)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from eval.benchmarks.base import MissingData
    try:
        return args.fn(args)
    except MissingData as e:  # one message listing every problem; no traceback
        print(str(e), file=sys.stderr)
        return 2
    except (ValueError, KeyError) as e:  # bad input (names, options, malformed files): one line
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
