"""Speed of the synthetic world: rendered images/s, training samples/s, full default build time.

    .venv/bin/python bench/bench_world.py            # render 2000 images, 1000 samples per set
    .venv/bin/python bench/bench_world.py --quick    # a quarter of that, no full build

Measured single-process (the build is single-process). Sections: `render` (place + draw, then
also JPEG encoding, at 64 and 128 px), `train` (samples/s of the shard sets: plain, with
negatives, with generated / mirrored partners), `build` (wall seconds of the default CLI build,
phase by phase). CPU time is reported beside wall time, because the machine may be shared.
Results go to bench/results/world.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datagen.world.cli import build  # noqa: E402
from datagen.world.render import encode, render_scene  # noqa: E402
from datagen.world.scene import random_scene  # noqa: E402
from datagen.world.shards import make_sample  # noqa: E402
from datagen.world.splits import Split  # noqa: E402


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def rate(n: int, wall: float, cpu: float) -> dict:
    return {"n": n, "wall_s": round(wall, 3), "per_s_wall": round(n / wall, 1),
            "per_s_cpu": round(n / max(cpu, 1e-9), 1)}


def bench_render(n: int) -> dict:
    out = {}
    rng = random.Random(0)
    scenes = [random_scene(rng, 3 if k % 5 == 0 else 2) for k in range(n)]
    for size in (64, 128):
        out[f"{size}px"] = rate(n, *timed(lambda: [render_scene(s, size, k) for k, s in enumerate(scenes)]))
        out[f"{size}px_jpeg"] = rate(n, *timed(
            lambda: [encode(render_scene(s, size, k)[0]) for k, s in enumerate(scenes)]))
    return out


def bench_train(n: int) -> dict:
    split = Split.make(0)
    out = {}
    for name, negs, partner in [("plain", False, None), ("negatives", True, None),
                                ("generated", True, "generated"), ("mirrored", False, "mirrored")]:
        out[name] = rate(n, *timed(lambda: [make_sample(i, 0, split, 64, negs, partner) for i in range(n)]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "world.json"))
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    result = {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "render": bench_render(2000 // scale), "train": bench_train(1000 // scale)}
    print(json.dumps(result["render"], indent=1), json.dumps(result["train"], indent=1))
    if not args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            wall, cpu = timed(lambda: result.__setitem__("build", build(
                Path(tmp) / "w", seed=0, progress=False)))
        result["build"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                           "phases_s": result["build"]["seconds"], "sets": result["build"]["sets"]}
        print(json.dumps(result["build"], indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
