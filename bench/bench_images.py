"""Speed of the image generators: exact kNN vs the BLAS bound, approximate kNN recall and speed,
stitched pairs/s, generated images/s (renderer and the tiny random diffusers pipeline).

    .venv/bin/python bench/bench_images.py                       # full: 100k exact, 1M approx
    .venv/bin/python bench/bench_images.py --n-exact 20000 --n-approx 100000   # quick
    .venv/bin/python bench/bench_images.py --only exact --threads 1     # fairer on a busy machine

Synthetic embeddings are clustered (n/100 unit centres plus Gaussian noise of norm 1.5, then
normalised: same-cluster cosines ~0.3, others ~0) so neighbours mean something and an IVF index is not trivially hopeless.
The BLAS bound is measured in the same run: the time numpy's BLAS takes for all N x N products
alone (query chunks of 4096, no top-k selection); `peak_bound_s` is the same FLOPs at the best
rate of one [4096 x D] x [D x 65536] product. `--flat` also times faiss' own IndexFlatIP.
Results go to bench/results/images.json (merged with what is there, keyed by section).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "--threads" in sys.argv:  # thread count must be fixed before numpy / faiss load BLAS
    _threads = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _threads

from datagen.knn import Embeddings, find_neighbours  # noqa: E402


def clustered(n: int, d: int, seed: int = 0, noise: float = 1.5, chunk: int = 100_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n_centres = max(10, n // 100)
    centres = rng.standard_normal((n_centres, d)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.empty((n, d), np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        x = centres[rng.integers(0, n_centres, m)] + rng.standard_normal((m, d)).astype(np.float32) * (noise / np.sqrt(d))
        out[start:start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def gemm_rate(d: int) -> float:
    """FLOP/s of the product shape exact search runs (best of 3)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4096, d)).astype(np.float32)
    b = rng.standard_normal((d, 65_536)).astype(np.float32)
    best = min(_timed(lambda: a @ b) for _ in range(3))
    return 2 * 4096 * 65_536 * d / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def table(vectors: np.ndarray) -> Embeddings:
    n = len(vectors)
    return Embeddings(vectors, [str(i) for i in range(n)], np.arange(n, dtype=np.int64),
                      np.ones(n, bool), None)


def gemm_bound(vecs: np.ndarray, chunk: int = 4096) -> float:
    """Seconds for all N x N products alone (numpy BLAS, query chunks, no selection)."""
    t = time.perf_counter()
    for start in range(0, len(vecs), chunk):
        vecs[start:start + chunk] @ vecs.T
    return time.perf_counter() - t


def bench_exact(n: int, d: int, k: int, with_flat: bool) -> dict:
    vecs = clustered(n, d)
    rate = gemm_rate(d)
    bound = gemm_bound(vecs)
    out = {"n": n, "d": d, "k": k, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "peak_gemm_gflops": round(rate / 1e9, 1),
           "blas_bound_s": round(bound, 2), "peak_bound_s": round(2 * n * n * d / rate, 2),
           "reference_100k_faiss_flat_s": 70.8}
    methods = ["exact"] + (["flat"] if with_flat else [])
    for method in methods:
        t = time.perf_counter()
        _, _, stats = find_neighbours(table(vecs), k=k, method=method)
        total = time.perf_counter() - t
        out[method] = {"seconds": round(total, 2), "ratio_to_bound": round(total / bound, 3),
                       "search_s": stats["search_s"], "load_avg_1min": round(os.getloadavg()[0], 2)}
    return out


def bench_approx(n: int, d: int, k: int, nprobes: list[int], factory: str | None) -> list[dict]:
    vecs = clustered(n, d, seed=2)
    rows = []
    for nprobe in nprobes:
        t = time.perf_counter()
        _, _, stats = find_neighbours(table(vecs), k=k, method="approx", factory=factory,
                                      nprobe=nprobe, recall_sample=1000)
        total = time.perf_counter() - t
        rows.append({"n": n, "d": d, "k": k, "seconds_incl_recall_check": round(total, 2),
                     "load_avg_1min": round(os.getloadavg()[0], 2), **stats})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def bench_stitch(n: int) -> dict:
    from datagen.stitch import write_stitched
    with tempfile.TemporaryDirectory() as tmp:
        bank = Path(tmp) / "bank"
        source = _object_bank(bank)
        t = time.perf_counter()
        write_stitched(Path(tmp) / "out", bank, n, size=(224, 224))
        secs = time.perf_counter() - t
    return {"pairs": n, "canvas": 224, "ext": "jpg", "bank": source, "seconds": round(secs, 2),
            "pairs_per_s": round(n / secs, 1)}


def _object_bank(bank: Path) -> str:
    try:
        from datagen.world import write_object_bank
        write_object_bank(bank, 96, 0)
        return "datagen.world"
    except (ImportError, AttributeError):
        from PIL import Image, ImageDraw
        bank.mkdir(parents=True)
        for i, colour in enumerate(["red", "green", "blue", "yellow", "purple", "orange"]):
            im = Image.new("RGBA", (96, 96), (0, 0, 0, 0))
            ImageDraw.Draw(im).ellipse((8, 8 + i, 88, 88), fill=colour)
            im.save(bank / f"{colour}_circle.png")
        return "synthetic circles (datagen.world not available)"


def _world_captions(n: int) -> list[str]:
    try:
        import random
        from datagen.world import describe, random_scene
        rng = random.Random(0)
        return [describe(random_scene(rng)) for _ in range(n)]
    except ImportError:
        return ["a red circle to the left of a blue square"] * n


def bench_generate(n: int, diffusers_size: int, steps: int) -> dict:
    from datagen.genimages import DiffusersBackend, RendererBackend, caption_seed, tiny_pipeline
    out = {}
    captions = _world_captions(n)
    seeds = [caption_seed(0, i, 0) for i in range(n)]
    try:
        backend = RendererBackend(size=224)
        t = time.perf_counter()
        images = backend.generate(captions, seeds)
        secs = time.perf_counter() - t
        out["renderer"] = {"captions": n, "size": 224, "rendered": sum(i is not None for i in images),
                           "images_per_s": round(n / secs, 1)}
    except (ImportError, AttributeError) as err:
        out["renderer"] = {"skipped": f"datagen.world not available ({err})"}
    backend = DiffusersBackend(tiny_pipeline(0, diffusers_size), steps=steps, size=diffusers_size,
                               batch_size=8)
    backend.generate(captions[:2], seeds[:2])  # warm-up
    m = max(8, n // 4)
    t = time.perf_counter()
    backend.generate(captions[:m], seeds[:m])
    secs = time.perf_counter() - t
    out["tiny_diffusers"] = {"images": m, "size": diffusers_size, "steps": steps, "guidance": 7.5,
                             "batch": 8, "images_per_s": round(m / secs, 2),
                             "note": "random tiny pipeline: measures the plumbing, not a real model"}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-exact", type=int, default=100_000)
    p.add_argument("--n-approx", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--nprobe", default="8,32", help="comma-separated nprobe values to measure")
    p.add_argument("--factory", default=None, help="faiss factory (default IVF<4sqrtN>,Flat)")
    p.add_argument("--n-pairs", type=int, default=200)
    p.add_argument("--n-images", type=int, default=64)
    p.add_argument("--only", default="exact,approx,stitch,generate")
    p.add_argument("--flat", action="store_true", help="also time faiss IndexFlatIP (method flat)")
    p.add_argument("--threads", type=int, default=None, help="BLAS/OpenMP threads (default: all)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "images.json"))
    args = p.parse_args()
    import faiss
    only = set(args.only.split(","))
    path = Path(args.out)
    results = json.loads(path.read_text()) if path.is_file() else {}
    results["machine"] = {"cpus": os.cpu_count(), "faiss_threads": faiss.omp_get_max_threads(),
                          "python": platform.python_version(),
                          "load_avg_at_start": [round(x, 2) for x in os.getloadavg()], "faiss": faiss.__version__,
                          "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if "exact" in only:
        results["exact_knn"] = bench_exact(args.n_exact, args.dim, args.k, args.flat)
        print(json.dumps(results["exact_knn"]), flush=True)
    if "approx" in only:
        results["approx_knn"] = bench_approx(args.n_approx, args.dim, args.k,
                                             [int(x) for x in args.nprobe.split(",")], args.factory)
    if "stitch" in only:
        results["stitch"] = {**bench_stitch(args.n_pairs), "load_avg_1min": round(os.getloadavg()[0], 2),
                             "when": results["machine"]["when"]}
        print(json.dumps(results["stitch"]), flush=True)
    if "generate" in only:
        results["generate"] = {**bench_generate(args.n_images, 32, 2),
                               "load_avg_1min": round(os.getloadavg()[0], 2),
                               "when": results["machine"]["when"]}
        print(json.dumps(results["generate"]), flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
