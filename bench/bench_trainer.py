"""Trainer throughput: the cost of hard-negative batches against their FLOPs, and 1 vs 2 processes.

    .venv/bin/python bench/bench_trainer.py [--steps 32] [--reps 3] [--quick]
    .venv/bin/python bench/bench_trainer.py --gpu      # GPU machine: only the ViT-B-32 NegCLIP-batch run

Parts:
- `flops`: forward FLOPs of one image and one text through `tiny-vit-64`
  (`torch.utils.flop_counter.FlopCounterMode`), and from them the encoder-FLOP ratio of each
  batch shape per anchor: plain B x B = 1 image + 1 text; TROHN-Text B x 2B = 1 + 2;
  TROHN-Img 2B x 2B = 2 + 2; NegCLIP-style 2B x 4B = 2 + 4. Forward + backward is ~3x forward
  for images and texts alike, so the forward ratio is the training ratio; the whole train
  step's FLOPs (model + loss, forward + backward) are counted too, as a check.
- `step_only`: forward + backward + the trainer's AdamW (`trainer.optim.build_optimizer`) in
  this process on random tensors of each shape (no data loading), shapes interleaved,
  `--step-rounds` rounds: the compute-only cost.
- `compose`: CPU ms per anchor of the data path alone (read, decode, augment, partner,
  negatives, tokenise, collate) per shape, in-process: what the data-loader worker spends.
- `runs`: whole runs of `trainer/train.py` on fixture shards (`trainer.fixtures`; partners from
  neighbours with `keys.tsv` or generated partner members, negatives from `neg.json`), through
  `accelerate launch` for 2 processes. Cases interleaved, `--reps` times. samples/s = global
  anchors per second in the steady state: from the wall times of the TensorBoard events
  (written right after a step every `--log-every` steps) between the first log at or after
  `--warmup` steps and the last one (bench.common.steady_rate), as bench_vs_open_clip.py does.
  Cost of a shape = plain samples/s / its samples/s (paired by repetition); goal: cost within
  1.1x of its FLOP ratio (cost / FLOP ratio <= 1.1).
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

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS_DIR, gpu_name, log, ratio_stat, steady_rate, summarize, tb_scalars, write_result  # noqa: E402

ARCH = "tiny-vit-64"
# shape -> (partner, negatives per image, images per anchor, texts per anchor, label)
SHAPES = {
    "plain": ("none", 0, 1, 1, "plain CLIP, B x B"),
    "trohn_text": ("none", 1, 1, 2, "TROHN-Text, B x 2B"),
    "trohn_img": ("generated", 0, 2, 2, "TROHN-Img, 2B x 2B"),
    "negclip": ("neighbour", 2, 2, 4, "NegCLIP-style, 2B x 4B"),
}
# case -> (shape, processes, threads per process)
CASES = {
    "plain_1proc": ("plain", 1, 1),
    "trohn_text_1proc": ("trohn_text", 1, 1),
    "trohn_img_1proc": ("trohn_img", 1, 1),
    "negclip_1proc": ("negclip", 1, 1),
    "plain_2proc": ("plain", 2, 1),
    "plain_1proc_2thr": ("plain", 1, 2),
}
QUICK_CASES = ["plain_1proc", "negclip_1proc", "plain_2proc"]
GPU_COMMAND = (".venv/bin/python bench/bench_trainer.py --gpu && .venv/bin/python bench/run_all.py --report-only"
               "   # or the whole .venv/bin/python bench/run_all.py: with CUDA visible it includes this run")
GPU_GOAL = 1300.0

RECIPE = """
name: bench
seed: 0
precision: {precision}
model: {{arch: {arch}}}
data: {{train_shards: ["{shards}"], samples_per_epoch: {samples}, batch_size: {batch}, workers: {workers},
        shuffle_buffer: 256, partner: {partner}}}
negatives: {{per_image: {negs}}}
optim: {{lr: 1.0e-4}}
schedule: {{epochs: 1}}
logging: {{output_dir: "{out}", every_n_steps: {log_every}, progress: false}}
checkpoint: {{keep_last: 1}}
"""


# --- FLOPs and compute-only -------------------------------------------------------------------

def encoder_flops(arch: str = ARCH, batch: int = 32) -> dict:
    """Forward FLOPs of one image and one text, FLOP ratios per anchor of each shape, and the
    counted FLOPs of a whole train step (forward + backward, model + loss) per shape."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from models import load_model
    from trainer.batch import Batch
    from trainer.loss import ContrastiveLoss, Layout
    model = load_model(arch).model
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    ctx = model.context_length

    def count(fn) -> int:
        with FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops()
    with torch.no_grad():
        f_img = count(lambda: model.encode_image(torch.randn(1, 3, size, size)))
        f_txt = count(lambda: model.encode_text(torch.randint(1, 49000, (1, ctx))))
    loss_fn = ContrastiveLoss()
    shapes, step = {}, {}
    for name, (_, _, n_img, n_txt, label) in SHAPES.items():
        per_anchor = n_img * f_img + n_txt * f_txt
        shapes[name] = {"label": label, "images_per_anchor": n_img, "texts_per_anchor": n_txt,
                        "forward_flops_per_anchor": per_anchor}
        b = _random_batch(batch, n_img, n_txt, size, ctx)

        def train_step():
            img, txt, scale = model(b.images, b.texts)
            loss_fn(img, txt, scale, Layout.from_batch(b)).backward()
        step[name] = count(train_step) / batch
        model.zero_grad(set_to_none=True)
    plain = shapes["plain"]["forward_flops_per_anchor"]
    for name, s in shapes.items():
        s["flop_ratio"] = round(s["forward_flops_per_anchor"] / plain, 4)
        s["train_step_flops_per_anchor"] = int(step[name])
        s["train_step_flop_ratio"] = round(step[name] / step["plain"], 4)
        s["train_step_over_forward"] = round(step[name] / s["forward_flops_per_anchor"], 3)
    return {"arch": arch, "image_forward_flops": f_img, "text_forward_flops": f_txt,
            "text_over_image": round(f_txt / f_img, 3), "batch_for_step_count": batch, "shapes": shapes,
            "note": "FlopCounterMode counts matmul/conv FLOPs (2 per multiply-add); the loss's "
                    "logit matrix is in the train-step count, not in the encoder ratio"}


def _random_batch(batch: int, n_img: int, n_txt: int, size: int, ctx: int):
    import torch
    from trainer.batch import Batch
    p = batch if n_img == 2 else 0
    h = batch * (n_txt - 1 - (1 if p else 0))
    return Batch(torch.randn(batch + p, 3, size, size), torch.randint(1, 49000, (batch + p + h, ctx)), batch,
                 torch.arange(p), torch.arange(batch).repeat_interleave(h // batch if batch else 0),
                 torch.ones(batch + p + h, dtype=torch.bool)).check()


def trainer_optimizer(model):
    """The optimizer the trainer builds (trainer/optim.py), so step-only matches whole runs."""
    from trainer.optim import build_optimizer
    from trainer.recipe import OptimConfig
    return build_optimizer(model, OptimConfig(lr=1e-5))


def step_only(rounds: int, steps: int, batch: int, threads: int) -> dict:
    """Forward + backward + AdamW on random tensors in each shape, shapes interleaved per round
    (load drift hits all alike), one process; anchors/s per round and cost per round."""
    import torch
    from models import load_model
    from trainer.loss import ContrastiveLoss, Layout
    torch.set_num_threads(threads)
    model = load_model(ARCH).model
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    loss_fn = ContrastiveLoss()
    opt = trainer_optimizer(model)
    batches = {name: _random_batch(batch, n_img, n_txt, size, model.context_length)
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
    from models import load_model
    from trainer.loss import ContrastiveLoss, Layout
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = load_model(ARCH).model
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    b = _random_batch(batch, 1, 1, size, model.context_length)
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
    from models import load_model
    from trainer.compose import Composer
    from trainer.data import ShardStream, resolve_sources
    torch.set_num_threads(1)
    loaded = load_model(ARCH)
    out: dict[str, list[float]] = {name: [] for name in SHAPES}
    for _ in range(reps):
        for name, (partner, negs, *_rest) in SHAPES.items():
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
    if gpu:
        return [accelerate, "launch", "--config_file", "launch/gpu_1.yaml", "trainer/train.py"]
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


def run_case(name: str, rep: int, tmp: Path, sets: dict, args, env: dict) -> dict:
    """One whole CPU run (CUDA hidden, so a GPU machine measures the same thing)."""
    shape, procs, threads = CASES[name]
    partner, negs = SHAPES[shape][:2]
    out = tmp / f"{name}-{rep}"
    recipe = tmp / f"{name}-{rep}.yaml"
    recipe.write_text(RECIPE.format(precision="fp32", arch=ARCH, shards=sets[partner],
                                    samples=args.steps * args.batch * procs, batch=args.batch,
                                    workers=args.workers, partner=partner, negs=negs, out=out,
                                    log_every=args.log_every))
    run_env = dict(env, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), CUDA_VISIBLE_DEVICES="")
    start = time.perf_counter()
    proc = subprocess.run(launch_cmd(procs) + [str(recipe)], cwd=ROOT, env=run_env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    points = [(s, t) for s, t, _ in tb_scalars(out / "bench" / "tensorboard", "train/samples_per_s")]
    return {**steady_rate(points, args.batch * procs, args.warmup), "wall_s": wall}


def gpu_run(args, env: dict) -> dict:
    """ViT-B-32, NegCLIP-style batch (2B x 4B) on one GPU, bf16; steady-state samples/s,
    `--gpu-reps` runs."""
    from trainer.fixtures import write_fixture_shards
    batch, steps, warmup = args.gpu_batch, args.gpu_steps, args.gpu_warmup
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        tmp = Path(tmp)
        shards = write_fixture_shards(tmp / "neighbour", n=2048, per_shard=256, neighbours=3)
        cmd = launch_cmd(1, gpu=True) if not args.gpu_dry_run else [sys.executable, "trainer/train.py"]
        for rep in range(args.gpu_reps):
            recipe = tmp / f"gpu-{rep}.yaml"
            recipe.write_text(RECIPE.format(precision="bf16", arch=args.gpu_arch, shards=shards,
                                            samples=steps * batch, batch=batch, workers=args.gpu_workers,
                                            partner="neighbour", negs=2, out=tmp / f"out-{rep}",
                                            log_every=args.gpu_log_every))
            start = time.perf_counter()
            proc = subprocess.run(cmd + [str(recipe)], cwd=ROOT, env=dict(env, OMP_NUM_THREADS=str(args.gpu_threads)),
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"GPU run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
            points = [(s, t) for s, t, _ in tb_scalars(tmp / f"out-{rep}" / "bench" / "tensorboard",
                                                        "train/samples_per_s")]
            runs.append({**steady_rate(points, batch, warmup), "wall_s": time.perf_counter() - start})
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
    p.add_argument("--quick", action="store_true", help="12 steps, 1 rep, 3 cases, 2 step-only rounds")
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

    from trainer.fixtures import write_fixture_shards
    runs: dict[str, list[dict]] = {c: [] for c in args.cases}
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        tmp = Path(tmp)
        sets = {"none": write_fixture_shards(tmp / "none", n=256, per_shard=64),
                "generated": write_fixture_shards(tmp / "generated", n=256, per_shard=64, partner="generated"),
                "neighbour": write_fixture_shards(tmp / "neighbour", n=256, per_shard=64, neighbours=3)}
        log("trainer: data path CPU per anchor")
        compose = compose_cost(sets, args.batch, 1 if args.quick else 3)
        for rep in range(args.reps):
            order = args.cases if rep % 2 == 0 else list(reversed(args.cases))
            for name in order:
                r = run_case(name, rep, tmp, sets, args, env)
                runs[name].append(r)
                log(f"trainer rep {rep + 1}/{args.reps} {name:18s} {r['samples_per_s']:7.1f} samples/s "
                    f"(run {r['wall_s']:.1f} s)")

    rates = {c: [r["samples_per_s"] for r in v] for c, v in runs.items()}
    cases = {c: {"shape": CASES[c][0], "processes": CASES[c][1], "threads_per_process": CASES[c][2],
                 "samples_per_s": summarize(rates[c], 1), "runs": runs[c]} for c in args.cases}
    hard = {}
    if "plain_1proc" in rates:
        for c in args.cases:
            shape, procs, threads = CASES[c]
            if shape == "plain" or procs != 1 or threads != 1:
                continue
            cost = ratio_stat(rates["plain_1proc"], rates[c])
            fr = flops["shapes"][shape]["flop_ratio"]
            step_cost = step.get("cost_vs_plain", {}).get(shape)
            hard[shape] = {"label": SHAPES[shape][4], "samples_per_s": cases[c]["samples_per_s"],
                           "cost": cost, "flop_ratio": fr, "cost_over_flop_ratio": round(cost["median"] / fr, 3),
                           "step_only_cost": step_cost,
                           "step_only_cost_over_flop_ratio": round(step_cost["median"] / fr, 3) if step_cost else None,
                           "goal": "cost <= 1.1 x FLOP ratio", "goal_met": cost["median"] <= 1.1 * fr}
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
              "flops": flops, "step_only": step, "compose": compose, "cases": cases, "hard_negatives": hard,
              "scaling": scaling, "gpu": gpu}
    write_result("trainer", result, args.out)


if __name__ == "__main__":
    main()
