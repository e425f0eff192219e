"""A run's evaluations, epoch after epoch: the trainer's `evaluate_model` on the demo's benchmarks,
with the model's own tokenizer at every evaluation against the run's cached tokenizer
(models/token_cache.py: each benchmark text tokenized once per run).

    .venv/bin/python bench/bench_eval_epochs.py [--evals 3] [--reps 3] [--bench-scale 1] [--quick]

A demo world's benchmarks (`python -m datagen world build --train-size 100`, `--bench-scale`),
the demo's architecture from random weights (`demo-vit-64`), its evaluation settings
(`recipes/demo_clip_ft.yaml`: visla, sugarcrepe, bivlc, aro, left_right; batch 512), one torch
thread (as each of the demo's finetunes). Per repetition and tokenizer, `--evals` evaluations in
one process in a row, as a run's epochs (the benchmarks stay loaded between them, as in the
trainer); the two tokenizers alternate, order reversed every repetition, after one untimed
evaluation (imports, spaCy, loading). Reported: seconds of the first and of the later
evaluations, and per repetition the ratio of the later evaluations' seconds, model tokenizer /
cached. The metrics of both must be equal (checked). Writes bench/results/eval_epochs.json.
"""
from __future__ import annotations

import argparse
import os
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

import torch  # noqa: E402

from bench.common import log, ratio_stat, summarize, write_result  # noqa: E402
from compclip.models import load_model  # noqa: E402
from compclip.models.token_cache import CachedTokenizer  # noqa: E402
from compclip.trainer.evaluation import evaluate_model  # noqa: E402
from compclip.trainer.recipe import load_recipe  # noqa: E402


def evaluations(loaded, tokenizer, cfg, n: int) -> tuple[list[float], dict]:
    seconds, metrics = [], None
    for _ in range(n):
        t = time.perf_counter()
        metrics, _, _ = evaluate_model(loaded.model, loaded.preprocess, tokenizer, cfg, torch.device("cpu"),
                                       "bench", progress=False)
        seconds.append(time.perf_counter() - t)
    return seconds, metrics


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--evals", type=int, default=3, help="evaluations per run (the demo's epochs)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--bench-scale", type=float, default=1.0)
    p.add_argument("--quick", action="store_true", help="smoke check: 2 evaluations, 1 repetition, scale 0.2")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.quick:
        args.evals, args.reps, args.bench_scale = 2, 1, 0.2
    if args.evals < 2 or args.reps < 1:
        p.error("--evals must be at least 2 (a first and a later evaluation) and --reps at least 1")
    torch.set_num_threads(1)
    recipe = load_recipe(ROOT / "recipes" / "demo_clip_ft.yaml")
    with tempfile.TemporaryDirectory(prefix="bench_eval_epochs_") as tmp:
        world = Path(tmp) / "world"
        subprocess.run([sys.executable, "-m", "datagen", "world", "build", "--out", str(world), "--seed", "0",
                        "--train-size", "100", "--bench-scale", str(args.bench_scale)], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        cfg = recipe.eval.model_copy(update={"data_root": str(world / "benchmarks")})
        torch.manual_seed(0)
        loaded = load_model(recipe.model.arch)
        loaded.model.eval()
        _, reference = evaluations(loaded, loaded.tokenizer, cfg, 1)  # untimed: imports, spaCy, loading
        runs = {"model_tokenizer": [], "cached": []}
        for rep in range(args.reps):
            order = ("model_tokenizer", "cached") if rep % 2 == 0 else ("cached", "model_tokenizer")
            for case in order:
                tokenizer = loaded.tokenizer if case == "model_tokenizer" else CachedTokenizer(loaded.tokenizer)
                seconds, metrics = evaluations(loaded, tokenizer, cfg, args.evals)
                if metrics != reference:
                    raise SystemExit(f"bench_eval_epochs: {case}'s metrics differ from the reference evaluation's")
                runs[case].append(seconds)
                log(f"eval epochs rep {rep + 1}/{args.reps} {case:15s} " + " ".join(f"{s:.2f}" for s in seconds) + " s")
    later = {case: [sum(s[1:]) / len(s[1:]) for s in v] for case, v in runs.items()}
    result = {
        "what": "seconds per evaluation of the trainer's evaluate_model, a run's evaluations in a row",
        "benchmarks": list(cfg.benchmarks), "arch": recipe.model.arch, "bench_scale": args.bench_scale,
        "evals": args.evals, "reps": args.reps, "threads": 1,
        "first_s": {case: summarize([s[0] for s in v]) for case, v in runs.items()},
        "later_s": {case: summarize(v) for case, v in later.items()},
        "ratio_later_model_over_cached": ratio_stat(later["model_tokenizer"], later["cached"]),
        "runs": runs,
    }
    write_result("eval_epochs", result, args.out)


if __name__ == "__main__":
    main()
