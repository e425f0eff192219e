"""Speed of the image generators: exact kNN vs the BLAS bound, approximate kNN recall and speed,
the kNN embedding pass per loader worker count, stitched pairs/s, generated images/s (renderer
and the tiny random diffusers pipeline).

    .venv/bin/python bench/bench_images.py                       # full: 100k exact, 1M approx
    .venv/bin/python bench/bench_images.py --n-exact 20000 --n-approx 100000   # smaller
    .venv/bin/python bench/bench_images.py --only exact --threads 1     # fairer on a busy machine
    .venv/bin/python bench/bench_images.py --quick                      # smoke check
    .venv/bin/python bench/bench_images.py --only embed --embed-workers 0,2   # kNN embedding pass

Synthetic embeddings are clustered (n/100 unit centres plus Gaussian noise of norm 1.5, then
normalised: same-cluster cosines ~0.3, others ~0) so neighbours mean something and an IVF index is not trivially hopeless.
The BLAS bound is measured in the same run: the time numpy's BLAS takes for all N x N products
alone (query chunks of 4096, no top-k selection); `peak_bound_s` is the same FLOPs at the best
rate of one [4096 x D] x [D x 65536] product. `exact` (the symmetric self-join: each block
pair's product once) is reported against that bound (`ratio_to_bound`, goal <= 0.6) and
against `full_product_search`, the same exact search over all N x N products (query chunks,
faiss heaps: the path before the self-join). `--flat` also times faiss' own IndexFlatIP.
Exact kNN (with its bound), stitching and generation run `--reps` times; medians and ranges are kept, the kNN/bound ratio paired by repetition.
Results go to bench/results/images.json (merged with what is there, keyed by section; `runs`
holds threads and load per set of sections run).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if "--threads" in sys.argv:  # thread count must be fixed before numpy / faiss load BLAS
    _threads = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _threads

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import RESULTS_DIR, log, ratio_stat, summarize, write_result  # noqa: E402
from compclip.datagen.images.knn import EXTRA, BlasFlatIP, Embeddings, find_neighbours  # noqa: E402


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


def gemm_rate(d: int, cols: int = 65_536) -> float:
    """FLOP/s of the product shape exact search runs (best of 3); `cols` = min(N, 65536)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4096, d)).astype(np.float32)
    b = rng.standard_normal((d, cols)).astype(np.float32)
    best = min(_timed(lambda: a @ b) for _ in range(3))
    return 2 * 4096 * cols * d / best


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


def full_product_search(vecs: np.ndarray, k: int, chunk: int = 4096) -> None:
    """The exact search before the self-join: every query chunk against all rows (N x N
    products), top k + 1 + EXTRA in faiss' heaps, as `find_neighbours` ran it."""
    index = BlasFlatIP(vecs.shape[1], len(vecs))
    index.add(vecs)
    for start in range(0, len(vecs), chunk):
        index.search(vecs[start:start + chunk], k + 1 + EXTRA)


def bench_exact(n: int, d: int, k: int, with_flat: bool, reps: int) -> dict:
    """Exact kNN time (symmetric self-join), the same search over all N x N products, and the
    BLAS bound, all measured in every repetition (ratios paired by repetition)."""
    vecs = clustered(n, d)
    rate = gemm_rate(d, min(n, 65_536))
    runs: dict[str, list[float]] = {"blas_bound_s": [], "full_product_s": []}
    methods = ["exact"] + (["flat"] if with_flat else [])
    for rep in range(reps):
        runs["blas_bound_s"].append(gemm_bound(vecs))
        for method in methods:
            t = time.perf_counter()
            find_neighbours(table(vecs), k=k, method=method)
            runs.setdefault(f"{method}_s", []).append(time.perf_counter() - t)
        t = time.perf_counter()
        full_product_search(vecs, k)
        runs["full_product_s"].append(time.perf_counter() - t)
        log(f"images: exact kNN rep {rep + 1}/{reps}: {runs['exact_s'][-1]:.2f} s, "
            f"full-product search {runs['full_product_s'][-1]:.2f} s, bound {runs['blas_bound_s'][-1]:.2f} s")
    out = {"n": n, "d": d, "k": k, "peak_gemm_gflops": round(rate / 1e9, 1),
           "peak_bound_s": round(2 * n * n * d / rate, 3), "blas_bound_s": summarize(runs["blas_bound_s"]),
           "load_avg_1min": round(os.getloadavg()[0], 2), "reference_100k_faiss_flat_s": 70.8}
    for method in methods:
        out[method] = {"seconds": summarize(runs[f"{method}_s"]),
                       "ratio_to_bound": ratio_stat(runs[f"{method}_s"], runs["blas_bound_s"])}
    out["exact"]["ratio_to_full_product_search"] = ratio_stat(runs["exact_s"], runs["full_product_s"])
    out["full_product_search"] = {"seconds": summarize(runs["full_product_s"]),
                                  "ratio_to_bound": ratio_stat(runs["full_product_s"], runs["blas_bound_s"])}
    return out


def photo_like_jpegs(n: int, size: tuple[int, int] = (640, 480), seed: int = 0) -> list[bytes]:
    """JPEGs (quality 90) of smooth random colour fields plus noise: sizes like COCO photos'
    (~50-150 kB at 640x480), not the 32 px fixtures."""
    import io
    from PIL import Image
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        low = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        base = np.asarray(Image.fromarray(low).resize(size, Image.BICUBIC), np.int16)
        pixels = np.clip(base + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


class _PoolEncoder:
    """Stands in for an image tower where only the loader is measured: mean-pools the pixels."""

    def __init__(self, preprocess, name: str):
        self.preprocess, self.name = preprocess, name

    def encode_image_tensors(self, pixels):
        import torch.nn.functional as F
        return F.normalize(pixels.float().mean(dim=(2, 3)), dim=-1)

    def encode_images(self, images):
        import torch
        return self.encode_image_tensors(torch.stack([self.preprocess(im) for im in images]))


def bench_embed(n: int, workers: list[int], reps: int) -> dict:
    """Images/s of the kNN embedding pass (`embed_shard_set`) on generated 640x480 JPEGs, per
    loader worker count: with the micro model (32 px preprocess) and with ViT-B-32's 224 px
    preprocess before a mean-pool stand-in for the tower (the loader's share alone)."""
    import open_clip
    import torch
    from compclip.datagen.images.knn import embed_shard_set
    from compclip.shardset.schema import ShardSample
    from compclip.shardset.shards import ShardSetWriter
    from compclip.eval.scorer import OpenClipScorer
    from compclip.models import load_model
    torch.manual_seed(0)
    scorers = {"micro-vit-32": OpenClipScorer.from_loaded(load_model("micro-vit-32"), batch_size=64),
               "loader_224px": _PoolEncoder(open_clip.image_transform(224, is_train=False), "pool224")}
    out: dict = {"images": n, "jpeg": "640x480, quality 90", "batch": 64, "torch_threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        jpegs = photo_like_jpegs(n)
        out["mean_jpeg_kb"] = round(sum(map(len, jpegs)) / n / 1024, 1)
        with ShardSetWriter(src, max_count=max(1, n // 4)) as writer:
            for i, data in enumerate(jpegs):
                writer.add(ShardSample(key=f"img{i:05d}", caption="a photo", image=data))
        for name, scorer in scorers.items():
            runs: dict[int, list[float]] = {w: [] for w in workers}
            files: dict[int, bytes] = {}
            for rep in range(reps):
                for w in workers:  # interleaved: paired under the same load
                    path = Path(tmp) / f"{name}_{w}_{rep}.npy"
                    t = time.perf_counter()
                    embed_shard_set(src, scorer, path, batch_size=64, dtype="float32", workers=w)
                    runs[w].append(n / (time.perf_counter() - t))
                    files[w] = path.read_bytes()
            out[name] = {f"workers_{w}": {"images_per_s": summarize(runs[w], 1)} for w in workers}
            for w in workers[1:]:
                out[name][f"workers_{w}"]["speedup_vs_{}".format(workers[0])] = ratio_stat(runs[w], runs[workers[0]])
            out[name]["identical_embeddings"] = len(set(files.values())) == 1
            log(f"images: embed {name}: " + ", ".join(
                f"{w} workers {out[name][f'workers_{w}']['images_per_s']['median']} img/s" for w in workers))
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
        log(json.dumps(rows[-1]))
    return rows


def bench_stitch(n: int, reps: int) -> dict:
    from compclip.datagen.images.stitch import write_stitched
    rates = []
    with tempfile.TemporaryDirectory() as tmp:
        bank = Path(tmp) / "bank"
        source = _object_bank(bank)
        for rep in range(reps):
            t = time.perf_counter()
            write_stitched(Path(tmp) / f"out{rep}", bank, n, size=(224, 224))
            rates.append(n / (time.perf_counter() - t))
    return {"pairs": n, "canvas": 224, "ext": "jpg", "bank": source, "pairs_per_s": summarize(rates, 1)}


def _object_bank(bank: Path) -> str:
    try:
        from compclip.datagen.world import write_object_bank
        write_object_bank(bank, 96, 0)
        return "compclip.datagen.world"
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
        from compclip.datagen.world import describe, random_scene
        rng = random.Random(0)
        return [describe(random_scene(rng)) for _ in range(n)]
    except ImportError:
        return ["a red circle to the left of a blue square"] * n


def bench_generate(n: int, diffusers_size: int, steps: int, reps: int) -> dict:
    from compclip.datagen.images.genimages import DiffusersBackend, RendererBackend, caption_seed, tiny_pipeline
    out = {}
    captions = _world_captions(n)
    seeds = [caption_seed(0, i, 0) for i in range(n)]
    try:
        backend = RendererBackend(size=224)
        rates, rendered = [], 0
        for _ in range(reps):
            t = time.perf_counter()
            images = backend.generate(captions, seeds)
            rates.append(n / (time.perf_counter() - t))
            rendered = sum(i is not None for i in images)
        out["renderer"] = {"captions": n, "size": 224, "rendered": rendered, "images_per_s": summarize(rates, 1)}
    except (ImportError, AttributeError) as err:
        out["renderer"] = {"skipped": f"datagen.world not available ({err})"}
    backend = DiffusersBackend(tiny_pipeline(0, diffusers_size), steps=steps, size=diffusers_size,
                               batch_size=8)
    backend.generate(captions[:2], seeds[:2])  # warm-up
    m = max(8, n // 4)
    rates = []
    for _ in range(reps):
        t = time.perf_counter()
        backend.generate(captions[:m], seeds[:m])
        rates.append(m / (time.perf_counter() - t))
    out["tiny_diffusers"] = {"images": m, "size": diffusers_size, "steps": steps, "guidance": 7.5,
                             "batch": 8, "images_per_s": summarize(rates, 2),
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
    p.add_argument("--reps", type=int, default=3, help="repetitions of exact kNN, stitch and generate")
    p.add_argument("--n-embed", type=int, default=256, help="generated 640x480 JPEGs to embed")
    p.add_argument("--embed-workers", default="0,2", help="loader worker counts to compare")
    p.add_argument("--only", default="exact,approx,embed,stitch,generate")
    p.add_argument("--flat", action="store_true", help="also time faiss IndexFlatIP (method flat)")
    p.add_argument("--threads", type=int, default=None, help="BLAS/OpenMP threads (default: all)")
    p.add_argument("--quick", action="store_true", help="10k exact, no approx, 50 pairs, 32 images")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.quick:
        args.n_exact, args.n_pairs, args.n_images, args.n_embed = 10_000, 50, 32, 64
        args.only = ",".join(x for x in args.only.split(",") if x != "approx")
    import faiss
    only = set(args.only.split(","))
    path = Path(args.out) if args.out else RESULTS_DIR / "images.json"
    results = json.loads(path.read_text()) if path.is_file() else {}  # sections not run are kept
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results.pop("run", None)
    results.setdefault("runs", {})[",".join(sorted(only))] = {  # one entry per set of sections run
        "faiss_threads": faiss.omp_get_max_threads(), "reps": args.reps,
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()], "when": when}
    if "exact" in only:
        results["exact_knn"] = {**bench_exact(args.n_exact, args.dim, args.k, args.flat, args.reps), "when": when}
    if "approx" in only:
        results["approx_knn"] = bench_approx(args.n_approx, args.dim, args.k,
                                             [int(x) for x in args.nprobe.split(",")], args.factory)
    if "embed" in only:
        results["knn_embed"] = {**bench_embed(args.n_embed, [int(w) for w in args.embed_workers.split(",")],
                                              args.reps), "load_avg_1min": round(os.getloadavg()[0], 2),
                                "when": when}
    if "stitch" in only:
        results["stitch"] = {**bench_stitch(args.n_pairs, args.reps), "load_avg_1min": round(os.getloadavg()[0], 2),
                             "when": when}
        log(f"images: stitch {results['stitch']['pairs_per_s']['median']} pairs/s")
    if "generate" in only:
        results["generate"] = {**bench_generate(args.n_images, 32, 2, args.reps),
                               "load_avg_1min": round(os.getloadavg()[0], 2), "when": when}
        log("images: generate " + json.dumps({k: v.get("images_per_s", {}).get("median")
                                              for k, v in results["generate"].items() if isinstance(v, dict)}))
    results.pop("machine", None)  # superseded by the meta block
    write_result("images", results, path)


if __name__ == "__main__":
    main()
