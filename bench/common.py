"""Helpers every bench script shares: machine and version info, repetition statistics, results
JSON, markdown tables, steady-state rates from TensorBoard files, progress on stderr.

Pure Python at import (no torch, numpy or tensorboard), so `bench/run_all.py` and the tests
load it fast. Each bench script writes `bench/results/<name>.json` through `write_result`, whose
`meta` block says when, where and with which command the numbers were taken.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"

# distribution name -> label in the report
PACKAGES = {"torch": "torch", "open_clip_torch": "open_clip", "accelerate": "accelerate",
            "deepspeed": "deepspeed", "faiss-cpu": "faiss", "spacy": "spacy", "numpy": "numpy",
            "webdataset": "webdataset", "diffusers": "diffusers", "pillow": "pillow"}


# --- where and with what ----------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


SIMD_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")  # what picks PyTorch's CPU kernels


def cpu_id(cpuinfo: Optional[str] = None) -> str:
    """The CPU's family / model and SIMD extensions from /proc/cpuinfo ("family 25 model 1, avx2"):
    the model name alone ("AMD EPYC") does not tell two machines apart, and two machines of one
    name trained the demo's seeds to different numbers (docs/demo.md, "Same seed, same table")."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "unknown"
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    simd = [f for f in SIMD_FLAGS if f in flags] or ["no avx2"]
    return f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}, {' '.join(simd)}"


def ram_gib() -> Optional[float]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def gpu_name() -> Optional[str]:
    """The first CUDA device's name, without importing torch (nvidia-smi), or None."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [x.strip() for x in out.stdout.splitlines() if x.strip()]
    return names[0] if out.returncode == 0 and names else None


def machine_info() -> dict:
    return {"cpu": cpu_model(), "cpu_id": cpu_id(), "cores": os.cpu_count(), "ram_gib": ram_gib(), "gpu": gpu_name(),
            "platform": platform.platform(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def versions(packages: dict[str, str] = PACKAGES) -> dict[str, Optional[str]]:
    """Installed versions (from package metadata, nothing imported); None when not installed."""
    out: dict[str, Optional[str]] = {"python": platform.python_version()}
    for dist, label in packages.items():
        try:
            out[label] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[label] = None
    return out


def git_commit(root: Path = ROOT) -> str:
    """`<sha>` or `<sha> (+ uncommitted changes)`; COMPCLIP_GIT_COMMIT when set (a tree copied to a
    GPU machine, whose git metadata may be stale); 'unknown' outside a git checkout. The bench's own outputs
    (bench/results/, bench/RESULTS*.md) do not count as changes."""
    given = os.environ.get("COMPCLIP_GIT_COMMIT", "").strip() or "unknown"
    if given != "unknown":  # a copied tree's own git metadata can be stale
        return given
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", ":!bench/results",
                                ":!bench/RESULTS*.md"], cwd=root, capture_output=True,
                               text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return given
    if not sha:
        return given
    return sha + (" (+ uncommitted changes)" if dirty else "")


def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """The command as typed, relative to the repository root where possible."""
    argv = list(sys.argv if argv is None else argv)
    exe = Path(sys.executable)
    try:
        exe_s = str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else str(exe)
    except ValueError:
        exe_s = str(exe)
    if argv and Path(argv[0]).is_absolute() and Path(argv[0]).is_relative_to(ROOT):
        argv[0] = str(Path(argv[0]).relative_to(ROOT))
    return " ".join(shlex.quote(a) for a in [exe_s] + argv)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# --- repetitions ------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values: Iterable[float], digits: int = 3) -> dict:
    """Median and spread of repetitions: {median, min, max, q1, q3, n, runs}."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("summarize needs at least one value")

    def r(x: float) -> float:
        return round(x, digits)
    return {"median": r(statistics.median(xs)), "min": r(min(xs)), "max": r(max(xs)),
            "q1": r(percentile(xs, 25)), "q3": r(percentile(xs, 75)), "n": len(xs),
            "runs": [r(x) for x in xs]}


def fmt_num(x: Optional[float]) -> str:
    """Three significant figures, thousands without exponent; '-' for None."""
    if x is None:
        return "-"
    x = float(x)
    if x != x:  # NaN
        return "nan"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    if ax == 0:
        return "0"
    return f"{x:.3g}"


def fmt_stat(stat: Optional[dict], unit: str = "") -> str:
    """'median (min–max, n=K)' of a `summarize` dict, `unit` after each number ('x' for ratios)."""
    if not stat:
        return "-"
    if stat["n"] == 1:
        return f"{fmt_num(stat['median'])}{unit} (n=1)"
    return (f"{fmt_num(stat['median'])}{unit} ({fmt_num(stat['min'])}{unit}–{fmt_num(stat['max'])}{unit}, "
            f"n={stat['n']})")


def ratio_stat(num: Sequence[float], den: Sequence[float], digits: int = 3) -> dict:
    """Summary of per-repetition ratios num[i] / den[i] (paired by repetition, as interleaved)."""
    if len(num) != len(den):
        raise ValueError(f"ratio_stat: {len(num)} numerators vs {len(den)} denominators")
    return summarize([a / b for a, b in zip(num, den)], digits)


def repeat(fn: Callable[[], float], reps: int) -> list[float]:
    return [fn() for _ in range(reps)]


def timed(fn: Callable) -> tuple:
    """(result, wall seconds, CPU seconds of this process and its finished children)."""
    def cpu() -> float:
        t = os.times()  # children: 10 ms ticks; this process: the finer process_time
        return time.process_time() + t.children_user + t.children_system
    w0, c0 = time.perf_counter(), cpu()
    result = fn()
    return result, time.perf_counter() - w0, cpu() - c0


# --- output -----------------------------------------------------------------------------------

def log(msg: str) -> None:
    """Progress line on stderr, time-stamped."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def meta(argv: Optional[Sequence[str]] = None, **extra) -> dict:
    return {"date": now(), "command": command_line(argv), "machine": machine_info(),
            "versions": versions(), "git_commit": git_commit(), **extra}


def write_result(name: str, data: dict, out: Optional[str | Path] = None) -> Path:
    """Write `data` plus a `meta` block to bench/results/<name>.json (or `out`); returns the path."""
    path = Path(out) if out else RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta(), **{k: v for k, v in data.items() if k != "meta"}}
    path.write_text(json.dumps(payload, indent=1) + "\n")
    log(f"wrote {path}")
    return path


def read_result(name: str, results_dir: Path = RESULTS_DIR) -> Optional[dict]:
    path = results_dir / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]],
                   align: Optional[Sequence[str]] = None) -> str:
    """A GitHub markdown table; `align` per column 'l' or 'r' (default: first left, rest right).
    Pipes in cells are escaped, None shows as '-'."""
    headers = [str(h) for h in headers]
    align = list(align) if align else ["l"] + ["r"] * (len(headers) - 1)
    if len(align) != len(headers):
        raise ValueError("align needs one entry per column")

    def cell(x: object) -> str:
        return "-" if x is None else str(x).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---:" if a == "r" else ":---" for a in align) + "|"]
    for row in rows:
        row = list(row)
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns: {row}")
        lines.append("| " + " | ".join(cell(x) for x in row) + " |")
    return "\n".join(lines)


# --- trainers' TensorBoard logs ---------------------------------------------------------------

def tb_scalars(logdir: str | Path, tag: str) -> list[tuple[int, float, float]]:
    """(step, wall_time, value) of one scalar tag in a TensorBoard folder, in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return sorted((e.step, e.wall_time, e.value) for e in acc.Scalars(tag))


def steady_rate(points: Sequence[tuple[int, float]], samples_per_step: int, warmup_steps: int) -> dict:
    """Steady-state samples/s from (completed steps, wall time) log points: the samples between the
    first point at or after `warmup_steps` and the last point, over the wall time between them."""
    pts = sorted(points)
    after = [p for p in pts if p[0] >= warmup_steps]
    if len(after) < 2:
        raise ValueError(f"need two log points at or after step {warmup_steps}, have {pts}")
    (s0, t0), (s1, t1) = after[0], after[-1]
    if t1 <= t0:
        raise ValueError("log wall times do not increase")
    return {"samples_per_s": (s1 - s0) * samples_per_step / (t1 - t0), "from_step": s0, "to_step": s1,
            "seconds": t1 - t0}


# --- COCO-length captions ---------------------------------------------------------------------

COCO_CAPTIONS_DIR = Path(os.environ.get("COMPCLIP_COCO_CAPTIONS", "/work/shared/benchmarks/sugarcrepe"))


def input_error(message: str) -> None:
    """A one-line error on stderr and exit status 2 (bad input: a missing or malformed file)."""
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(2)


def coco_captions(directory: str | Path = COCO_CAPTIONS_DIR) -> list[tuple[str, str]]:
    """(caption, hard negative) pairs of real COCO captions: the `caption` and `negative_caption`
    fields of SugarCrepe's json files (COCO val2017 captions), read at bench time, never copied into
    the repository; distinct captions, in file and key order. A missing folder or a file without
    those fields stops with exit 2 and its name."""
    directory = Path(directory)
    files = sorted(directory.glob("*.json"))
    if not files:
        input_error(f"{directory}: no SugarCrepe *.json files (COCO captions for the bench; "
                    "set COMPCLIP_COCO_CAPTIONS to their folder)")
    seen: set[str] = set()
    pairs = []
    for path in files:
        try:
            rows = json.loads(path.read_text())
            items = rows.values() if isinstance(rows, dict) else rows
            for row in items:
                caption = row["caption"].strip()
                if caption and caption not in seen:
                    seen.add(caption)
                    pairs.append((caption, row["negative_caption"].strip()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            input_error(f"{path}: not a SugarCrepe file with caption/negative_caption ({e!r})")
    return pairs


def token_lengths(captions: Sequence[str], tokenizer) -> list[int]:
    """Tokens per caption with start and end tokens (the position of the end token + 1), as CLIP's
    text tower sees them; `tokenizer` is open_clip's (list[str] -> [N, context] LongTensor)."""
    tokens = tokenizer(list(captions))
    return [int(n) for n in (tokens != 0).sum(dim=1).tolist()]


def write_caption_shards(directory: str | Path, pairs: Sequence[tuple[str, str]], n: int, per_shard: int = 64,
                         negatives: int = 0, partner: Optional[str] = None, neighbours: int = 0,
                         image: Optional[Callable[[int], bytes]] = None, prefix: str = "c",
                         offset: int = 0) -> Path:
    """A shard set of `n` samples whose captions are `pairs[offset + i]` (cycled): real caption
    lengths for the trainer benches. Images: `image(i)` or the trainer's 32 px fixture scenes.
    `negatives` per sample (0-2): the pair's own hard negative, then the next pair's (a real
    COCO-length text); `partner` 'generated' / 'mirrored' (image + the next caption); `neighbours`
    K with a keys.tsv index. Written through compclip.shardset.shards.ShardSetWriter (manifest features set)."""
    from compclip.shardset.schema import Negative, Neighbour, Partner, ShardSample
    from compclip.shardset.shards import KeyIndex, ShardSetWriter
    from tests.fixtures.trainer_data import COLOURS, scene_jpeg
    if not pairs:
        raise ValueError("write_caption_shards: no captions")
    names = list(COLOURS)
    picture = image or (lambda i: scene_jpeg(names[i % 4], names[(i % 4 + 1 + (i // 4) % 3) % 4]))
    features = {"negatives": bool(negatives), "partner": partner, "neighbours": neighbours}
    directory = Path(directory)
    with ShardSetWriter(directory, max_count=per_shard, features=features) as writer:
        for i in range(n):
            caption, negative = pairs[(offset + i) % len(pairs)]
            nxt_caption, nxt_negative = pairs[(offset + i + 1) % len(pairs)]
            negs = [Negative(negative, "replace", "att", "sugarcrepe"),
                    Negative(nxt_negative, "replace", "obj", "sugarcrepe")][:negatives]
            sample = ShardSample(key=f"{prefix}{i:06d}", caption=caption, image=picture(i),
                                 meta={"source": "bench", "index": i, "image_id": i}, negatives=negs)
            if partner == "generated":
                sample.partner = Partner(picture(i + 1), negative, "generated", negative_index=0)
            elif partner == "mirrored":
                sample.partner = Partner(picture(i + 1), nxt_caption, "mirrored")
            if neighbours:
                sample.neighbours = [Neighbour(f"{prefix}{(i + d) % n:06d}", 1.0 / d) for d in range(1, neighbours + 1)]
            writer.add(sample)
    if neighbours:
        KeyIndex.build(directory)
    return directory


def export_commit(commit: str, dest: str | Path, root: Path = ROOT) -> Path:
    """The tree of `commit` written to `dest` (`git archive`, no worktree registered), so a bench
    can run an earlier version of the code beside this one with the same venv."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=root, capture_output=True)
    if archive.returncode != 0:
        input_error(f"git archive {commit}: {archive.stderr.decode(errors='replace').strip()}")
    import tarfile
    import io
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tf:
        tf.extractall(dest, filter="data")
    return dest
