"""Trainer throughput on CPU: 1 vs 2 processes, and hard-negative batch shapes vs plain CLIP.

First an in-process step-only measurement (forward, backward, AdamW on random tensors in each
batch shape, rounds interleaved against load drift). Then whole runs: it runs `trainer/train.py` (through `accelerate launch` for 2 processes) on `tiny-vit-64` with
synthetic fixture shards, reads `train/samples_per_s` back from each run's TensorBoard file
(median over logging intervals, the first one dropped as warm-up; cases interleaved,
--repeats times, best run kept), and writes
bench/results/trainer.json. samples/s counts anchors (global), so partner images and
negative captions are extra work per sample. Not a test; numbers on a shared CPU are noisy.

    .venv/bin/python bench/bench_trainer.py [--steps 24] [--batch 32]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.fixtures import write_fixture_shards  # noqa: E402

CASES = {  # name -> (partner, negatives per image, processes)
    "plain_1proc": ("none", 0, 1),
    "plain_2proc": ("none", 0, 2),
    "trohn_text_1proc": ("none", 1, 1),       # B x 2B
    "negclip_1proc": ("neighbour", 2, 1),     # 2B x 4B
    "trohn_img_1proc": ("generated", 0, 1),   # 2B x 2B
    "trohn_img_2proc": ("generated", 0, 2),
}

RECIPE = """
name: bench
seed: 0
model: {{arch: tiny-vit-64}}
data: {{train_shards: ["{shards}"], samples_per_epoch: {samples}, batch_size: {batch}, workers: 1,
        shuffle_buffer: 64, partner: {partner}}}
negatives: {{per_image: {negs}}}
optim: {{lr: 1.0e-4}}
schedule: {{epochs: 1}}
logging: {{output_dir: "{out}", every_n_steps: 4, progress: false}}
checkpoint: {{keep_last: 1}}
"""


def samples_per_s(run_dir: Path) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return [e.value for e in events.Scalars("train/samples_per_s")]


def step_only(rounds: int, steps: int, batch: int) -> dict:
    """Forward + backward + AdamW of one process on random tensors in each batch shape, rounds
    interleaved (A B C D A B C D ...) so load drift on a shared machine hits every shape alike;
    median over rounds. Isolates the compute cost of partner images and negative columns."""
    import torch
    from models import load_model
    from trainer.batch import Batch
    from trainer.loss import ContrastiveLoss, Layout
    shapes = {"plain": (0, 0), "trohn_text": (0, 1), "negclip": (batch, 2), "trohn_img": (batch, 0)}
    loaded = load_model("tiny-vit-64")
    model, loss_fn = loaded.model, ContrastiveLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ctx = model.context_length if hasattr(model, "context_length") else 77
    times: dict[str, list[float]] = {k: [] for k in shapes}
    for _ in range(rounds):
        for name, (p, per) in shapes.items():
            h = batch * per
            b = Batch(torch.randn(batch + p, 3, 64, 64), torch.randint(1, 49000, (batch + p + h, ctx)), batch,
                      torch.arange(p), torch.arange(batch).repeat_interleave(per),
                      torch.ones(batch + p + h, dtype=torch.bool))
            start = time.perf_counter()
            for _ in range(steps):
                img, txt, scale = model(b.images, b.texts)
                loss_fn(img, txt, scale, Layout.from_batch(b)).backward()
                opt.step()
                opt.zero_grad()
            times[name].append(steps * batch / (time.perf_counter() - start))
    out = {k: round(statistics.median(v), 1) for k, v in times.items()}
    return {"anchors_per_s": out, "relative_to_plain": {k: round(v / out["plain"], 2) for k, v in out.items()},
            "rounds": rounds, "steps_per_round": steps, "batch": batch,
            "shapes": {k: f"{batch + p} images x {batch + p + batch * per} texts" for k, (p, per) in shapes.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=32, help="anchors per process per step")
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--threads", default="1", help="OMP_NUM_THREADS per process (torchrun sets 1 "
                        "for multi-process runs; 1 process with 2 threads on a shared 2-core box ran 4x slower)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per case (interleaved); the best is kept")
    parser.add_argument("--step-rounds", type=int, default=5, help="rounds of the in-process step-only measurement")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = args.threads
    import torch
    torch.set_num_threads(int(args.threads))
    step = step_only(args.step_rounds, 4, args.batch) if args.step_rounds else {}
    print("step only (1 process, anchors/s):", step.get("anchors_per_s"), flush=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=args.threads,
               TORCH_EXTENSIONS_DIR=str(ROOT / ".cache" / "torch_extensions"))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sets = {"none": write_fixture_shards(tmp / "none", n=256, per_shard=64),
                "generated": write_fixture_shards(tmp / "generated", n=256, per_shard=64, partner="generated"),
                "neighbour": write_fixture_shards(tmp / "neighbour", n=256, per_shard=64, neighbours=3)}
        for repeat in range(args.repeats):  # cases interleaved, best run kept: others share the CPU
            for name in args.cases:
                partner, negs, procs = CASES[name]
                recipe = tmp / f"{name}-{repeat}.yaml"
                recipe.write_text(RECIPE.format(shards=sets[partner], samples=args.steps * args.batch * procs,
                                                batch=args.batch, partner=partner, negs=negs,
                                                out=tmp / f"{name}-{repeat}"))
                launch = ([sys.executable, "trainer/train.py"] if procs == 1 else
                          [str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu",
                           "--num_processes", str(procs), "--num_machines", "1", "--mixed_precision", "no",
                           "--dynamo_backend", "no", "trainer/train.py"])
                start = time.time()
                out = subprocess.run(launch + [str(recipe)], cwd=ROOT, env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
                rates = samples_per_s(tmp / f"{name}-{repeat}" / "bench")
                rate = round(statistics.median(rates[1:] or rates), 1)
                entry = results.setdefault(name, {"partner": partner, "negatives_per_image": negs,
                                                  "processes": procs, "batch_per_process": args.batch,
                                                  "steps": args.steps, "runs": []})
                entry["runs"].append({"samples_per_s": rate, "intervals": [round(r, 1) for r in rates],
                                      "wall_s": round(time.time() - start, 1)})
                entry["samples_per_s"] = max(r["samples_per_s"] for r in entry["runs"])
                print(f"{name:18s} {rate:8.1f} samples/s", flush=True)
    plain = results.get("plain_1proc", {}).get("samples_per_s")
    summary = {name: round(r["samples_per_s"] / plain, 2) for name, r in results.items()} if plain else {}
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs: noisy)",
              "omp_num_threads_per_process": args.threads, "step_only": step,
              "model": "tiny-vit-64", "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "results": results,
              "relative_to_plain_1proc": summary}
    path = ROOT / "bench" / "results" / "trainer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
