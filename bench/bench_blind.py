"""Blind (image-free) baselines on the real benchmark texts: what a judge that never sees the image scores.

    .venv/bin/python bench/bench_blind.py --benchmarks-dir ../shared/benchmarks [--judges length,ngram,minilm]

Links the SugarCrepe, SugarCrepe++ and VISLA text folders of `--benchmarks-dir` (the published
files; no images needed) into a temporary data root, runs `eval.blind.tasks.run_blind` for each
judge and writes bench/results/blind.json: per judge and benchmark the headline metrics and the
per-category tables (with `tie` and `n`), as fractions, and the seconds each judge took (fit,
encode and score; not a number of record on a busy machine).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import log, write_result  # noqa: E402
from compclip.eval.blind.tasks import run_blind  # noqa: E402

BENCHMARKS = ("sugarcrepe", "sugarcrepe_pp", "visla")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--benchmarks-dir", default=str(ROOT.parent / "shared" / "benchmarks"),
                   help="folder holding sugarcrepe/, sugarcrepe_pp/, visla/ (the published text files)")
    p.add_argument("--judges", default="length,ngram,minilm", help="comma-separated blind judges")
    p.add_argument("--out", help="result file (default bench/results/blind.json)")
    args = p.parse_args(argv)
    source = Path(args.benchmarks_dir).resolve()
    results = {}
    with tempfile.TemporaryDirectory() as root:
        for b in BENCHMARKS:
            (Path(root) / b).symlink_to(source / b, target_is_directory=True)
        for judge in args.judges.split(","):
            start = time.perf_counter()
            blind = run_blind([judge], list(BENCHMARKS), root)[f"blind:{judge}"]
            seconds = round(time.perf_counter() - start, 1)
            log(f"{judge}: {seconds} s")
            results[judge] = {"seconds": seconds, "benchmarks": {
                b: {"headline": r.headline, "categories": r.categories, "counts": r.counts, "notes": r.notes}
                for b, r in blind.items()}}
    write_result("blind", {"benchmarks_dir": str(source), "judges": results}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
