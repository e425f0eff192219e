"""Real size on CPU: ViT-B-32 at 224 px, loaded offline from a Hugging Face cache (`openai` tag,
random weights in the cache layout of tests/fixtures/hf_cache.py), one NegCLIP-layout training
step and an eval pass (tests/fixtures/real_size.py): wall and CPU seconds, and the process's peak
resident memory after each phase.

    .venv/bin/python bench/bench_real_size.py                # 4 anchors (8 images, 16 texts)
    .venv/bin/python bench/bench_real_size.py --anchors 8 --reps 2

Peak memory is the process's high-water mark (`ru_maxrss`) read after each phase, so each figure
includes the phases before it, run in this order: `load` (the model and its weights), `eval`
(no-grad encoding), `step` (activations, gradients, AdamW's two moments). The step is timed
`--reps` times on fresh copies of the loaded model (the loaded one stays in memory: the step's
peak holds both). Results go to bench/results/real_size.json.
"""
from __future__ import annotations

import argparse
import copy
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ["HF_HUB_OFFLINE"] = "1"
HF_HOME = tempfile.mkdtemp(prefix="compclip_hf_home_")
os.environ["HF_HOME"] = HF_HOME  # before huggingface_hub is imported: it reads HF_HOME once
os.environ.pop("HF_HUB_CACHE", None)

from bench.common import log, summarize, timed, write_result  # noqa: E402


def peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchors", type=int, default=4, help="anchors B: 2B images, 4B texts")
    parser.add_argument("--reps", type=int, default=1, help="training steps timed (each on a fresh copy)")
    parser.add_argument("--eval-items", type=int, default=4, help="items per benchmark file of the fixture data")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import shutil
    import torch
    from compclip.models import load_model
    from tests.fixtures.eval_data import make_data_root
    from tests.fixtures.real_size import BENCHMARKS, eval_pass, negclip_batch, train_step

    try:
        log("writing the cache (a child process, so its memory is not counted here)")
        subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                        "from tests.fixtures.hf_cache import add_tag_weights; "
                        "add_tag_weights(sys.argv[2], 'ViT-B-32', 'openai', seed=1)", str(ROOT), HF_HOME],
                       check=True)
        base = peak_mib()
        log("loading ViT-B-32 / openai from the cache")
        loaded, load_wall, load_cpu = timed(lambda: load_model("ViT-B-32", "openai"))
        phases = {"load": {"wall_s": round(load_wall, 2), "cpu_s": round(load_cpu, 2), "peak_rss_mib": peak_mib()}}
        root = make_data_root(Path(HF_HOME) / "eval_data", n=args.eval_items, seed=1)
        log(f"eval pass: {', '.join(BENCHMARKS)}")
        flat, wall, cpu = timed(lambda: eval_pass(loaded, root))
        phases["eval"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "metrics": len(flat),
                          "peak_rss_mib": peak_mib()}
        batch = negclip_batch(loaded, args.anchors)
        walls, cpus, losses = [], [], []
        for rep in range(args.reps):
            model = copy.deepcopy(loaded.model)
            log(f"training step {rep + 1} of {args.reps}")
            loss, wall, cpu = timed(lambda: train_step(model, batch))
            walls.append(wall)
            cpus.append(cpu)
            losses.append(loss)
            del model
        phases["step"] = {"wall_s": summarize(walls, 2), "cpu_s": summarize(cpus, 2), "loss": losses,
                          "peak_rss_mib": peak_mib()}
    finally:
        shutil.rmtree(HF_HOME, ignore_errors=True)
    params = sum(p.numel() for p in loaded.model.parameters())
    write_result("real_size", {
        "config": {"arch": "ViT-B-32", "pretrained": "openai (random weights, Hugging Face cache, offline)",
                   "image_size": 224, "anchors": args.anchors, "images": 2 * args.anchors,
                   "texts": 4 * args.anchors, "benchmarks": list(BENCHMARKS), "eval_items": args.eval_items,
                   "params": params, "torch_threads": torch.get_num_threads(),
                   "activation": loaded.info.activation},
        "rss_before_load_mib": base, "phases": phases,
        "notes": "peak_rss_mib is the process's high-water mark after each phase (cumulative); the step "
                 "runs on a copy of the loaded model, so its figure holds two models, one's gradients and "
                 "AdamW's two moments"}, args.out)


if __name__ == "__main__":
    main()
