"""One GPU, one command: our trainer against open_clip_train on the same card, model, batch,
precision, optimiser and data; our NegCLIP-style batch; where the time goes.

    python bench/bench_gpu.py [--steps 120] [--warmup 30] [--reps 2] [--quick]

Needs a CUDA device. Same everything that can be the same, for the plain CLIP comparison:
- ViT-B-32 from random weights, batch 256, bf16 autocast (ours: `precision: bf16` through
  `accelerate launch --config_file launch/gpu_1.yaml`; theirs: `--precision amp_bf16`), AdamW lr
  1e-4, wd 0.2, betas (0.9, 0.98), eps 1e-6, cosine schedule without warm-up, no clipping;
- the same AdamW implementation: open_clip_train builds torch's default AdamW, which on CUDA is the
  multi-tensor `foreach` kernel, so ours runs with `optim.implementation=foreach`;
- data: COCO captions (`bench.common.coco_captions`) with 640x480 JPEGs made here (smooth random
  colour fields plus noise, quality 90: ~photo-sized files), 224 px open_clip train transform,
  `--workers` DataLoader processes each. Ours reads webdataset shards; theirs the same JPEG bytes
  as files plus a tab-separated CSV (`--dataset-type csv`), rows repeated to `steps x batch`.
What ours does that theirs does not: texts encoded at the batch's longest caption instead of the
77-token context (models/text_length.py), JPEGs decoded at reduced size when much larger than the
input (`data.jpeg_draft`, PIL draft), uint8 batches normalised on the GPU (trainer/transforms.py).

Also, ours only: the NegCLIP-style batch (2B images x 4B texts: a neighbour partner and 2 hard
negatives per anchor) with the trainer's default optimiser (`auto`: fused AdamW), through
bench_trainer.py's GPU case (`gpu_case`); goal 1,300 anchors/s on one H100.

samples/s as in bench_vs_open_clip.py: from the wall times of TensorBoard events between the
first log at or after `--warmup` steps and the last (bench.common.steady_rate). Runs interleaved,
order reversed every repetition. Peak memory: ours `torch.cuda.max_memory_allocated` (the
trainer's `train/memory_mb`); for both, the card's `memory.used` sampled by nvidia-smi every
0.25 s during the run (context and the allocator's cache included: the same view of both).

Where the time goes (`profile`): the data path alone (our loader, same workers, no model) and the
step alone (forward + backward + AdamW in bf16 on random batches of each shape, COCO caption
lengths, no data loading), in anchors/s: a run's rate is at most the smaller of the two.

Writes bench/results/gpu.json (`--data-probe-only`: the data path alone, bench/results/gpu_data_probe.json).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.bench_trainer import GPU_GOAL, _random_batch, gpu_case  # noqa: E402
from bench.bench_vs_open_clip import export_csv, intervals  # noqa: E402
from bench.common import (coco_captions, log, ratio_stat, steady_rate, summarize, tb_scalars,  # noqa: E402
                          write_caption_shards, write_result)

ARCH = "ViT-B-32"
SAME_OPTIM = ["optim.implementation=foreach", "optim.weight_decay=0.2", "optim.betas=[0.9,0.98]", "optim.eps=1.0e-6",
              "schedule.warmup_steps=0", "schedule.kind=cosine"]
CASES = ("ours_plain", "open_clip_train", "ours_negclip")


def photo_jpeg(i: int, size: tuple[int, int] = (640, 480)) -> bytes:
    """A 640x480 JPEG: a smooth random colour field (bicubic from 16x12) plus pixel noise, q=90."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(i)
    base = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).resize(size, Image.BICUBIC)
    pixels = np.asarray(base, dtype=np.int16) + rng.normal(0, 10, (size[1], size[0], 3)).astype(np.int16)
    buf = io.BytesIO()
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


class MemorySampler:
    """The card's memory.used (MiB) from nvidia-smi every `interval` s, in a thread; `peak`."""

    def __init__(self, interval: float = 0.25):
        self.interval, self.peak, self.samples = interval, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.split()
                if out:
                    self.peak, self.samples = max(self.peak, float(out[0])), self.samples + 1
            except (OSError, subprocess.SubprocessError, ValueError):
                pass
            self._stop.wait(self.interval)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_theirs(tmp: Path, csv_path: Path, rep: int, args, env: dict) -> dict:
    logs = tmp / "theirs"
    cmd = [sys.executable, "bench/_open_clip_train_entry.py", "--model", args.gpu_arch,
           "--train-data", str(csv_path), "--dataset-type", "csv", "--csv-separator", "\t",
           "--csv-img-key", "filepath", "--csv-caption-key", "title",
           "--batch-size", str(args.gpu_batch), "--epochs", "1", "--workers", str(args.gpu_workers),
           "--lr", "1e-4", "--wd", "0.2", "--beta1", "0.9", "--beta2", "0.98", "--eps", "1e-6",
           "--warmup", "0", "--lr-scheduler", "cosine", "--precision", "amp_bf16" if not args.dry_run else "fp32",
           "--device", "cuda" if not args.dry_run else "cpu",
           "--seed", "0", "--logs", str(logs), "--name", f"run-{rep}", "--report-to", "tensorboard",
           "--log-every-n-steps", str(args.gpu_log_every), "--zeroshot-frequency", "0",
           "--val-frequency", "0", "--save-frequency", "0"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(env, OMP_NUM_THREADS=str(args.gpu_threads)),
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"open_clip_train failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    # open_clip logs step i (0-based) after i + 1 completed steps
    points = [(step + 1, t) for step, t, _ in tb_scalars(logs / f"run-{rep}" / "tensorboard",
                                                         "train/samples_per_second")]
    return {**steady_rate(points, args.gpu_batch, args.gpu_warmup), "wall_s": wall,
            "intervals": intervals(points, args.gpu_batch),
            "command": " ".join(cmd).replace(str(tmp), "<tmp>")}


def probe_batches(args) -> int:
    """Timed batches of the data probe: 8 per worker, at least 30 (10 with --quick). With fewer
    (30 for 12 workers), each worker's last batch weighs on the window."""
    return 10 if args.quick else max(30, 8 * max(1, args.gpu_workers))


def data_probe(plain: Path, negclip: Path, args) -> dict:
    """The data path alone in both shapes: plain, and NegCLIP-style (neighbour + 2 negatives)."""
    n = probe_batches(args)
    return {"plain": data_only(plain, "none", 0, args, n), "negclip": data_only(negclip, "neighbour", 2, args, n)}


def data_only(shards: Path, partner: str, negs: int, args, batches: int) -> dict:
    """Anchors/s of our data path alone: the trainer's loader (same workers, draft decoding at the
    model's input size, uint8 images as the trainer's workers send them, pinned memory), batches of
    B anchors in the shape, no model."""
    from compclip.models import load_model
    from compclip.trainer.compose import Composer
    from compclip.trainer.data import ShardStream, make_loader, resolve_sources
    from compclip.trainer.streams import image_size
    from compclip.trainer.transforms import split_normalize
    loaded = load_model(args.gpu_arch)
    workers_part, _ = split_normalize(loaded.preprocess_train)  # as trainer.streams.make_composer
    composer = Composer(workers_part, loaded.tokenizer, args.gpu_batch, partner, None, negs,
                        draft_size=image_size(loaded.model))
    warm = 2 * max(1, args.gpu_workers)  # every worker past its first batch: started, shuffle buffer full
    stream = ShardStream(resolve_sources([str(shards)]), None, composer, 0, 0, 1, batches + warm,
                         max(1, args.gpu_workers), 256, 0.01)
    it = iter(make_loader(stream, args.gpu_workers, 0))
    for _ in range(warm):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = time.perf_counter() - start
    del it
    return {"anchors_per_s": round(batches * args.gpu_batch / dt, 1), "batches": batches, "warm_batches": warm,
            "workers": args.gpu_workers}


def step_only(args, steps: int) -> dict:
    """Anchors/s of forward + backward + AdamW (fused, the trainer's default; and foreach) in bf16
    autocast on random batches of the plain and NegCLIP-style shapes, COCO caption lengths."""
    import torch
    from compclip.models import load_model
    from compclip.trainer.loss import ContrastiveLoss, Layout
    from compclip.trainer.optim import build_optimizer
    from compclip.trainer.recipe import OptimConfig
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    loaded = load_model(args.gpu_arch, device=device)
    model, pairs = loaded.model, coco_captions()
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    loss_fn = ContrastiveLoss()
    out = {}
    for implementation in ("auto", "foreach"):
        opt = build_optimizer(model, OptimConfig(lr=1e-5, implementation=implementation))
        for name, n_img, n_txt in (("plain", 1, 1), ("negclip", 2, 4)):
            b = _random_batch(args.gpu_batch, n_img, n_txt, size, model.context_length, loaded.tokenizer,
                              pairs).to(device)
            layout = Layout.from_batch(b)

            def step():
                with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                    img, txt, scale = model(b.images, b.texts)
                    loss = loss_fn(img, txt, scale, layout)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return float(loss.detach())  # the trainer reads the loss every step too
            for _ in range(3):
                step()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
            out[f"{name}_{implementation}"] = round(steps * args.gpu_batch / (time.perf_counter() - start), 1)
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"anchors_per_s": out, "steps": steps, "optimizers": "auto = fused AdamW, foreach = multi-tensor"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", dest="gpu_arch", default=ARCH)
    p.add_argument("--batch", dest="gpu_batch", type=int, default=256)
    p.add_argument("--steps", dest="gpu_steps", type=int, default=120, help="steps per run (one epoch)")
    p.add_argument("--warmup", dest="gpu_warmup", type=int, default=30, help="completed steps before the window")
    p.add_argument("--log-every", dest="gpu_log_every", type=int, default=10)
    p.add_argument("--workers", dest="gpu_workers", type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)),
                   help="DataLoader workers, both trainers (default: cores - 2, at most 12)")
    p.add_argument("--threads", dest="gpu_threads", type=int, default=4, help="OMP threads of each main process")
    p.add_argument("--reps", type=int, default=2, help="runs of each case, interleaved")
    p.add_argument("--images", type=int, default=4096, help="distinct 640x480 JPEGs (cycled)")
    p.add_argument("--no-profile", action="store_true", help="skip the data-only and step-only measurements")
    p.add_argument("--quick", action="store_true", help="smoke check: 40 steps, warm-up 10, 1 rep, 512 images")
    p.add_argument("--data-probe-only", action="store_true",
                   help="only the data path alone (no runs, no step): bench/results/gpu_data_probe.json")
    p.add_argument("--dry-run", action="store_true", help=argparse.SUPPRESS)  # the plumbing on a CPU, tiny model
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.quick:
        args.gpu_steps, args.gpu_warmup, args.gpu_log_every, args.reps, args.images = 40, 10, 5, 1, 512
    if args.gpu_steps - args.gpu_warmup < 2 * args.gpu_log_every:
        raise SystemExit("--steps must leave at least two log intervals after --warmup")
    import torch
    if not torch.cuda.is_available() and not args.dry_run:
        raise SystemExit("bench_gpu.py: no CUDA device visible")
    device_name = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("WORLD_SIZE", None)
    pairs = coco_captions()
    runs: dict[str, list[dict]] = {c: [] for c in CASES}
    profile = {}
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            jpegs = list(pool.map(photo_jpeg, range(args.images), chunksize=16))
        log(f"gpu: {len(jpegs)} JPEGs 640x480, mean {sum(map(len, jpegs)) / len(jpegs) / 1024:.0f} KiB, "
            f"{time.perf_counter() - t0:.1f} s")

        def picture(i: int) -> bytes:
            return jpegs[i % len(jpegs)]
        plain = write_caption_shards(tmp / "plain", pairs, args.images, per_shard=256, image=picture)
        negclip = write_caption_shards(tmp / "negclip", pairs, args.images, per_shard=256, negatives=2,
                                       neighbours=3, image=picture, prefix="n")
        csv_path = export_csv(plain, tmp / "csv", args.gpu_steps * args.gpu_batch)
        log(f"gpu: shards and CSV written ({time.perf_counter() - t0:.1f} s)")
        if args.data_probe_only:
            probe = data_probe(plain, negclip, args)
            log(f"gpu: data path alone {json.dumps(probe)}")
            write_result("gpu_data_probe", {"device": device_name, "arch": args.gpu_arch, "batch": args.gpu_batch,
                                            "images": f"{args.images} distinct 640x480 JPEGs, q=90",
                                            "data_only": probe}, args.out)
            return
        for rep in range(args.reps):
            order = CASES if rep % 2 == 0 else tuple(reversed(CASES))
            for case in order:
                with MemorySampler() as mem:
                    if case == "open_clip_train":
                        r = run_theirs(tmp, csv_path, rep, args, env)
                    elif case == "ours_plain":
                        r = gpu_case(tmp, f"plain-{rep}", plain, "none", 0, args, env, SAME_OPTIM, args.dry_run)
                    else:
                        r = gpu_case(tmp, f"negclip-{rep}", negclip, "neighbour", 2, args, env, (), args.dry_run)
                r["command"] = r["command"].replace(str(tmp), "<tmp>")
                r["card_memory_used_peak_mib"] = mem.peak if mem.samples else None
                runs[case].append(r)
                log(f"gpu rep {rep + 1}/{args.reps} {case:16s} {r['samples_per_s']:7.1f} samples/s "
                    f"(steps {r['from_step']}-{r['to_step']}, run {r['wall_s']:.1f} s, card peak {mem.peak:.0f} MiB)")
        if not args.no_profile:
            log("gpu: profile: data path alone, step alone")
            profile = {"data_only": data_probe(plain, negclip, args), "step_only": step_only(args, 5 if args.quick else 20)}
            log(f"gpu: profile {json.dumps(profile)}")

    def rates(case: str) -> list[float]:
        return [r["samples_per_s"] for r in runs[case]]

    def peak(case: str, key: str):
        values = [r[key] for r in runs[case] if r.get(key) is not None]
        return max(values) if values else None
    ratio = ratio_stat(rates("ours_plain"), rates("open_clip_train"))
    negclip_rate = summarize(rates("ours_negclip"), 1)
    result = {
        "device": device_name, "arch": args.gpu_arch, "batch": args.gpu_batch, "steps": args.gpu_steps,
        "warmup_steps": args.gpu_warmup, "log_every": args.gpu_log_every, "workers": args.gpu_workers,
        "threads": args.gpu_threads, "reps": args.reps, "images": f"{args.images} distinct 640x480 JPEGs, q=90",
        "captions": "COCO (SugarCrepe caption / negative_caption fields)",
        "method": "steady-state samples/s from TensorBoard event wall times after warm-up; cases interleaved",
        "precision": {"ours": "bf16 autocast (accelerate, launch/gpu_1.yaml)", "open_clip_train": "amp_bf16"},
        "optimizer": {"ours_plain": "torch AdamW foreach (optim.implementation=foreach)",
                      "open_clip_train": "torch AdamW default (foreach on CUDA)",
                      "ours_negclip": "torch AdamW fused (optim.implementation=auto, the trainer's default)"},
        "ours_plain": {"samples_per_s": summarize(rates("ours_plain"), 1),
                       "peak_memory_allocated_mib": peak("ours_plain", "peak_memory_mib"),
                       "card_memory_used_peak_mib": peak("ours_plain", "card_memory_used_peak_mib")},
        "open_clip_train": {"samples_per_s": summarize(rates("open_clip_train"), 1),
                            "peak_memory_allocated_mib": None,
                            "card_memory_used_peak_mib": peak("open_clip_train", "card_memory_used_peak_mib")},
        "ours_negclip": {"samples_per_s": negclip_rate,
                         "shape": "2B images x 4B texts (neighbour partner + 2 negatives per anchor)",
                         "peak_memory_allocated_mib": peak("ours_negclip", "peak_memory_mib"),
                         "card_memory_used_peak_mib": peak("ours_negclip", "card_memory_used_peak_mib"),
                         "goal_samples_per_s": GPU_GOAL, "goal_met": negclip_rate["median"] >= GPU_GOAL},
        "ratio_ours_over_theirs": ratio, "goal": ">= 1.3 (plain CLIP, same optimiser, same card)",
        "goal_met": ratio["median"] >= 1.3,
        "memory_note": "peak_memory_allocated_mib: torch.cuda.max_memory_allocated in our trainer (not "
                       "available from open_clip_train); card_memory_used_peak_mib: nvidia-smi memory.used "
                       "sampled every 0.25 s during each run, the same view of both (CUDA context and "
                       "allocator cache included)",
        "profile": profile, "runs": runs,
    }
    write_result("gpu", result, args.out)


if __name__ == "__main__":
    main()
