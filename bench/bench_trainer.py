"""Trainer throughput: today's code against the code before issue 18 (same run), the cost of
hard-negative batches against their FLOPs, and 1 vs 2 processes.

    .venv/bin/python bench/bench_trainer.py [--steps 32] [--reps 3] [--quick]
    .venv/bin/python bench/bench_trainer.py --gpu      # GPU machine: only the ViT-B-32 NegCLIP-batch run

Captions are real COCO captions (bench.common.coco_captions: SugarCrepe's `caption` fields, with
their `negative_caption` as hard negatives), so text lengths follow COCO's distribution (mean
~14 tokens with start/end, 77 context); images stay the 32 px fixture scenes.

Parts:
- `flops`: forward FLOPs of one image and one text through `tiny-vit-64`: the matmuls counted by
  `torch.utils.flop_counter.FlopCounterMode` plus attention's sequence-length-dependent part
  (QK^T and AV: 4 L^2 d per layer, which the counter misses on CPU's fused attention), the text at
  the length it is encoded at: the full 77-token context for the old code, and for today's code
  the expected longest caption of a batch of that shape's texts (`models.text_length` trims each
  batch to it; expectation over random batches of the COCO captions). From them the
  encoder-FLOP ratio of each batch shape per anchor: plain B x B = 1 image + 1 text; TROHN-Text
  B x 2B = 1 + 2; TROHN-Img 2B x 2B = 2 + 2; NegCLIP-style 2B x 4B = 2 + 4; left-right (the
  recipe's 480 + 32 stitched pairs with mirrored partners, scaled to 30 + 2 of 32) 34 x 34 =
  1.0625 + 1.0625. Forward + backward is ~3x forward for images and texts alike, so the forward
  ratio is the training ratio; the whole train step's FLOPs (model + loss, forward + backward,
  attention added analytically) are counted too, as a check.
- `old_vs_new`: each layout run whole by today's `trainer/train.py` and by the one of commit
  `--old-commit` (43bb405, before issue 18's changes: full-context text, float images from the
  workers, per-epoch loader workers), written to a temporary folder with `git archive` and run
  with its own code first on sys.path and the same venv; the same recipe and shards; runs
  interleaved with today's. Ratio = today's / old anchors/s per repetition (goal for NegCLIP-style:
  >= 1.4x).
- `step_only`: forward + backward + the trainer's AdamW (`trainer.optim.build_optimizer`) in
  this process on random tensors of each shape (no data loading), shapes interleaved,
  `--step-rounds` rounds: the compute-only cost.
- `compose`: CPU ms per anchor of the data path alone (read, decode, augment, partner,
  negatives, tokenise, collate) per shape, in-process: what the data-loader worker spends.
- `runs`: whole runs of `trainer/train.py` on fixture shards (`tests.fixtures.trainer_data`; partners from
  neighbours with `keys.tsv` or generated partner members, negatives from `neg.json`), through
  `accelerate launch` for 2 processes. Cases interleaved, `--reps` times. samples/s = global
  anchors per second in the steady state: from the wall times of the TensorBoard events
  (written right after a step every `--log-every` steps) between the first log at or after
  `--warmup` steps and the last one (bench.common.steady_rate), as bench_vs_open_clip.py does.
  Cost of a shape = plain samples/s / its samples/s (paired by repetition); goal: cost within
  1.1x of its FLOP ratio (cost / FLOP ratio <= 1.1), for each code version against its own FLOPs.
- scaling: `plain_2proc` (2 processes, 1 thread each) against `plain_1proc` (1 thread) and
  `plain_1proc_2thr` (1 process, 2 threads: the same cores); and the same 1 vs 2 processes
  step-only (torchrun, DDP over gloo, random tensors, `--ddp-rounds`) with the time of one
  gradient all-reduce alone: the bound without data loading.
- `gpu`: only with a CUDA device: ViT-B-32, NegCLIP-style batch (B=256, 2B x 4B), bf16,
  `accelerate launch --config_file launch/gpu_1.yaml`, `--gpu-reps` runs; goal 1,300 samples/s
  per H100. Without `--gpu` it runs after the CPU cases (which hide CUDA, so they measure the
  CPU either way); `--gpu` runs it alone and merges it into an existing trainer.json. Without a
  GPU it records that it did not run and the command that runs it.

Writes bench/results/trainer.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import (RESULTS_DIR, coco_captions, export_commit, gpu_name, log, ratio_stat,  # noqa: E402
                          steady_rate, summarize, tb_scalars, token_lengths, write_caption_shards,
                          write_result)

ARCH = "tiny-vit-64"
OLD_COMMIT = "43bb405"  # the code before issue 18's speed changes
LEFTRIGHT_SOURCES = (30, 2)  # the left-right recipe's 448 + 32 of 480, scaled to a batch of 32
# shape -> (partner, negatives per image, images per anchor, texts per anchor, label), at batch 32
SHAPES = {
    "plain": ("none", 0, 1, 1, "plain CLIP, B x B"),
    "trohn_text": ("none", 1, 1, 2, "TROHN-Text, B x 2B"),
    "trohn_img": ("generated", 0, 2, 2, "TROHN-Img, 2B x 2B"),
    "negclip": ("neighbour", 2, 2, 4, "NegCLIP-style, 2B x 4B"),
    "leftright": ("mirrored", 0, 34 / 32, 34 / 32, "left-right, (B + P) x (B + P), B = 30 + 2 stitched, P = 2"),
}
# case -> (shape, processes, threads per process, code: "new" = this tree, "old" = OLD_COMMIT)
CASES = {
    **{f"{shape}_1proc": (shape, 1, 1, "new") for shape in SHAPES},
    **{f"{shape}_old": (shape, 1, 1, "old") for shape in SHAPES},
    "plain_2proc": ("plain", 2, 1, "new"),
    "plain_1proc_2thr": ("plain", 1, 2, "new"),
}
QUICK_CASES = ["plain_1proc", "plain_old", "negclip_1proc", "negclip_old"]
GPU_COMMAND = (".venv/bin/python bench/bench_trainer.py --gpu && .venv/bin/python bench/run_all.py --report-only"
               "   # or the whole .venv/bin/python bench/run_all.py: with CUDA visible it includes this run")
GPU_GOAL = 1300.0

RECIPE = """
name: bench
seed: 0
precision: {precision}
model: {{arch: {arch}}}
data: {{train_shards: {shards}, samples_per_epoch: {samples}, batch_size: {batch}, workers: {workers},
        shuffle_buffer: 256, partner: {partner}{source_batch}}}
negatives: {{per_image: {negs}}}
optim: {{lr: 1.0e-4}}
schedule: {{epochs: 1}}
logging: {{output_dir: "{out}", every_n_steps: {log_every}, progress: false}}
checkpoint: {{keep_last: 1}}
"""


# --- FLOPs and compute-only -------------------------------------------------------------------

def attention_flops(width: int, layers: int, length: int) -> int:
    """Forward FLOPs of attention's sequence-length-dependent matmuls (QK^T and AV, 2 per
    multiply-add): 4 L^2 d per layer. FlopCounterMode misses them on CPU (fused attention)."""
    return 4 * length * length * width * layers


def expected_batch_max(lengths: list[int], texts: int, draws: int = 400, seed: int = 0) -> float:
    """Expected longest of `texts` token lengths drawn at random: the length a trimmed batch of
    that many texts is encoded at."""
    import random
    rng = random.Random(seed)
    return sum(max(rng.choices(lengths, k=texts)) for _ in range(draws)) / draws


def encoder_flops(arch: str = ARCH, batch: int = 32) -> dict:
    """Forward FLOPs of one image and one text (matmuls counted + attention added), the text at
    the full context (old code) and at each shape's expected trimmed length (today's code); the
    FLOP ratio per anchor of each shape for both; and the FLOPs of a whole train step per shape."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from compclip.models import load_model
    from compclip.trainer.loss import ContrastiveLoss, Layout
    loaded = load_model(arch)
    model = loaded.model
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    ctx = model.context_length
    patch = model.visual.conv1.kernel_size[0]
    img_tokens = (size // patch) ** 2 + 1
    v_width, v_layers = model.visual.transformer.width, model.visual.transformer.layers
    t_width, t_layers = model.transformer.width, model.transformer.layers
    pairs = coco_captions()
    lengths = token_lengths([t for pair in pairs for t in pair], loaded.tokenizer)

    def count(fn) -> int:
        with FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops()

    def text_flops(length: int) -> int:
        tokens = torch.zeros(1, ctx, dtype=torch.long)
        tokens[0, :length] = 1000
        tokens[0, length - 1] = 49407  # end of text: the argmax the trimmed tower pools at
        with torch.no_grad():
            return count(lambda: model.encode_text(tokens)) + attention_flops(t_width, t_layers, length)
    with torch.no_grad():
        f_img = count(lambda: model.encode_image(torch.randn(1, 3, size, size))) + \
            attention_flops(v_width, v_layers, img_tokens)
    trims = loaded.text_length == "per batch"  # today's code; the old one always used the full context
    old_txt = text_flops(ctx)
    loss_fn = ContrastiveLoss()
    shapes, step = {}, {}
    for name, (_, _, n_img, n_txt, label) in SHAPES.items():
        texts_in_batch = round(n_txt * batch)
        trimmed = expected_batch_max(lengths, texts_in_batch)
        lo, hi = int(trimmed), min(ctx, int(trimmed) + 1)  # interpolate between integer lengths
        f_new = text_flops(lo) + (trimmed - lo) * (text_flops(hi) - text_flops(lo)) if trims else old_txt
        shapes[name] = {"label": label, "images_per_anchor": n_img, "texts_per_anchor": n_txt,
                        "texts_per_batch": texts_in_batch, "expected_text_length": round(trimmed, 2),
                        "forward_flops_per_anchor": int(n_img * f_img + n_txt * f_new),
                        "old_forward_flops_per_anchor": int(n_img * f_img + n_txt * old_txt)}
        b = _random_batch(batch, n_img, n_txt, size, ctx, loaded.tokenizer, pairs)
        length = int((b.texts != 0).sum(1).max()) if trims else b.texts.shape[1]
        attn = 3 * (b.images.shape[0] * attention_flops(v_width, v_layers, img_tokens)
                    + b.texts.shape[0] * attention_flops(t_width, t_layers, length))

        def train_step():
            img, txt, scale = model(b.images, b.texts)
            loss_fn(img, txt, scale, Layout.from_batch(b)).backward()
        step[name] = (count(train_step) + attn) / batch
        model.zero_grad(set_to_none=True)
    plain, old_plain = shapes["plain"]["forward_flops_per_anchor"], shapes["plain"]["old_forward_flops_per_anchor"]
    for name, s in shapes.items():
        s["flop_ratio"] = round(s["forward_flops_per_anchor"] / plain, 4)
        s["old_flop_ratio"] = round(s["old_forward_flops_per_anchor"] / old_plain, 4)
        s["old_over_new_flops"] = round(s["old_forward_flops_per_anchor"] / s["forward_flops_per_anchor"], 3)
        s["train_step_flops_per_anchor"] = int(step[name])
        s["train_step_flop_ratio"] = round(step[name] / step["plain"], 4)
        s["train_step_over_forward"] = round(step[name] / s["forward_flops_per_anchor"], 3)
    return {"arch": arch, "image_forward_flops": f_img, "image_tokens": img_tokens,
            "text_forward_flops_full_context": old_txt, "context_length": ctx,
            "text_length_today": loaded.text_length,
            "caption_tokens": {"mean": round(sum(lengths) / len(lengths), 2), "max": max(lengths),
                               "texts": len(lengths)},
            "batch_for_step_count": batch, "shapes": shapes,
            "note": "FlopCounterMode counts matmul/conv FLOPs (2 per multiply-add); attention's "
                    "QK^T and AV (4 L^2 d per layer forward, x3 for forward + backward) are added "
                    "analytically; texts at the full context (old code) or at the expected longest "
                    "caption of a batch (today's trimmed text); the loss's logit matrix is in the "
                    "train-step count, not in the encoder ratio"}


def _random_batch(batch: int, n_img: float, n_txt: float, size: int, ctx: int, tokenizer=None, pairs=None):
    """Random images and texts in a shape's layout: partners of the first `p` anchors, hard
    negatives owned round-robin by the anchors. Texts: tokenised COCO captions when `pairs` are
    given (their real lengths, so trimming acts as in training), else random full-context ids."""
    import torch
    from compclip.trainer.batch import Batch
    p = round((n_img - 1) * batch)
    h = round(n_txt * batch) - batch - p
    n_texts = batch + p + h
    if pairs:
        texts = tokenizer([pairs[i % len(pairs)][i // len(pairs) % 2] for i in range(n_texts)])
    else:
        texts = torch.randint(1, 49000, (n_texts, ctx))
    return Batch(torch.randn(batch + p, 3, size, size), texts, batch,
                 torch.arange(p), torch.arange(batch).repeat_interleave(h // batch if batch else 0),
                 torch.ones(n_texts, dtype=torch.bool)).check()


def trainer_optimizer(model):
    """The optimizer the trainer builds (trainer/optim.py), so step-only matches whole runs."""
    from compclip.trainer.optim import build_optimizer
    from compclip.trainer.recipe import OptimConfig
    return build_optimizer(model, OptimConfig(lr=1e-5))


def step_only(rounds: int, steps: int, batch: int, threads: int) -> dict:
    """Forward + backward + AdamW on random tensors in each shape, shapes interleaved per round
    (load drift hits all alike), one process; anchors/s per round and cost per round."""
    import torch
    from compclip.models import load_model
    from compclip.trainer.loss import ContrastiveLoss, Layout
    torch.set_num_threads(threads)
    loaded = load_model(ARCH)
    model, pairs = loaded.model, coco_captions()
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    loss_fn = ContrastiveLoss()
    opt = trainer_optimizer(model)
    batches = {name: _random_batch(batch, n_img, n_txt, size, model.context_length, loaded.tokenizer, pairs)
               for name, (_, _, n_img, n_txt, _) in SHAPES.items()}
    rates: dict[str, list[float]] = {k: [] for k in SHAPES}
    for r in range(rounds + 1):  # round 0: warm-up, not kept
        for name, b in batches.items():
            start = time.perf_counter()
            for _ in range(steps):
                img, txt, scale = model(b.images, b.texts)
                loss_fn(img, txt, scale, Layout.from_batch(b)).backward()
                opt.step()
                opt.zero_grad()
            if r:
                rates[name].append(steps * batch / (time.perf_counter() - start))
    return {"rounds": rounds, "steps_per_round": steps, "batch": batch, "threads": threads,
            "anchors_per_s": {k: summarize(v, 1) for k, v in rates.items()},
            "cost_vs_plain": {k: ratio_stat(rates["plain"], v) for k, v in rates.items()}}


def ddp_step_worker(steps: int, batch: int) -> None:
    """Run under torchrun: DDP (gloo) forward + backward + AdamW of the plain shape on random
    tensors, 1 thread per process; rank 0 prints one result line. Also times one all-reduce of
    a gradient-sized tensor alone."""
    import json
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from compclip.models import load_model
    from compclip.trainer.loss import ContrastiveLoss, Layout
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    loaded = load_model(ARCH)
    model = loaded.model
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    b = _random_batch(batch, 1, 1, size, model.context_length, loaded.tokenizer, coco_captions())
    numel = sum(p.numel() for p in model.parameters())
    ddp = DistributedDataParallel(model) if dist.get_world_size() > 1 else model
    loss_fn, opt = ContrastiveLoss(), trainer_optimizer(model)
    for i in range(steps + 3):
        if i == 3:
            dist.barrier()
            start = time.perf_counter()
        img, txt, scale = ddp(b.images, b.texts)
        loss_fn(img, txt, scale, Layout.from_batch(b)).backward()
        opt.step()
        opt.zero_grad()
    dist.barrier()
    step_s = (time.perf_counter() - start) / steps
    grad = torch.randn(numel)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(5):
        dist.all_reduce(grad)
    allreduce_s = (time.perf_counter() - start) / 5
    if dist.get_rank() == 0:
        print("DDP_STEP " + json.dumps({"world": dist.get_world_size(), "step_s": step_s,
                                        "anchors_per_s": batch * dist.get_world_size() / step_s,
                                        "allreduce_s": allreduce_s if dist.get_world_size() > 1 else 0.0,
                                        "parameters": numel}), flush=True)
    dist.destroy_process_group()


def ddp_step_only(rounds: int, steps: int, batch: int, env: dict) -> dict:
    """Step-only anchors/s of 1 and 2 gloo processes (torchrun), alternating, `rounds` times:
    the bound the 2-process trainer could reach without data loading."""
    import json
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for r in range(rounds):
        for world in ((1, 2) if r % 2 == 0 else (2, 1)):
            cmd = [torchrun, "--standalone", "--nproc_per_node", str(world), "bench/bench_trainer.py",
                   "--ddp-step-worker", "--batch", str(batch), "--steps", str(steps)]
            proc = subprocess.run(cmd, cwd=ROOT, env=dict(env, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"),
                                  capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("DDP_STEP ")), None)
            if proc.returncode != 0 or line is None:
                raise SystemExit(f"DDP step-only ({world} processes) failed:\n{proc.stderr[-3000:]}")
            runs[world].append(json.loads(line.removeprefix("DDP_STEP ")))
            log(f"trainer: step-only DDP {world} process(es): {runs[world][-1]['anchors_per_s']:.1f} anchors/s")
    one = [x["anchors_per_s"] for x in runs[1]]
    two = [x["anchors_per_s"] for x in runs[2]]
    return {"rounds": rounds, "steps": steps, "batch_per_process": batch,
            "anchors_per_s": {"1proc": summarize(one, 1), "2proc": summarize(two, 1)},
            "2proc_over_1proc": ratio_stat(two, one),
            "step_s": {"1proc": summarize([x["step_s"] for x in runs[1]]),
                       "2proc": summarize([x["step_s"] for x in runs[2]])},
            "gradient_allreduce_s": summarize([x["allreduce_s"] for x in runs[2]]),
            "parameters": runs[1][0]["parameters"]}


def compose_cost(sets: dict, batch: int, reps: int) -> dict:
    """CPU ms per anchor of the data path alone (shard read, decode, augment, partner, negatives,
    tokenise, collate) for each shape, in this process: what a data-loader worker spends."""
    import torch
    from compclip.models import load_model
    from compclip.trainer.compose import Composer
    from compclip.trainer.data import ShardStream, resolve_sources
    torch.set_num_threads(1)
    loaded = load_model(ARCH)
    shapes = [name for name in SHAPES if name != "leftright"]  # a mix of two sources: whole runs only
    out: dict[str, list[float]] = {name: [] for name in shapes}
    for _ in range(reps):
        for name in shapes:
            partner, negs = SHAPES[name][:2]
            composer = Composer(loaded.preprocess_train, loaded.tokenizer, batch, partner, None, negs)
            stream = ShardStream(resolve_sources([str(sets[partner])]), None, composer, 0, 0, 1, 1000, 1,
                                 256, 0.01)
            batches = iter(stream)
            next(batches)  # fills the shuffle buffer
            start = time.process_time()
            for _ in range(4):
                next(batches)
            out[name].append((time.process_time() - start) * 1000 / (4 * batch))
    return {"cpu_ms_per_anchor": {k: summarize(v) for k, v in out.items()}, "reps": reps, "batch": batch}


# --- whole runs -------------------------------------------------------------------------------

def launch_cmd(procs: int, gpu: bool = False) -> list[str]:
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    if gpu:  # accelerate's CLI through this interpreter: no console script needed on PATH
        return [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--config_file",
                "launch/gpu_1.yaml", "trainer/train.py"]
    if procs == 1:
        return [sys.executable, "trainer/train.py"]
    return [accelerate, "launch", "--multi_gpu", "--num_processes", str(procs), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
            "trainer/train.py"]


def free_port() -> int:
    """A free TCP port, so a run does not collide with another job on the default 29500."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def shape_data(shape: str, sets: dict, batch: int) -> tuple[str, str]:
    """The recipe's train_shards list and source_batch line of a shape: left-right mixes the plain
    set with the mirrored one, P stitched anchors per batch as the recipe's 32 of 480."""
    partner = SHAPES[shape][0]
    if shape != "leftright":
        return json.dumps([str(sets[partner])]), ""
    stitched = max(1, round(batch * LEFTRIGHT_SOURCES[1] / sum(LEFTRIGHT_SOURCES)))
    return json.dumps([str(sets["none"]), str(sets["mirrored"])]), f", source_batch: [{batch - stitched}, {stitched}]"


def run_case(name: str, rep: int, tmp: Path, sets: dict, args, env: dict, old_root: Optional[Path] = None) -> dict:
    """One whole CPU run (CUDA hidden, so a GPU machine measures the same thing); code "old" runs
    the `trainer/train.py` of `old_root` with its own code first on sys.path."""
    shape, procs, threads, code = CASES[name]
    partner, negs = SHAPES[shape][:2]
    shards, source_batch = shape_data(shape, sets, args.batch)
    out = tmp / f"{name}-{rep}"
    recipe = tmp / f"{name}-{rep}.yaml"
    recipe.write_text(RECIPE.format(precision="fp32", arch=ARCH, shards=shards, source_batch=source_batch,
                                    samples=args.steps * args.batch * procs, batch=args.batch,
                                    workers=args.workers, partner=partner, negs=negs, out=out,
                                    log_every=args.log_every))
    run_env = dict(env, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), CUDA_VISIBLE_DEVICES="")
    cwd = ROOT
    if code == "old":
        cwd = old_root
        run_env["PYTHONPATH"] = str(old_root)
    start = time.perf_counter()
    proc = subprocess.run(launch_cmd(procs) + [str(recipe)], cwd=cwd, env=run_env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    points = [(s, t) for s, t, _ in tb_scalars(out / "bench" / "tensorboard", "train/samples_per_s")]
    return {**steady_rate(points, args.batch * procs, args.warmup), "wall_s": wall}


def gpu_case(tmp: Path, name: str, shards: Path, partner: str, negs: int, args, env: dict,
             overrides: Sequence[str] = (), dry_run: bool = False) -> dict:
    """One whole GPU run of `trainer/train.py` through `launch/gpu_1.yaml` (bf16) on `shards`:
    steady-state samples/s after `args.gpu_warmup` steps, peak GPU memory (`train/memory_mb`:
    torch.cuda.max_memory_allocated), the run's wall time. `overrides`: recipe `key=value`s.
    `dry_run`: plain python on this machine's device (checks the plumbing on a CPU)."""
    batch, steps = args.gpu_batch, args.gpu_steps
    recipe = tmp / f"{name}.yaml"
    out = tmp / f"out-{name}"
    recipe.write_text(RECIPE.format(precision="bf16", arch=args.gpu_arch, shards=json.dumps([str(shards)]),
                                    source_batch="", samples=steps * batch, batch=batch, workers=args.gpu_workers,
                                    partner=partner, negs=negs, out=out, log_every=args.gpu_log_every))
    cmd = (launch_cmd(1, gpu=True) if not dry_run else [sys.executable, "trainer/train.py"]) + [str(recipe)]
    start = time.perf_counter()
    proc = subprocess.run(cmd + list(overrides), cwd=ROOT, env=dict(env, OMP_NUM_THREADS=str(args.gpu_threads)),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"GPU run {name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    logdir = out / "bench" / "tensorboard"
    points = [(s, t) for s, t, _ in tb_scalars(logdir, "train/samples_per_s")]
    memory = [v for _, _, v in tb_scalars(logdir, "train/memory_mb")]
    return {**steady_rate(points, batch, args.gpu_warmup), "wall_s": time.perf_counter() - start,
            "peak_memory_mib": round(max(memory), 1), "command": " ".join(cmd[:-1] + ["<recipe>"] + list(overrides))}


def gpu_run(args, env: dict) -> dict:
    """ViT-B-32, NegCLIP-style batch (2B x 4B) on one GPU, bf16; steady-state samples/s,
    `--gpu-reps` runs."""
    batch, steps, warmup = args.gpu_batch, args.gpu_steps, args.gpu_warmup
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        tmp = Path(tmp)
        shards = write_caption_shards(tmp / "neighbour", coco_captions(), n=2048, per_shard=256, negatives=2,
                                      neighbours=3)
        for rep in range(args.gpu_reps):
            runs.append(gpu_case(tmp, f"gpu-{rep}", shards, "neighbour", 2, args, env, dry_run=args.gpu_dry_run))
            log(f"trainer: GPU rep {rep + 1}/{args.gpu_reps}: {runs[-1]['samples_per_s']:.0f} samples/s")
    rate = summarize([r["samples_per_s"] for r in runs], 1)
    return {"ran": True, "device": gpu_name(), "arch": args.gpu_arch, "precision": "bf16", "batch": batch,
            "shape": "2B images x 4B texts (neighbour partner + 2 negatives per anchor)", "steps": steps,
            "warmup_steps": warmup, "workers": args.gpu_workers, "samples_per_s": rate, "runs": runs,
            "goal_samples_per_s": GPU_GOAL, "goal_met": rate["median"] >= GPU_GOAL}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--batch", type=int, default=32, help="anchors per process per step")
    p.add_argument("--warmup", type=int, default=8, help="completed steps before the timing window")
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--workers", type=int, default=1, help="DataLoader workers per process")
    p.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    p.add_argument("--reps", type=int, default=3, help="runs per case, cases interleaved")
    p.add_argument("--step-rounds", type=int, default=5, help="rounds of the in-process step-only measurement")
    p.add_argument("--gpu", action="store_true", help="run only the ViT-B-32 GPU case (without this flag it "
                   "runs after the CPU cases whenever CUDA is present)")
    p.add_argument("--no-gpu", action="store_true", help="never run the GPU case")
    p.add_argument("--gpu-arch", default="ViT-B-32")
    p.add_argument("--gpu-batch", type=int, default=256, help="anchors per step (2B images x 4B texts)")
    p.add_argument("--gpu-steps", type=int, default=120)
    p.add_argument("--gpu-warmup", type=int, default=30)
    p.add_argument("--gpu-log-every", type=int, default=10)
    p.add_argument("--gpu-workers", type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)),
                   help="data-loader workers (default: cores - 2, at most 12)")
    p.add_argument("--gpu-threads", type=int, default=4, help="OMP threads of the GPU run's main process")
    p.add_argument("--gpu-reps", type=int, default=3)
    p.add_argument("--gpu-dry-run", action="store_true", help=argparse.SUPPRESS)  # tests the GPU path on CPU
    p.add_argument("--old-commit", default=OLD_COMMIT, help="the earlier code the *_old cases run")
    p.add_argument("--quick", action="store_true", help="12 steps, 1 rep, 4 cases, 2 step-only rounds")
    p.add_argument("--ddp-rounds", type=int, default=3, help="rounds of the 1 vs 2 process step-only measurement")
    p.add_argument("--ddp-step-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.ddp_step_worker:
        return ddp_step_worker(args.steps, args.batch)
    if args.quick:
        args.steps, args.warmup, args.log_every, args.reps, args.step_rounds, args.ddp_rounds = 12, 4, 2, 1, 2, 1
        args.cases = [c for c in args.cases if c in QUICK_CASES]
        args.gpu_steps, args.gpu_warmup = 40, 10
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions")))
    env.pop("WORLD_SIZE", None)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    import torch
    torch.set_num_threads(1)
    if args.gpu:  # the GPU case alone, merged into an existing result file
        if not (torch.cuda.is_available() or args.gpu_dry_run):
            raise SystemExit("--gpu: no CUDA device visible")
        log(f"trainer: GPU run ({args.gpu_arch}, NegCLIP-style batch)")
        path = Path(args.out) if args.out else RESULTS_DIR / "trainer.json"
        result = json.loads(path.read_text()) if path.is_file() else {}
        result["gpu"] = gpu_run(args, env)
        write_result("trainer", result, path)
        return
    log("trainer: counting FLOPs")
    flops = encoder_flops()
    log(f"trainer: step-only, {args.step_rounds} rounds")
    step = step_only(args.step_rounds, 4 if not args.quick else 2, args.batch, 1) if args.step_rounds else {}

    ddp = {}
    if args.ddp_rounds and "plain_2proc" in args.cases:
        log(f"trainer: step-only 1 vs 2 processes, {args.ddp_rounds} rounds")
        ddp = ddp_step_only(args.ddp_rounds, 8 if args.quick else 12, args.batch, env)

    runs: dict[str, list[dict]] = {c: [] for c in args.cases}
    pairs = coco_captions()
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        tmp = Path(tmp)
        n = 512  # distinct COCO captions per set; more than a run's anchors at the default steps
        sets = {"none": write_caption_shards(tmp / "none", pairs, n, negatives=2),
                "generated": write_caption_shards(tmp / "generated", pairs, n, negatives=2, partner="generated",
                                                  offset=n),
                "neighbour": write_caption_shards(tmp / "neighbour", pairs, n, negatives=2, neighbours=3,
                                                  offset=2 * n),
                "mirrored": write_caption_shards(tmp / "mirrored", pairs, n, partner="mirrored", offset=3 * n,
                                                 prefix="m")}
        old_root = None
        if any(CASES[c][3] == "old" for c in args.cases):
            old_root = export_commit(args.old_commit, tmp / "old_code")
            log(f"trainer: code of {args.old_commit} in {old_root}")
        log("trainer: data path CPU per anchor")
        compose = compose_cost(sets, args.batch, 1 if args.quick else 3)
        for rep in range(args.reps):
            order = args.cases if rep % 2 == 0 else list(reversed(args.cases))
            for name in order:
                r = run_case(name, rep, tmp, sets, args, env, old_root)
                runs[name].append(r)
                log(f"trainer rep {rep + 1}/{args.reps} {name:18s} {r['samples_per_s']:7.1f} samples/s "
                    f"(run {r['wall_s']:.1f} s)")

    rates = {c: [r["samples_per_s"] for r in v] for c, v in runs.items()}
    cases = {c: {"shape": CASES[c][0], "processes": CASES[c][1], "threads_per_process": CASES[c][2],
                 "code": "today" if CASES[c][3] == "new" else args.old_commit,
                 "samples_per_s": summarize(rates[c], 1), "runs": runs[c]} for c in args.cases}
    hard = {}
    for code, suffix, plain_case, ratio_key in (("new", "_1proc", "plain_1proc", "flop_ratio"),
                                                ("old", "_old", "plain_old", "old_flop_ratio")):
        if plain_case not in rates:
            continue
        for shape in SHAPES:
            c = shape + suffix
            if shape == "plain" or c not in rates:
                continue
            cost = ratio_stat(rates[plain_case], rates[c])
            fr = flops["shapes"][shape][ratio_key]
            entry = {"label": SHAPES[shape][4], "samples_per_s": cases[c]["samples_per_s"],
                     "cost": cost, "flop_ratio": fr, "cost_over_flop_ratio": round(cost["median"] / fr, 3),
                     "goal": "cost <= 1.1 x FLOP ratio", "goal_met": cost["median"] <= 1.1 * fr}
            if code == "new":
                step_cost = step.get("cost_vs_plain", {}).get(shape)
                entry.update(step_only_cost=step_cost, step_only_cost_over_flop_ratio=(
                    round(step_cost["median"] / fr, 3) if step_cost else None))
                hard[shape] = entry
            else:
                hard.setdefault("old_code", {})[shape] = entry
    speedup = {}
    for shape in SHAPES:
        new, old = rates.get(f"{shape}_1proc"), rates.get(f"{shape}_old")
        if new and old:
            r = ratio_stat(new, old)
            speedup[shape] = {"label": SHAPES[shape][4], "today": summarize(new, 1), "old": summarize(old, 1),
                              "today_over_old": r, "old_over_new_flops": flops["shapes"][shape]["old_over_new_flops"]}
            if shape == "negclip":
                speedup[shape].update(goal=">= 1.4", goal_met=r["median"] >= 1.4)
    scaling = {"step_only_ddp": ddp} if ddp else {}
    if "plain_1proc" in rates and "plain_2proc" in rates:
        scaling["2proc_over_1proc"] = ratio_stat(rates["plain_2proc"], rates["plain_1proc"])
    if "plain_1proc_2thr" in rates and "plain_2proc" in rates:
        scaling["2proc_over_1proc_2threads"] = ratio_stat(rates["plain_2proc"], rates["plain_1proc_2thr"])
    if "plain_1proc" in rates and "plain_1proc_2thr" in rates:
        scaling["2threads_over_1thread"] = ratio_stat(rates["plain_1proc_2thr"], rates["plain_1proc"])

    has_gpu = torch.cuda.is_available()
    if has_gpu and not args.no_gpu:
        log(f"trainer: GPU run ({args.gpu_arch}, NegCLIP-style batch)")
        gpu = gpu_run(args, env)
    else:
        d = p.get_default  # the command below runs with the defaults
        gpu = {"ran": False, "reason": "no GPU on this machine" if not has_gpu else "--no-gpu",
               "command": GPU_COMMAND,
               "what_it_runs": "accelerate launch --config_file launch/gpu_1.yaml trainer/train.py <recipe>: "
                               f"{d('gpu_arch')}, bf16, batch {d('gpu_batch')} anchors as 2B images x 4B texts "
                               "(neighbour partners + 2 negatives each), cores - 2 (at most 12) data workers, "
                               f"{d('gpu_steps')} steps, samples/s after {d('gpu_warmup')} warm-up steps, "
                               f"{d('gpu_reps')} runs",
               "goal_samples_per_s": GPU_GOAL}
    result = {"arch": ARCH, "batch_per_process": args.batch, "steps": args.steps, "warmup_steps": args.warmup,
              "log_every": args.log_every, "workers_per_process": args.workers, "reps": args.reps,
              "method": "steady-state global anchors/s from TensorBoard event wall times after warm-up",
              "old_commit": args.old_commit, "captions": "COCO (SugarCrepe caption/negative_caption fields)",
              "flops": flops, "step_only": step, "compose": compose, "cases": cases, "hard_negatives": hard,
              "today_vs_old": speedup,
              "scaling": scaling, "gpu": gpu}
    write_result("trainer", result, args.out)


if __name__ == "__main__":
    main()
