"""`python -m eval ...`: score models on benchmarks, list benchmarks, download data.

    python -m eval score --model ViT-B-32 --pretrained openai \\
                         --pretrained runs/negclip \\
                         --text-model minilm --benchmarks visla,sugarcrepe --data-root data --out reports/
    python -m eval compare runs/clip_ft runs/negclip --benchmarks visla,sugarcrepe --data-root data --out cmp/
    python -m eval compare --pool seed-0/scores seed-1/scores seed-2/scores --out cmp/
    python -m eval list
    python -m eval download --benchmarks visla,sugarcrepe --data-root data [--images]

`--pretrained` is an open_clip tag, `none` (random weights) or a checkpoint: a checkpoint file, a
pointer file (`runs/NAME/checkpoints/best`), a run's `checkpoints/` folder or the run folder (its
`latest`). A compclip checkpoint names its own architecture, so `--model` may be left out for
every `--pretrained` (the architecture is read from each checkpoint); otherwise each `--model`
pairs with the `--pretrained` at the same position, and one that contradicts its checkpoint is
refused. Models load through `models.load_model` (QuickGELU guard included). `--text-model
minilm` (or a sentence-transformers folder) adds a text-only scorer. `--blind minilm,ngram,length`
adds image-free baseline rows `blind:<judge>` (`eval.blind`). All models are scored on
the same benchmarks and reported side by side (`eval.report`). `--precision fp16` scores as the
ARO / SugarCrepe++ reference scripts do for OpenAI CLIP and NegCLIP (`eval.precision`).
Scores of checkpoint files and pinned open_clip tags are kept per benchmark in a score cache
(`eval.scorecache`; `--cache-dir`, `--no-cache`), so scoring them again on unchanged benchmark
files encodes nothing. `compare` gives paired differences, intervals and tests between models
(checkpoints or report folders; `eval.compare`); with `--pool` each argument is one seed's report
folder and the comparison is pooled over the seeds (`eval.compare.compare_pooled`).

`--batch-size` below 1 is a usage error. Before any model is loaded, `--device` is checked (a
tensor is made on it), every requested benchmark's files are checked (`eval.api.check_data`),
every model argument is resolved and checked (`models.resolve_model`) and every PyTorch
checkpoint file's weights must be finite (`eval.weights.check_file`); each model is checked for
NaN / inf again right after it is built (`eval.weights.check_model`). What is missing is printed
as one message listing each file and the command that fetches it; any bad input is one line
(docs/cli.md) and exit status 2. A benchmark that still fails while it is scored (an image
that cannot be decoded, ...) is skipped: the others are scored, the report of what was scored is
written, and the command exits with status 3 naming it.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import json
import logging
import os
import sys

from compclip.cli import (CommaList, InputError, RunFault, add_subparsers, deprecated, make_parser, one_line,
                          run)

EXAMPLE = __doc__.split("\n\n")[1]


def _model_args(args) -> list[tuple[str | None, str | None]]:
    """(architecture or None, weights or None) per model, checked: pairs by position, or every
    --pretrained alone (its checkpoint names the architecture)."""
    models, pretrained = args.model or [], args.pretrained or []
    if models and len(pretrained) not in (0, len(models)):
        raise InputError(f"{len(models)} --model but {len(pretrained)} --pretrained; give one --pretrained per "
                         "--model (none for random weights), or leave --model out when every --pretrained is a "
                         "compclip checkpoint")
    if not models:
        models = [None] * len(pretrained)
    pretrained = pretrained or [None] * len(models)
    out = []
    from compclip.models import resolve_model
    for arch, tag in zip(models, pretrained):
        tag = None if tag in (None, "none", "") else tag
        out.append(resolve_model(arch, tag))
    return out


def _scorers(args, checked: list[tuple[str, str | None]]):
    from compclip.eval.scorer import OpenClipScorer, SentenceTransformerScorer
    from compclip.eval.scorecache import model_identity
    from compclip.eval.weights import check_model
    from compclip.models import load_model
    labels = args.label or []
    for i, (arch, tag) in enumerate(checked):
        loaded = load_model(arch, tag, lineage=args.lineage, device=args.device)
        check_model(loaded.model, tag or f"{arch}:random")
        label = labels[i] if i < len(labels) else f"{arch}:{tag or 'random'}"
        scorer = OpenClipScorer.from_loaded(loaded, name=label, batch_size=args.batch_size, device=args.device,
                                            precision=args.precision)
        scorer.cache_identity = model_identity(arch, tag, args.lineage, args.precision, args.device)
        yield label, scorer
    for j, text_model in enumerate(args.text_model or []):
        scorer = SentenceTransformerScorer.minilm(precision=args.precision) if text_model == "minilm" else \
            SentenceTransformerScorer(text_model, device=args.device, precision=args.precision)
        i = len(checked) + j
        yield (labels[i] if i < len(labels) else scorer.name), scorer


def _check_weights(checked: list[tuple[str, str | None]]) -> None:
    """Every checkpoint file's weights finite (`eval.weights`), before any model is loaded."""
    from compclip.eval.weights import check_file
    for _, tag in checked:
        if tag and os.path.isfile(tag):
            check_file(tag)


def positive_int(text: str) -> int:
    """An argparse `type`: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def check_device(text: str) -> None:
    """`--device` names a torch device this machine has (a tiny tensor is made on it; `cpu`, always
    there, is not tried, so a comparison read from the score cache does not import torch)."""
    if text == "cpu":
        return
    import torch
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise InputError(f"--device {text}: not a torch device name; give cpu, cuda, cuda:N or mps") from None
    try:
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as err:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise InputError(f"--device {text}: torch cannot use it here ({first.split('. ')[0]}); give cpu, or a "
                         "device this machine has") from None


def _options(text: str | None) -> dict:
    if not text:
        return {}
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"--options is not valid JSON ({e})") from None
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise InputError('--options must be a JSON object of objects, e.g. \'{"aro": {"seeds": [0, 1]}}\'')
    return options


def cmd_score(args) -> int:
    from compclip.eval.api import check_data, flatten, run as run_benchmarks, validate_names
    if not (args.model or args.pretrained or args.text_model or args.blind):
        raise InputError("give at least one --pretrained (with or without --model), --text-model or --blind")
    check_device(args.device)
    options = _options(args.options)
    if not args.benchmarks:
        raise InputError("--benchmarks is empty; give comma-separated names (python -m eval list shows them)")
    validate_names(args.benchmarks, options)  # names first: a typo costs no model load
    # every file of every benchmark (image scorers need the images), then every model argument,
    # all before any model is loaded; the data check imports no open_clip, so it answers first
    images = bool(args.model or args.pretrained)
    if args.blind:  # also the judge names and the text files the blind rows read
        from compclip.eval.blind.tasks import check_blind
        check_blind(args.blind, args.benchmarks, args.data_root, options, require_images=images)
    else:
        check_data(args.benchmarks, args.data_root, options, require_images=images)
    checked = _model_args(args)
    _check_weights(checked)
    results, failed = {}, {}
    from compclip.eval.scorecache import ScoreCache, default_dir
    folder = None if args.no_cache else args.cache_dir or default_dir()
    score_cache = ScoreCache(folder) if folder else None
    for label, scorer in _scorers(args, checked):
        logging.info("scoring %s", label)
        failures: dict = {}
        results[label] = run_benchmarks(scorer, args.benchmarks, args.data_root, options, progress=not args.quiet,
                                        per_instance=args.per_instance, batch_size=args.batch_size,
                                        failures=failures, score_cache=score_cache)
        for name, err in failures.items():
            logging.warning("%s: scoring failed for %s (%s: %s); the other benchmarks go on", name, label,
                            type(err).__name__, one_line(err))
            failed.setdefault(name, (label, err))
        for k, v in flatten(results[label]).items():
            print(f"{label}\t{k}\t{v:.4f}")
    if args.blind:
        from compclip.eval.blind.tasks import run_blind
        for label, blind in run_blind(args.blind, args.benchmarks, args.data_root, options).items():
            results[label] = blind
            for k, v in flatten(blind).items():
                print(f"{label}\t{k}\t{v:.4f}")
    if args.out:
        from compclip.eval.report import write_reports
        written = write_reports(results, args.out, per_instance=args.per_instance, plots=not args.no_plots)
        print(f"reports written to {args.out}: {', '.join(p.name for p in written.values())}")
    if failed:
        name, (label, err) = next(iter(failed.items()))
        others = f" (and {', '.join(list(failed)[1:])})" if len(failed) > 1 else ""
        kept = f"the report of what was scored is in {args.out}" if args.out else "what was scored is printed above"
        raise RunFault(f"{name}{others}: scoring failed for {label} ({type(err).__name__}: {one_line(err)}); "
                       f"{kept}; fix the data it names and score again with --benchmarks {','.join(failed)}")
    return 0


def cmd_compare(args) -> int:
    """Paired differences and tests of the models named, the first the baseline (`eval.compare`);
    with `--pool`, every argument one seed's report folder and the comparison pooled over them."""
    from compclip.eval import compare
    from compclip.eval.api import validate_names
    options = _options(args.options)
    if args.benchmarks:
        validate_names(args.benchmarks, options)
    strata = _pooled_reports(args) if args.pool else [_compared_models(args, options)]
    labels = list(strata[0])
    if args.label:
        if len(args.label) != len(labels):
            raise InputError(f"{len(args.label)} --label for {len(labels)} models ({', '.join(labels)})")
        strata = [dict(zip(args.label, s.values())) for s in strata]
    rows = compare.compare_pooled(strata, args.metrics, names=list(args.models) if args.pool else None)
    baseline = next(iter(strata[0]))
    print(compare.markdown(rows, baseline), end="")
    if args.out:
        written = compare.write(rows, baseline, args.out, plots=not args.no_plots)
        print(f"comparison written to {args.out}: {', '.join(p.name for p in written.values())}")
    return 0


def _compared_models(args, options: dict) -> dict:
    """{label: {benchmark: ItemTable}} of every argument: a report folder's models, or a
    checkpoint's tables (from the score cache, else scored)."""
    from compclip.eval import compare
    from compclip.eval.scorecache import ScoreCache, default_dir
    folder = None if args.no_cache else args.cache_dir or default_dir()
    score_cache = ScoreCache(folder) if folder else None
    models: dict = {}
    for arg in args.models:
        if (Path(arg) / "summary.json").is_file():
            found = compare.from_report(Path(arg), args.benchmarks)
        else:
            if not (args.benchmarks and args.data_root):
                raise InputError(f"{arg}: a checkpoint is scored (or read from the score cache) on --benchmarks "
                                 "with --data-root; give both")
            check_device(args.device)
            found = {arg: compare.from_checkpoint(arg, args.benchmarks, args.data_root, options, score_cache,
                                                  args.model, args.lineage, args.precision, args.device,
                                                  args.batch_size, not args.quiet)}
        for label, tables in found.items():
            models[f"{arg}:{label}" if label in models else label] = tables
    return models


def _pooled_reports(args) -> list[dict]:
    """`--pool`: each argument's report folder (a seed's), as one item set of `compare_pooled`."""
    from compclip.eval import compare
    strata = []
    for arg in args.models:
        if not (Path(arg) / "summary.json").is_file():
            raise InputError(f"{arg}: --pool takes report folders written by score --out (no summary.json there)")
        strata.append(compare.from_report(Path(arg), args.benchmarks))
    return strata


def cmd_list(args) -> int:
    from compclip.eval.registry import get_benchmark, list_benchmarks
    for name in list_benchmarks():
        cls = get_benchmark(name)
        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "-").strip().splitlines()[0]
        print(f"{name:16s} {'images' if cls.needs_images else 'text-ok':8s} {doc}")
    return 0


def cmd_download(args) -> int:
    from compclip.eval import download as dl
    dl.QUIET = args.quiet
    benchmarks = list(args.benchmarks or [])
    if args.names:
        deprecated(f"download {' '.join(args.names)}", f"download --benchmarks {','.join(args.names)}")
        benchmarks += args.names
    if not benchmarks:
        raise InputError("download: give --benchmarks (comma-separated; python -m eval list shows them)")
    try:  # a data root that cannot be made is bad input, not a failed download
        Path(args.data_root).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--data-root {args.data_root}: cannot create it ({err.strerror}); "
                         "give a folder you can write") from None
    dl.download(benchmarks, args.data_root, images=args.images, force=args.force)
    return 0


def make_main_parser() -> argparse.ArgumentParser:
    p = make_parser("python -m eval", __doc__.split("\n\n")[0] + "\n\n" + EXAMPLE)
    sub = add_subparsers(p)
    s = sub.add_parser("score", help="score models on benchmarks and write reports")
    s.add_argument("--model", action="append", metavar="ARCH",
                   help="open_clip architecture, one per --pretrained in order; leave it out when every "
                        "--pretrained is a compclip checkpoint (its sidecar names the architecture)")
    s.add_argument("--pretrained", action="append", metavar="WEIGHTS",
                   help="open_clip tag, 'none' (random weights) or a checkpoint: a .pt file, a pointer file "
                        "(runs/NAME/checkpoints/best), a run's checkpoints/ folder or the run folder (its latest)")
    s.add_argument("--text-model", action="append", metavar="NAME",
                   help="'minilm' or a sentence-transformers folder (repeat for several)")
    s.add_argument("--blind", action=CommaList, metavar="JUDGES",
                   help="add image-free baseline rows 'blind:<judge>': comma-separated minilm, ngram, length "
                        "(docs/eval.md, Blind baselines)")
    s.add_argument("--label", action="append",
                   help="display name per model, in order; models without one are shown as ARCH:WEIGHTS")
    s.add_argument("--lineage", default="auto", choices=["auto", "openai", "other"],
                   help="where bare weights come from (openai: build with QuickGELU)")
    s.add_argument("--benchmarks", action=CommaList, required=True, metavar="NAMES",
                   help="comma-separated benchmark names (python -m eval list), e.g. visla,aro")
    s.add_argument("--data-root", required=True, help="folder holding the benchmarks (docs/benchmark_data.md)")
    s.add_argument("--out", help="report folder (JSON, Markdown, plots); none: print the metrics only")
    s.add_argument("--options", help='JSON per benchmark, e.g. \'{"aro": {"seeds": [0, 1]}}\'')
    s.add_argument("--per-instance", action="store_true", help="keep per-item records in the JSON reports")
    s.add_argument("--batch-size", type=positive_int, default=256, help="items per encoder call")
    s.add_argument("--device", default="cpu", help="torch device")
    s.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"],
                   help="towers and score arithmetic (fp16: as the ARO / SugarCrepe++ reference scripts "
                        "score OpenAI CLIP and NegCLIP on CUDA; see docs/eval.md)")
    s.add_argument("--cache-dir", metavar="DIR",
                   help="score cache folder (default: $COMPCLIP_SCORE_CACHE, else $XDG_CACHE_HOME/compclip/scores, else "
                        "~/.cache/compclip/scores): "
                        "a checkpoint file or pinned open_clip tag already scored on unchanged benchmark files "
                        "is not scored again (docs/eval.md)")
    s.add_argument("--no-cache", action="store_true", help="neither read nor write the score cache")
    s.add_argument("--no-plots", action="store_true", help="write no radar / bar charts")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.add_argument("-v", "--verbose", action="store_true", help="full tracebacks")
    s.set_defaults(fn=cmd_score)
    c = sub.add_parser("compare", help="paired differences and tests between models (the first is the baseline)")
    c.add_argument("models", nargs="+", metavar="MODEL",
                   help="a checkpoint (file, pointer file, checkpoints/ folder or run folder) or a report folder "
                        "written by score --out (all its models); the first is the baseline")
    c.add_argument("--benchmarks", action=CommaList, metavar="NAMES",
                   help="benchmarks to compare (required with checkpoints; report folders: default all they hold)")
    c.add_argument("--data-root", help="folder holding the benchmarks (needed to score checkpoints)")
    c.add_argument("--metrics", action=CommaList, metavar="NAMES",
                   help="<benchmark>/<metric> names to compare (default: each benchmark's primary metric)")
    c.add_argument("--label", action="append", help="display name per model, in order")
    c.add_argument("--pool", action="store_true",
                   help="every MODEL is one seed's report folder holding the same models: pool the comparison "
                        "over them (mean difference, intervals resampling each folder's items, McNemar on the "
                        "summed discordant counts)")
    c.add_argument("--model", metavar="ARCH", help="open_clip architecture of checkpoints that do not name theirs")
    c.add_argument("--options", help='JSON per benchmark, e.g. \'{"aro": {"seeds": [0, 1]}}\'')
    c.add_argument("--out", help="folder for compare.md, compare.json and compare.png")
    c.add_argument("--lineage", default="auto", choices=["auto", "openai", "other"],
                   help="where bare weights come from (openai: build with QuickGELU)")
    c.add_argument("--batch-size", type=positive_int, default=256, help="items per encoder call")
    c.add_argument("--device", default="cpu", help="torch device")
    c.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"], help="as for score")
    c.add_argument("--cache-dir", metavar="DIR", help="score cache folder (as for score)")
    c.add_argument("--no-cache", action="store_true", help="neither read nor write the score cache")
    c.add_argument("--no-plots", action="store_true", help="write no plot")
    c.add_argument("--quiet", action="store_true", help="no progress bars")
    c.add_argument("-v", "--verbose", action="store_true", help="full tracebacks")
    c.set_defaults(fn=cmd_compare)
    ls = sub.add_parser("list", help="list the benchmarks")
    ls.add_argument("-v", "--verbose", action="store_true", help="full tracebacks")
    ls.set_defaults(fn=cmd_list)
    d = sub.add_parser("download", help="fetch benchmark files into a data root")
    d.add_argument("--benchmarks", action=CommaList, metavar="NAMES",
                   help="comma-separated benchmark names (python -m eval list), e.g. visla,sugarcrepe")
    d.add_argument("names", nargs="*", help=argparse.SUPPRESS)  # the old positional form, until 0.3
    d.add_argument("--data-root", required=True, help="folder the benchmarks go into")
    d.add_argument("--images", action="store_true", help="also fetch the (large) image archives")
    d.add_argument("--force", action="store_true", help="re-download files that are present")
    d.add_argument("--quiet", action="store_true", help="no progress bars")
    d.add_argument("-v", "--verbose", action="store_true", help="full tracebacks")
    d.set_defaults(fn=cmd_download)
    return p


def _call(args) -> int:
    from compclip.eval.benchmarks.base import MissingData
    try:
        return args.fn(args)
    except MissingData as e:  # one message listing every problem and the commands that fetch them
        print(f"error: {e}", file=sys.stderr)
        return 2


def main(argv=None) -> int:
    args = make_main_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run(lambda: _call(args), verbose=args.verbose)
