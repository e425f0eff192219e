"""`eval compare` speed: two checkpoints over cached scores (goal: under 2 s), and the bootstrap
at the real benchmarks' sizes.

    .venv/bin/python bench/bench_eval_compare.py [--n 24] [--reps 5] [--quick] [--out PATH]

1. Two micro-vit-32 checkpoints are scored once on the synthetic fixture (`tests/fixtures/eval_data`,
   `--n`) on visla, sugarcrepe, sugarcrepe_pp, bivlc and aro (coco_order, vg_relation), filling a
   score cache (untimed). Then `python -m eval compare A B` over that cache is timed `--reps`
   times, in process (`eval.cli.main`: resolving, hashing both checkpoints, reading the cache,
   rebuilding the item tables, 1,000 paired resamples per metric, McNemar, Holm, the Markdown)
   and as a fresh command (`python -m eval compare ...`: the same plus interpreter start and
   imports; wall and CPU seconds), beside a command that only imports what it imports (scipy.stats,
   the benchmarks; not torch).
2. `eval.compare.compare` on two synthetic models at the published sizes (SugarCrepe 7,511 items
   in 7 subsets, about 1.5 items per image; ARO VG-Relation 23,937 items, one cluster per item;
   VISLA 1,613; BiVLC 2,933), every headline metric of each compared: the bootstrap's cost where
   the fixture is too small to show it.
Writes bench/results/eval_compare.json.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from bench.common import log, summarize, write_result  # noqa: E402

IMPORTS = "import scipy.stats, compclip.eval.benchmarks, compclip.eval.cli"  # what the command imports
BENCHMARKS = "visla,sugarcrepe,sugarcrepe_pp,bivlc,aro"
OPTIONS = '{"aro": {"parts": ["vg_relation", "coco_order"]}}'


def checkpoints(tmp: Path) -> list[str]:
    import torch
    from compclip.models import CheckpointMeta, load_model, save_checkpoint
    out = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = load_model("micro-vit-32").model
        meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none")
        out.append(str(save_checkpoint(tmp / f"run{seed}", "step_1", model, meta)))
    return out


def synthetic_models(rng: np.random.Generator) -> dict:
    """Two models' item tables at the published sizes; the second about 3 points better."""
    from compclip.eval import stats
    sizes = {"sugarcrepe": ([1406, 692, 788, 1652, 1406, 666, 246], 1.5), "aro": ([23937], 1.0),
             "visla": ([973, 640], 1.0), "bivlc": ([2933], 1.0)}
    models = {"a": {}, "b": {}}
    for bench, (parts, per_image) in sizes.items():
        n = sum(parts)
        clusters = np.sort(rng.integers(0, int(n / per_image), n))
        bounds = np.cumsum([0] + parts)
        a = rng.random(n) < 0.7
        b = a | (rng.random(n) < 0.1)
        for label, v in (("a", a), ("b", b)):
            metrics = {f"part{i}": stats.metric(v, np.arange(bounds[i], bounds[i + 1])) for i in range(len(parts))}
            metrics["micro"] = stats.metric(v, np.arange(n))
            metrics["macro"] = stats.metric(v, *(np.arange(bounds[i], bounds[i + 1]) for i in range(len(parts))))
            models[label][bench] = stats.ItemTable(clusters, metrics)
    return models


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=24, help="fixture size (items per subset ~ n..4n)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="fixture n=8, 2 repetitions")
    p.add_argument("--out", help="JSON path (default bench/results/eval_compare.json)")
    args = p.parse_args()
    if args.quick:
        args.n, args.reps = 8, 2
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    from compclip.eval import compare, scorecache
    from compclip.eval.cli import main as eval_main
    from tests.fixtures.eval_data import make_data_root
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = make_data_root(tmp / "data", n=args.n, seed=0)
        a, b = checkpoints(tmp)
        argv = ["compare", a, b, "--benchmarks", BENCHMARKS, "--data-root", str(root), "--options", OPTIONS,
                "--cache-dir", str(tmp / "scores"), "--quiet"]
        log("scoring both checkpoints once (fills the score cache)")
        assert eval_main(argv) == 0
        in_process, command, command_cpu, imports = [], [], [], []
        for _ in range(args.reps):
            scorecache._FILE_SHA.clear()  # each repetition hashes the checkpoints again, as a new command does
            t = time.perf_counter()
            assert eval_main(argv) == 0
            in_process.append(time.perf_counter() - t)
            for cmd, wall, cpu in ((["-m", "compclip.eval", *argv], command, command_cpu), (["-c", IMPORTS], imports, [])):
                before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                subprocess.run([sys.executable, *cmd], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                wall.append(time.perf_counter() - t)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        tables = compare.from_checkpoint(a, BENCHMARKS.split(","), str(root), json.loads(OPTIONS),
                                         scorecache.ScoreCache(tmp / "scores"))
        n_items = sum(len(t.clusters) for t in tables.values())
    models = synthetic_models(np.random.default_rng(0))
    names = [f"{bench}/{m}" for bench, t in models["a"].items() for m in t.metrics]
    real = []
    for _ in range(args.reps):
        t = time.perf_counter()
        compare.compare(models, names)
        real.append(time.perf_counter() - t)
    result = {
        "cached_two_checkpoints": {"benchmarks": BENCHMARKS, "fixture_n": args.n, "items": n_items,
                                   "in_process_s": summarize(in_process), "command_s": summarize(command),
                                   "command_cpu_s": summarize(command_cpu), "imports_only_s": summarize(imports),
                                   "goal_s": 2.0},
        "published_sizes": {"metrics": len(names), "items": sum(len(t.clusters) for t in models["a"].values()),
                            "resamples": 1000, "compare_s": summarize(real)},
    }
    log(f"cached: in process {result['cached_two_checkpoints']['in_process_s']['median']} s, command "
        f"{result['cached_two_checkpoints']['command_s']['median']} s; published sizes "
        f"({len(names)} metrics): {result['published_sizes']['compare_s']['median']} s")
    write_result("eval_compare", result, args.out)


if __name__ == "__main__":
    main()
