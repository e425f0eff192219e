"""`datagen shuffle`: samples/s of the command, paired against the version of 93ec125, and its cost
relative to writing the set.

    .venv/bin/python bench/bench_shuffle.py             # 25,000 samples per payload kind, 3 repetitions
    .venv/bin/python bench/bench_shuffle.py --quick     # 5,000 samples, 2 repetitions

For each payload kind (`thumb`: one of eight 64x64 JPEGs, ~3.7 kB; `jpeg`: one of eight 640x480
JPEGs, ~87 kB) a set is written with `ShardSetWriter` (members `jpg`, `txt`, `json` with source,
image_id and coco_id, `neg.json` with two negatives; 5,000 samples per shard), timed (`write`).
Then `python -m datagen shuffle --src SET --out OUT --quiet` (the whole command: both passes and
the final check, interpreter start included) runs as a subprocess from this checkout and from
93ec125 (exported with `git archive`), alternately in each repetition, on the same set: wall and
CPU seconds (user + system of the child), samples/s by CPU time, the per-repetition ratio
old / new (paired), and whether both wrote the same shards (the manifests' sha256s). `cost_vs_write`
is the command's CPU seconds over those of writing the set. Writes bench/results/shuffle.json.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import export_commit, log, ratio_stat, summarize, timed, write_result  # noqa: E402

OLD = "93ec125"
KINDS = {"thumb": (64, 64), "jpeg": (640, 480)}


def images(size: tuple[int, int], k: int = 8) -> list[bytes]:
    """k JPEGs of a smooth pattern plus noise (natural-image-like sizes at quality 85)."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    out = []
    for i in range(k):
        base = (np.sin(x / (20 + i)) * 60 + np.cos(y / (15 + i)) * 60 + 128)[..., None]
        pixels = np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=85)
        out.append(buffer.getvalue())
    return out


def write_set(directory: Path, n: int, size: tuple[int, int]) -> None:
    from compclip.shardset.schema import Negative, ShardSample
    from compclip.shardset.shards import ShardSetWriter
    jpegs = images(size)
    with ShardSetWriter(directory, max_count=5_000) as writer:
        for i in range(n):
            writer.add(ShardSample(
                f"coco{i:08d}", f"a man riding a horse number {i} on the beach", jpegs[i % len(jpegs)],
                meta={"source": "coco", "image_id": i // 5, "coco_id": i // 5},
                negatives=[Negative(f"a horse riding a man {i}", "swap", "obj", "rules"),
                           Negative(f"a woman riding a horse {i}", "replace", "obj", "rules")]))


def shuffle_command(code: Path, src: Path, out: Path) -> tuple[float, float, list[str]]:
    """(wall s, CPU s, output shard sha256s) of `python -m datagen shuffle` run from `code`."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(code)}
    command = [sys.executable, "-m", "datagen", "shuffle", "--src", str(src), "--out", str(out), "--quiet"]
    done, wall, cpu = timed(lambda: subprocess.run(command, cwd=code, env=env, capture_output=True, text=True))
    if done.returncode != 0:
        raise SystemExit(f"shuffle from {code} failed:\n{done.stderr[-2000:]}")
    hashes = [s["sha256"] for s in json.loads((out / "manifest.json").read_text())["shards"]]
    shutil.rmtree(out)
    return wall, cpu, hashes


def bench_kind(kind: str, n: int, reps: int, old_code: Path, work: Path) -> dict:
    src = work / f"set-{kind}"
    _, write_wall, write_cpu = timed(lambda: write_set(src, n, KINDS[kind]))
    set_bytes = sum(p.stat().st_size for p in src.glob("*.tar"))
    log(f"{kind}: wrote {n:,} samples ({set_bytes / 1e6:.0f} MB) in {write_wall:.1f} s")
    runs: dict[str, dict[str, list[float]]] = {v: {"wall_s": [], "cpu_s": []} for v in ("old", "new")}
    identical = True
    for rep in range(reps):
        hashes = {}
        for version, code in (("old", old_code), ("new", ROOT)):
            wall, cpu, hashes[version] = shuffle_command(code, src, work / f"out-{version}")
            runs[version]["wall_s"].append(wall)
            runs[version]["cpu_s"].append(cpu)
        identical &= hashes["old"] == hashes["new"]
        log(f"{kind} rep {rep + 1}/{reps}: old {runs['old']['cpu_s'][-1]:.1f} s CPU, "
            f"new {runs['new']['cpu_s'][-1]:.1f} s CPU")
    shutil.rmtree(src)
    result = {"samples": n, "set_bytes": set_bytes, "write": {"wall_s": round(write_wall, 3),
                                                             "cpu_s": round(write_cpu, 3)}}
    for version, times in runs.items():
        result[version] = {"wall_s": summarize(times["wall_s"]), "cpu_s": summarize(times["cpu_s"]),
                           "samples_per_s_cpu": summarize([n / t for t in times["cpu_s"]], 0),
                           "cost_vs_write": summarize([t / write_cpu for t in times["cpu_s"]], 2)}
    result["speedup_cpu"] = ratio_stat(runs["old"]["cpu_s"], runs["new"]["cpu_s"], 2)
    result["speedup_wall"] = ratio_stat(runs["old"]["wall_s"], runs["new"]["wall_s"], 2)
    result["identical_output"] = identical
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=None, help="samples per set (default 25,000; --quick 5,000)")
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 3; --quick 2)")
    p.add_argument("--kinds", default=",".join(KINDS), help="payload kinds to run")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    n = args.samples or (5_000 if args.quick else 25_000)
    reps = args.reps or (2 if args.quick else 3)
    with tempfile.TemporaryDirectory(prefix="bench_shuffle_") as tmp:
        work = Path(tmp)
        old_code = export_commit(OLD, work / "old")
        kinds = {kind: bench_kind(kind, n, reps, old_code, work) for kind in args.kinds.split(",")}
    new = kinds.get("thumb", next(iter(kinds.values())))
    write_result("shuffle", {
        "old_commit": OLD, "kinds": kinds,
        "goals": {"speedup_cpu_at_least": 3.0, "samples_per_s_cpu_at_least": 6000,
                  "met": new["speedup_cpu"]["median"] >= 3.0
                  and new["new"]["samples_per_s_cpu"]["median"] >= 6000 and new["identical_output"]},
    }, args.out)


if __name__ == "__main__":
    main()
