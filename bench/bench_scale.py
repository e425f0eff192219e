"""Scale of every data stage: wall time and peak memory at three sizes x4 apart, the fitted
log-log exponents, and the cost projected to COCO (600k), CC3M (3M) and CC12M (12M) items.

    .venv/bin/python bench/bench_scale.py             # full: about 12 min on a quiet 2-core machine
    .venv/bin/python bench/bench_scale.py --quick     # smoke check: about 2-3 min
    .venv/bin/python bench/bench_scale.py --only shuffle,negatives --sizes negatives=5000,20000,80000

Each (stage, size) runs alone in a fresh process, one after the other. Its peak memory is that
process's peak resident set size as GNU time (`/usr/bin/time -f %M`) reports it (the largest of
the process and the children it waited for), interpreter and imports included. A stage with a command line is
run as users run it and timed whole (start-up included); a stage without one runs the library
function in `bench_scale.py --child` and times that call alone. Inputs are made by this script
before each run and not timed. Stages, with their sizes (`--quick` sizes in brackets):
- `shards` (25k / 100k / 400k samples [1k / 4k / 16k]): `bench.common.write_caption_shards`
  through `ShardSetWriter`, 10,000 samples per shard, real COCO captions (SugarCrepe's, cycled),
  one hard negative each, `--image-px` (default 64) JPEGs from `bench_images.photo_like_jpegs`;
- `shuffle` (the same sets): `python -m compclip.datagen shuffle --src SET --out OUT --quiet`;
- `sample_index` (the same sets): the trainer's `SampleIndex.load` building its index and cache,
  and `sample_index_cached`: a second `SampleIndex.load` in a new process, reading the cache;
- `negatives` (5k / 20k / 80k captions [250 / 1k / 4k]): `python -m compclip.datagen.negatives
  generate --src CSV --out OUT --workers 1 --quiet` (default plausibility filter); captions: COCO
  captions, made distinct past SugarCrepe's 4,345 by joining one caption's head to another's tail
  at a preposition (`coco_like_captions`), so none repeats; and `negatives_2w`: the same command
  with `--workers 2` on the same captions (peak: the largest process, not their sum);
- `exact_knn` (10k / 40k / 160k vectors of d 512 [1k / 4k / 16k]): `find_neighbours(method="exact",
  k=3)` on `bench_images.clustered` embeddings stored as a float16 `.npy` memmap, as
  `embed_shard_set` writes them; its time exponent is expected ~2 (a self-join) and not flagged;
- `approx_knn` (15,625 / 62,500 / 250k vectors [1k / 4k / 16k]): `find_neighbours(method="approx",
  k=3)` with the default index and its recall check, on `bench.clip_like.clip_like_embeddings`
  (float16 memmap); recall@3 recorded per size;
- `eval` (2.5k / 10k / 40k items [250 / 1k / 4k]): `python -m compclip.eval score --pretrained CKPT
  --benchmarks sugarcrepe --data-root ROOT --cache-dir CACHE --quiet --no-plots` with a random
  `micro-vit-32` checkpoint, on SugarCrepe-format files of that many items (distinct COCO-like
  captions and negatives, 3 items per image, `--image-px` JPEGs); `eval_cached`: the same command
  again, on the score cache the first run wrote.
Per row: the fitted exponent of time and of peak memory against size (least squares of the logs
over the sizes), the peak ratio largest / smallest size, the projection of both to 600k, 3M and
12M by the fit, and flags: a time exponent above 1.1 (exact kNN excepted) and a peak ratio above
1.2 (memory growing with the data). One thread per process (OMP/MKL/OpenBLAS, unless set).
Writes bench/results/scale.json.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # one thread unless set: before numpy / faiss load BLAS
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Optional, Sequence  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import coco_captions, command_line, log, write_result  # noqa: E402

SETS = (25_000, 100_000, 400_000)
STAGES = {  # name -> (label, unit, full sizes, quick sizes)
    "shards": ("shard writing", "samples", SETS, (1_000, 4_000, 16_000)),
    "shuffle": ("`datagen shuffle`", "samples", SETS, (1_000, 4_000, 16_000)),
    "sample_index": ("trainer sample index", "rows", SETS, (1_000, 4_000, 16_000)),
    "negatives": ("negatives generate, 1 worker", "captions", (5_000, 20_000, 80_000), (250, 1_000, 4_000)),
    "exact_knn": ("exact kNN self-join", "vectors", (10_000, 40_000, 160_000), (1_000, 4_000, 16_000)),
    "approx_knn": ("approximate kNN", "vectors", (15_625, 62_500, 250_000), (1_000, 4_000, 16_000)),
    "eval": ("eval (SugarCrepe format)", "items", (2_500, 10_000, 40_000), (250, 1_000, 4_000)),
}
MEASURES = {  # row -> what its time covers
    "shards": "`bench.common.write_caption_shards` (`ShardSetWriter`)",
    "shuffle": "the whole command",
    "sample_index": "`SampleIndex.load`, building the index and its cache",
    "sample_index_cached": "`SampleIndex.load` reading the cache, in a new process",
    "negatives": "the whole command",
    "negatives_2w": "the whole command, the same captions",
    "exact_knn": "`find_neighbours(method=\"exact\")`",
    "approx_knn": "`find_neighbours(method=\"approx\")`, recall check included",
    "eval": "the whole command, empty score cache",
    "eval_cached": "the whole command again, with the score cache the first run wrote",
}
LABELS = {"sample_index_cached": "trainer sample index, cached", "eval_cached": "eval, second run (score cache)",
          "negatives_2w": "negatives generate, 2 workers"}
PROJECT_TO = {"COCO": 600_000, "CC3M": 3_000_000, "CC12M": 12_000_000}
TIME_FLAG, MEMORY_FLAG = 1.1, 1.2
EXPECTED_QUADRATIC = {"exact_knn"}
FLAG_THRESHOLDS = {"time_exponent": TIME_FLAG, "peak_ratio": MEMORY_FLAG, "time_not_flagged": sorted(EXPECTED_QUADRATIC)}
DIM, K = 512, 3
GNU_TIME = "/usr/bin/time"
PREPOSITIONS = {"on", "in", "at", "with", "near", "next", "by", "under", "beside", "behind", "over",
                "inside", "outside", "along", "from", "into", "onto", "through", "while", "and"}


# --- fits and flags -------------------------------------------------------------------------------

def fit_exponent(sizes: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
    """(exponent, log-intercept) of the least-squares line log(value) = a log(size) + b."""
    import numpy as np
    if len(sizes) != len(values) or len(set(sizes)) < 2:
        raise ValueError(f"fit_exponent needs two or more different sizes, one value each: {sizes}, {values}")
    a, b = np.polyfit(np.log(sizes), np.log(np.maximum(values, 1e-6)), 1)
    return float(a), float(b)


def summarize_row(stage: str, runs: list[dict]) -> dict:
    """Exponents, peak ratio, projections and flags of one row's runs ({n, seconds, peak_rss_mib})."""
    sizes = [r["n"] for r in runs]
    t_exp, t_b = fit_exponent(sizes, [r["seconds"] for r in runs])
    m_exp, m_b = fit_exponent(sizes, [r["peak_rss_mib"] for r in runs])
    ratio = runs[-1]["peak_rss_mib"] / runs[0]["peak_rss_mib"]
    flags = []
    if t_exp > TIME_FLAG and stage not in EXPECTED_QUADRATIC:
        flags.append(f"time exponent {t_exp:.2f} > {TIME_FLAG}")
    if ratio > MEMORY_FLAG:
        flags.append(f"peak memory x{ratio:.2f} over x{sizes[-1] / sizes[0]:.0f} the data (> {MEMORY_FLAG})")
    return {"time_exponent": round(t_exp, 3), "memory_exponent": round(m_exp, 3),
            "peak_ratio": round(ratio, 3), "size_range": round(sizes[-1] / sizes[0], 2),
            "projected": {name: {"n": n, "seconds": round(math.exp(t_b) * n ** t_exp, 3),
                                 "peak_rss_mib": round(math.exp(m_b) * n ** m_exp, 1)}
                          for name, n in PROJECT_TO.items()},
            "flags": flags}


# --- inputs -----------------------------------------------------------------------------------------

def coco_like_captions(n: int, pairs: Optional[list[tuple[str, str]]] = None) -> list[tuple[str, str]]:
    """`n` distinct (caption, hard negative) pairs of COCO length: SugarCrepe's COCO captions first,
    then, round r >= 1, caption j's head (up to its first preposition after the second word, else
    its first half) joined to caption (j + r)'s tail from its own split point; the negative is the
    same join of caption j's negative head."""
    pairs = pairs if pairs is not None else coco_captions()

    def split(text: str) -> tuple[list[str], list[str]]:
        words = text.rstrip(".").split()
        at = next((i for i, w in enumerate(words) if i >= 2 and w.lower() in PREPOSITIONS), len(words) // 2)
        return words[:at], words[at:]
    out, seen = [], set()
    p = len(pairs)
    i = 0
    while len(out) < n:
        r, j = divmod(i, p)
        i += 1
        if r == 0:
            pair = pairs[j]
        else:
            tail = split(pairs[(j + r) % p][0])[1]
            pair = (" ".join(split(pairs[j][0])[0] + tail), " ".join(split(pairs[j][1])[0] + tail))
        if pair[0] not in seen and pair[0] != pair[1]:
            seen.add(pair[0])
            out.append(pair)
        if i > 4 * n + p:
            raise ValueError(f"coco_like_captions: only {len(out)} distinct captions of {n}")
    return out


def image_pool(px: int, count: int = 64) -> list[bytes]:
    from bench.bench_images import photo_like_jpegs
    return photo_like_jpegs(count, (px, px))


def write_set(directory: Path, n: int, px: int) -> float:
    """The shard set of `shards` (also the input of `shuffle` and `sample_index`); seconds of the write."""
    from bench.common import write_caption_shards
    pool, pairs = image_pool(px), coco_captions()
    start = time.perf_counter()
    write_caption_shards(directory, pairs, n, per_shard=10_000, negatives=1, image=lambda i: pool[i % len(pool)])
    return time.perf_counter() - start


def write_embeddings(path: Path, n: int, clip_like: bool) -> None:
    import numpy as np
    if clip_like:
        from bench.clip_like import clip_like_embeddings
        vectors = clip_like_embeddings(n, DIM, seed=0)
    else:
        from bench.bench_images import clustered
        vectors = clustered(n, DIM)
    np.save(path, vectors.astype(np.float16))


def write_captions_csv(path: Path, n: int) -> None:
    import csv
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["filepath", "caption"])
        writer.writerows((f"img{i}.jpg", c) for i, (c, _) in enumerate(coco_like_captions(n)))


def write_sugarcrepe_root(root: Path, n: int, px: int) -> None:
    """SugarCrepe's seven json files holding `n` items in all (distinct COCO-like captions and
    negatives), 3 items per image, images in coco/val2017; marked as local data."""
    from compclip.eval.benchmarks.sugarcrepe import SUBSETS
    from compclip.eval.checksums import mark_local
    images = root / "coco" / "val2017"
    images.mkdir(parents=True)
    (root / "sugarcrepe").mkdir()
    pool = image_pool(px)
    for i in range((n + 2) // 3):
        (images / f"{i:012d}.jpg").write_bytes(pool[i % len(pool)])
    items = coco_like_captions(n)
    for s, subset in enumerate(SUBSETS):
        part = {str(i): {"filename": f"{i // 3:012d}.jpg", "caption": c, "negative_caption": neg}
                for i, (c, neg) in enumerate(items) if i % len(SUBSETS) == s}
        (root / "sugarcrepe" / f"{subset}.json").write_text(json.dumps(part, indent=1))
    mark_local(root, "bench/bench_scale.py")


def write_checkpoint(directory: Path) -> Path:
    import torch
    from compclip.models import CheckpointMeta, load_model, save_checkpoint
    torch.manual_seed(0)
    meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none", step=0)
    save_checkpoint(directory, "random", load_model("micro-vit-32").model, meta)
    return directory / "random.pt"


# --- one measured process ---------------------------------------------------------------------------

def run_child(stage: str, n: int, path: str, image_px: int) -> dict:
    """The library call of a stage without a command line, timed alone (in the `--child` process)."""
    if stage == "shards":
        return {"seconds": write_set(Path(path), n, image_px)}
    if stage in ("sample_index", "sample_index_cached"):
        from compclip.trainer.sample_index import SampleIndex
        start = time.perf_counter()
        index = SampleIndex.load(path)
        seconds = time.perf_counter() - start
        if len(index) != n:
            raise SystemExit(f"bench_scale: {path}: sample index has {len(index)} rows, expected {n}")
        return {"seconds": seconds}
    if stage in ("exact_knn", "approx_knn"):
        import numpy as np
        from bench.bench_images import table
        from compclip.datagen.images.knn import find_neighbours
        emb = table(np.load(path, mmap_mode="r"))
        start = time.perf_counter()
        _, _, stats = find_neighbours(emb, k=K, method=stage.split("_")[0])
        return {"seconds": time.perf_counter() - start,
                **{k: stats[k] for k in ("build_s", "search_s", "factory", "nprobe", "recall") if k in stats}}
    raise SystemExit(f"bench_scale: no child stage {stage!r}")


def measure(argv: list[str], work: Path) -> dict:
    """Run `argv` alone under GNU time; wall seconds, peak RSS (MiB) and the child's JSON (its last
    stdout line). GNU time forks the command from its own small process: a child spawned from this
    one would carry this process's resident size into its `ru_maxrss`."""
    if not Path(GNU_TIME).is_file():
        raise SystemExit(f"bench_scale: {GNU_TIME} not found: peak memory is read from GNU time "
                         "(Debian / Ubuntu package `time`)")
    with tempfile.TemporaryDirectory(prefix="measure_", dir=work) as tmp:
        peak_file, out_file, err_file = (Path(tmp) / name for name in ("peak", "stdout", "stderr"))
        with open(out_file, "wb") as out, open(err_file, "wb") as err:
            start = time.perf_counter()
            rc = subprocess.run([GNU_TIME, "-f", "%M", "-o", str(peak_file), *argv], cwd=ROOT, stdout=out,
                                stderr=err).returncode
            wall = time.perf_counter() - start
        stdout, stderr = out_file.read_text(errors="replace"), err_file.read_text(errors="replace")
        peak_kib = peak_file.read_text().split()[-1] if peak_file.is_file() else ""
    shown = command_line(argv[1:]).replace(str(work), "WORK").replace(str(ROOT) + "/", "")
    if rc != 0 or not peak_kib.isdigit():
        raise SystemExit(f"bench_scale: `{shown}` failed ({rc}):\n" + "\n".join(stderr.splitlines()[-15:]))
    result = {"process_wall_s": round(wall, 3), "peak_rss_mib": round(int(peak_kib) / 1024, 1), "command": shown}
    if argv[1:3] == [str(Path(__file__).resolve()), "--child"]:
        child = json.loads(stdout.strip().splitlines()[-1])
        result.update(child, seconds=round(child["seconds"], 6))
    else:
        result["seconds"] = round(wall, 3)
    return result


# --- stages -----------------------------------------------------------------------------------------

class Runner:
    """Makes each stage's inputs under `work` and measures its rows, one process per size."""

    def __init__(self, work: Path, image_px: int):
        self.work, self.image_px = work, image_px
        self.py, self.me = sys.executable, str(Path(__file__).resolve())

    def child(self, stage: str, n: int, path: Path) -> list[str]:
        return [self.py, self.me, "--child", stage, "--n", str(n), "--path", str(path),
                "--image-px", str(self.image_px)]

    def shard_set(self, n: int) -> Path:
        """The set of `n` samples: the one `shards` wrote, else written here (untimed)."""
        path = self.work / f"set-{n}"
        manifest = path / "manifest.json"
        if not manifest.is_file() or not json.loads(manifest.read_text()).get("complete"):
            shutil.rmtree(path, ignore_errors=True)
            write_set(path, n, self.image_px)
        return path

    def rows(self, stage: str, n: int) -> dict[str, dict]:
        """{row name: measurement} of one stage at one size."""
        w = self.work
        if stage == "shards":
            shutil.rmtree(w / f"set-{n}", ignore_errors=True)
            return {"shards": measure(self.child("shards", n, w / f"set-{n}"), w)}
        if stage == "shuffle":
            src, out = self.shard_set(n), w / f"shuffled-{n}"
            shutil.rmtree(out, ignore_errors=True)
            got = measure([self.py, "-m", "compclip.datagen", "shuffle", "--src", str(src), "--out", str(out),
                           "--quiet"], w)
            shutil.rmtree(out)
            return {"shuffle": got}
        if stage == "sample_index":
            src = self.shard_set(n)
            (src / "sample_index.npz").unlink(missing_ok=True)
            return {"sample_index": measure(self.child("sample_index", n, src), w),
                    "sample_index_cached": measure(self.child("sample_index_cached", n, src), w)}
        if stage == "negatives":
            src, out = w / f"captions-{n}.csv", w / f"negatives-{n}"
            write_captions_csv(src, n)
            shutil.rmtree(out, ignore_errors=True)
            got = {}
            for name, workers in (("negatives", "1"), ("negatives_2w", "2")):
                got[name] = measure([self.py, "-m", "compclip.datagen.negatives", "generate", "--src", str(src),
                                     "--out", str(out), "--workers", workers, "--quiet"], w)
                shutil.rmtree(out)
            src.unlink()
            return got
        if stage in ("exact_knn", "approx_knn"):
            path = w / f"{stage}-{n}.npy"
            write_embeddings(path, n, clip_like=stage == "approx_knn")
            got = measure(self.child(stage, n, path), w)
            path.unlink()
            return {stage: got}
        if stage == "eval":
            ckpt = w / "checkpoint" / "random.pt"
            if not ckpt.is_file():
                write_checkpoint(ckpt.parent)
            root, cache = w / f"eval-{n}", w / f"scores-{n}"
            for folder in (root, cache):
                shutil.rmtree(folder, ignore_errors=True)
            write_sugarcrepe_root(root, n, self.image_px)
            argv = [self.py, "-m", "compclip.eval", "score", "--pretrained", str(ckpt), "--benchmarks", "sugarcrepe",
                    "--data-root", str(root), "--cache-dir", str(cache), "--quiet", "--no-plots"]
            got = {"eval": measure(argv, w), "eval_cached": measure(argv, w)}
            shutil.rmtree(root)
            shutil.rmtree(cache)
            return got
        raise ValueError(f"unknown stage {stage!r}")


def parse_sizes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`STAGE=a,b,c` items -> {stage: sizes}; an unknown stage or a non-increasing list is an error."""
    out = {}
    for item in items:
        stage, _, sizes = item.partition("=")
        if stage not in STAGES:
            raise SystemExit(f"bench_scale: --sizes {item}: unknown stage {stage!r} (one of {', '.join(STAGES)})")
        try:
            values = tuple(int(s) for s in sizes.split(","))
        except ValueError:
            raise SystemExit(f"bench_scale: --sizes {item}: sizes must be integers, e.g. {stage}=1000,4000,16000")
        if len(values) < 2 or any(b <= a for a, b in zip(values, values[1:])):
            raise SystemExit(f"bench_scale: --sizes {item}: two or more increasing sizes")
        out[stage] = values
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (smoke check, ~2-3 min)")
    p.add_argument("--only", default=None, help=f"comma list of stages ({', '.join(STAGES)})")
    p.add_argument("--sizes", action="append", default=[], metavar="STAGE=a,b,c", help="sizes of one stage")
    p.add_argument("--image-px", type=int, default=64, help="side of the JPEGs in shard sets and eval images")
    p.add_argument("--work-dir", default=None, help="folder for the inputs (default: a temporary one)")
    p.add_argument("--out", default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, args.n, args.path, args.image_px)))
        return
    stages = args.only.split(",") if args.only else list(STAGES)
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise SystemExit(f"bench_scale: --only: unknown stage(s) {', '.join(unknown)} (one of {', '.join(STAGES)})")
    sizes = {s: STAGES[s][3 if args.quick else 2] for s in stages} | parse_sizes(args.sizes)
    made = tempfile.mkdtemp(prefix="bench_scale_") if args.work_dir is None else None
    work = Path(args.work_dir or made)
    work.mkdir(parents=True, exist_ok=True)
    runner, rows = Runner(work, args.image_px), {}
    start = time.perf_counter()
    try:
        for stage in stages:
            for n in sizes[stage]:
                for name, got in runner.rows(stage, n).items():
                    rows.setdefault(name, {"stage": stage, "label": LABELS.get(name, STAGES[stage][0]),
                                           "unit": STAGES[stage][1], "measures": MEASURES[name],
                                           "runs": []})["runs"].append({"n": n, **got})
                    log(f"scale: {name} n={n:,}: {got['seconds']:.2f} s, peak {got['peak_rss_mib']:.0f} MiB")
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
    for name, row in rows.items():
        row.update(summarize_row(row["stage"], row["runs"]))
        log(f"scale: {name}: time ~N^{row['time_exponent']:.2f}, memory ~N^{row['memory_exponent']:.2f}"
            + (f"; FLAGGED: {'; '.join(row['flags'])}" if row["flags"] else ""))
    write_result("scale", {"quick": args.quick, "image_px": args.image_px, "sizes": sizes,
                           "threads": os.environ.get("OMP_NUM_THREADS"), "wall_s": round(time.perf_counter() - start, 1),
                           "project_to": PROJECT_TO, "flag_thresholds": FLAG_THRESHOLDS, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
