"""Approximate kNN (`find_neighbours(method="approx")`) on CLIP-like embeddings
(bench/clip_like.py): recall@k against exact search, build / tune / search time and peak memory
of the old defaults and the current ones, per size, and the recall at 10M projected from them.

    .venv/bin/python bench/bench_knn_approx.py                          # 250k and 1M, old and new
    .venv/bin/python bench/bench_knn_approx.py --sizes 3000000 --cases sweep   # recall per nprobe only
    .venv/bin/python bench/bench_knn_approx.py --sizes 50000 --threads 1       # smoke check

Cases, each in its own process on a float16 .npy memmap of the embeddings (how `datagen knn`
stores them), so its peak memory (VmHWM: the index, the process and the pages of the memmap it
touched) is its own:
- `old`: the defaults before this benchmark, `IVF<4 sqrt N>,Flat` with nprobe 16;
- `new`: the current defaults (`default_factory`, nprobe tuned by `tune_nprobe`);
- `sweep`: the current default index built once, recall@k of 1,000 sample queries at nprobe 8,
  16, 32, 64 (no full search: cheap enough for 3M).
The embeddings' measured neighbour structure (`neighbour_report`) is kept per size. The miss
rate (1 - recall) at each nprobe up to 32 is fitted as c * N^a * nprobe^-b over every size and
case run, and gives the projected recall at 3M and 10M per nprobe. Results are merged by size and
case into bench/results/knn_approx.json (`--refit`: only refit the projection to what is there).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if "--threads" in sys.argv:  # thread count must be fixed before numpy / faiss load BLAS
    _threads = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _threads

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.clip_like import neighbour_report, write_clip_like  # noqa: E402
from bench.common import RESULTS_DIR, log, write_result  # noqa: E402

SWEEP = (8, 16, 32, 64)
FIT_MAX_NPROBE = 32  # beyond it the miss rate sits on a floor (~0.4 %) more probes do not lower
PROJECT_TO = 10_000_000
RECORD = ("preliminary: taken on a shared 2-core machine under other jobs' load; timings are "
          "indicative only, recall and memory are not affected by the load")


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def run_case(path: str, case: str, k: int) -> dict:
    """One case on the memmap at `path` (in this process): stats, wall time, peak memory."""
    from compclip.datagen.images.knn import (Embeddings, _recall, build_index, default_factory,
                                             exact_neighbours, find_neighbours, search, set_nprobe)
    vectors = np.load(path, mmap_mode="r")
    n = len(vectors)
    emb = Embeddings(vectors, [str(i) for i in range(n)], np.arange(n, dtype=np.int64),
                     np.ones(n, bool), Path(path))
    t = time.perf_counter()
    if case == "old":
        _, _, out = find_neighbours(emb, k, "approx", factory=f"IVF{int(4 * math.sqrt(n))},Flat", nprobe=16)
    elif case == "new":
        _, _, out = find_neighbours(emb, k, "approx")
    elif case == "sweep":
        rows, factory = np.arange(n), default_factory(n)
        index = build_index(vectors, rows, "approx", factory, None)
        out = {"factory": factory, "build_s": round(time.perf_counter() - t, 3), "recall_by_nprobe": {}}
        pick = np.sort(np.random.default_rng(0).choice(n, min(1000, n), replace=False))
        truth = exact_neighbours(emb, rows, pick, k, 0.999)
        for nprobe in SWEEP:
            set_nprobe(index, factory, nprobe)
            found, _ = search(index, vectors, rows, pick, k, emb.hashes)
            out["recall_by_nprobe"][str(nprobe)] = _recall(truth, found)
    else:
        raise ValueError(f"unknown case '{case}' (old, new, sweep)")
    return {**out, "wall_s": round(time.perf_counter() - t, 2), "peak_rss_mb": peak_rss_mb(),
            "load_avg_1min": round(os.getloadavg()[0], 2)}


def misses(runs: dict) -> list[tuple[int, int, float]]:
    """(N, nprobe, 1 - recall) from every size and case recorded, nprobe up to FIT_MAX_NPROBE."""
    out = []
    for size, cases in runs.items():
        n = int(size)
        if "old" in cases:
            out.append((n, cases["old"]["nprobe"], 1 - cases["old"]["recall"]))
        for rec in (cases.get("new", {}).get("nprobe_tuning", {}).get("recall", {}),
                    cases.get("sweep", {}).get("recall_by_nprobe", {})):
            out += [(n, int(p), 1 - r) for p, r in rec.items()]
    return [x for x in out if x[2] > 0 and x[1] <= FIT_MAX_NPROBE]


def projection(runs: dict, sizes=(1_000_000, 3_000_000, PROJECT_TO)) -> dict:
    """Least-squares fit of log(miss) = log c + a log N - b log nprobe; recall per nprobe at
    `sizes` from it. Needs two sizes at least."""
    pts = misses(runs)
    if len({n for n, _, _ in pts}) < 2 or len({p for _, p, _ in pts}) < 2:
        return {"note": "needs two sizes and two nprobe values at least"}
    a = np.array([[1.0, math.log(n), -math.log(p)] for n, p, _ in pts])
    coef, *_ = np.linalg.lstsq(a, np.log([m for _, _, m in pts]), rcond=None)
    c, alpha, beta = math.exp(coef[0]), coef[1], coef[2]
    return {"model": "1 - recall = c * N^a * nprobe^-b", "c": round(c, 6), "a": round(alpha, 3),
            "b": round(beta, 3), "points": len(pts),
            "recall": {str(n): {str(p): round(max(0.0, 1 - c * n ** alpha * p ** -beta), 4)
                                for p in SWEEP if p <= FIT_MAX_NPROBE} for n in sizes}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="250000,1000000", help="comma-separated row counts")
    p.add_argument("--cases", default="old,new", help="comma-separated: old, new, sweep")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="BLAS/OpenMP threads (default: all)")
    p.add_argument("--work-dir", default=None, help="folder for the embedding memmaps (default: a temporary one)")
    p.add_argument("--out", default=None)
    p.add_argument("--refit", action="store_true", help="only refit the projection to the recorded runs")
    p.add_argument("--child", nargs=2, metavar=("NPY", "CASE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_case(args.child[0], args.child[1], args.k)))
        return
    path = Path(args.out) if args.out else RESULTS_DIR / "knn_approx.json"
    if args.refit:
        results = json.loads(path.read_text())
        results.update(record=RECORD, projection=projection(results["runs"]))
        write_result("knn_approx", results, path)
        return
    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        for n in [int(x) for x in args.sizes.split(",")]:
            npy = Path(tmp) / f"clip_like_{n}.npy"
            t = time.perf_counter()
            vectors = write_clip_like(npy, n, args.dim)
            entry = {}
            entry["data"] = {"generator": "bench.clip_like.write_clip_like (float16 memmap)", "d": args.dim,
                             "seed": 0, "generate_s": round(time.perf_counter() - t, 1),
                             **neighbour_report(vectors)}
            del vectors
            log(f"knn approx: {n:,} rows: {json.dumps(entry['data'])}")
            for case in args.cases.split(","):
                child = [sys.executable, __file__, "--child", str(npy), case, "--k", str(args.k)]
                if args.threads:
                    child += ["--threads", str(args.threads)]
                done = subprocess.run(child, check=True, capture_output=True, text=True)
                entry[case] = {**json.loads(done.stdout.strip().splitlines()[-1]),
                               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "threads": args.threads or os.cpu_count()}
                log(f"knn approx: {n:,} {case}: {json.dumps(entry[case])}")
                save(path, n, entry)


def save(path: Path, n: int, entry: dict) -> None:
    """Merge `entry` (one size's data and cases) into the results file as it is now (other
    runs may have written it meanwhile) and refit the projection."""
    results = json.loads(path.read_text()) if path.is_file() else {}
    runs = results.setdefault("runs", {})
    runs.setdefault(str(n), {}).update(entry)
    results.update(record=RECORD, projection=projection(runs))
    write_result("knn_approx", results, path)


if __name__ == "__main__":
    main()
