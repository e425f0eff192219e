"""Speed of the synthetic world: rendered images/s, training samples/s, full default build time.

    .venv/bin/python bench/bench_world.py            # render 2000 images, 1000 samples per set
    .venv/bin/python bench/bench_world.py --quick    # an eighth of that, no full build
    .venv/bin/python bench/bench_world.py --reps 5 --no-build

Measured single-process (the build is single-process). Sections: `render` (place + draw, then
also JPEG encoding, at 64 and 128 px), `train` (samples/s of the shard sets: plain, with
negatives, with generated / mirrored partners), `build` (wall seconds of the default CLI build,
phase by phase, once). Render and train run `--reps` times (median and range). CPU time is
reported beside wall time, because the machine may be shared.
Results go to bench/results/world.json.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import log, summarize, write_result  # noqa: E402
from compclip.datagen.world.cli import build  # noqa: E402
from compclip.datagen.world.render import encode, render_scene  # noqa: E402
from compclip.datagen.world.scene import random_scene  # noqa: E402
from compclip.datagen.world.shards import make_sample  # noqa: E402
from compclip.datagen.world.splits import Split  # noqa: E402


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def rate(n: int, times: list[tuple[float, float]]) -> dict:
    """Repetitions of (wall, cpu) seconds for n items -> median and range of items/s."""
    return {"n": n, "per_s_wall": summarize([n / w for w, _ in times], 1),
            "per_s_cpu": summarize([n / max(c, 1e-9) for _, c in times], 1)}


def bench_render(n: int, reps: int) -> dict:
    out = {}
    rng = random.Random(0)
    scenes = [random_scene(rng, 3 if k % 5 == 0 else 2) for k in range(n)]
    for size in (64, 128):
        out[f"{size}px"] = rate(n, [timed(lambda: [render_scene(s, size, k) for k, s in enumerate(scenes)])
                                    for _ in range(reps)])
        out[f"{size}px_jpeg"] = rate(n, [timed(
            lambda: [encode(render_scene(s, size, k)[0]) for k, s in enumerate(scenes)]) for _ in range(reps)])
    return out


def bench_train(n: int, reps: int) -> dict:
    split = Split.make(0)
    out = {}
    for name, negs, partner in [("plain", False, None), ("negatives", True, None),
                                ("generated", True, "generated"), ("mirrored", False, "mirrored")]:
        out[name] = rate(n, [timed(lambda: [make_sample(i, 0, split, 64, negs, partner) for i in range(n)])
                             for _ in range(reps)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="an eighth of the images, no full build")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-build", action="store_true", help="skip the full default build")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    scale = 8 if args.quick else 1
    log(f"world: render {2000 // scale} scenes x {args.reps} reps")
    result = {"reps": args.reps, "render": bench_render(2000 // scale, args.reps),
              "train": bench_train(1000 // scale, args.reps)}
    log("world: " + json.dumps({k: v["per_s_wall"]["median"] for k, v in result["render"].items()}))
    if not args.quick and not args.no_build:
        with tempfile.TemporaryDirectory() as tmp:
            wall, cpu = timed(lambda: result.__setitem__("build", build(
                Path(tmp) / "w", seed=0, progress=False)))
        result["build"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                           "phases_s": result["build"]["seconds"], "sets": result["build"]["sets"]}
        log("world build: " + json.dumps(result["build"]["phases_s"]))
    write_result("world", result, args.out)


if __name__ == "__main__":
    main()
