"""Nearest-neighbour hard images (NegCLIP): embed a shard set, find each image's K nearest, and
write them into a copy of the set as `nn.json`.

1. `embed_shard_set`: every anchor image, decoded robustly (corrupt ones are marked invalid and
   later skipped and counted), is embedded by an `OpenClipEncoder` (`models.encode`) in batches and written row by
   row into a float16 (or float32) `.npy` memmap, so the set may exceed memory. Reading,
   decoding and preprocessing run in DataLoader workers (`datagen.images.knn_images`), in row order,
   so the memmap does not depend on the worker count. A sidecar JSON holds keys, a content
   hash of each image's bytes, and validity.
2. `find_neighbours`: cosine similarity (embeddings are L2-normalised, so inner product) with
   faiss. `method="exact"` (the default up to `EXACT_LIMIT` images) is a self-join: each block
   pair's product once with numpy's BLAS (half the N x N products), top k per row by
   (score, then smaller id) (`self_join_topk`, `datagen.images.knn_selfjoin`; retries use `BlasFlatIP`, query chunks against
   all rows, top k in faiss' heaps; same answers as `faiss.IndexFlatIP`, `method="flat"`, up to
   the order of exact ties, but faster here); `method="approx"` is any
   faiss index factory string, default
   `IVF{4*sqrt(N)},SQfp16` (vectors kept as float16, as the embeddings are stored by default)
   probed with `nprobe` lists. Unless `nprobe` is given it is tuned: the smallest of 8, 16,
   32, ... whose recall@k on one sample of queries reaches `TARGET_RECALL` (`tune_nprobe`).
   Recall against exact search is then measured on another sample of queries and reported.
   Vectors are added to the index in chunks read from the memmap.
   Excluded from an image's neighbours: itself, images with identical bytes (same hash), and
   near-duplicates with similarity >= `dup_threshold` (default 0.999: a re-encoded or resized
   copy of the same picture; float16 storage moves cosines by ~1e-3 at most). If exclusions
   leave fewer than K, the search is repeated for that row with a larger K.
3. `write_neighbours`: the source set is rewritten sample by sample into a new shard set (raw
   members copied byte for byte, `nn.json` added: `{"key", "score"}` best first), resumable like
   every `ShardSetWriter`, and `keys.tsv` is built with `KeyIndex.build` so the trainer fetches
   a neighbour's image by key. The copy keeps the source's sample order (its manifest says
   `"order": {..., "inherited_from": <src>}`) and carries over the source's record of excluded
   benchmark images (`excluded`, `exclusion`); `image_ids.txt` is written anew on close. `run_knn` chains the three and records settings and recall in
   the output manifest under `knn`.
"""
from __future__ import annotations

import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import faiss
import numpy as np

from compclip.shardset.order import inherited_order
from compclip.shardset.schema import SchemaError
from compclip.shardset.shards import (CARRIED_KEYS, KeyIndex, ShardSetWriter, iter_raw_samples,
                            read_manifest, shard_urls)
from compclip.datagen.images.knn_selfjoin import self_join_topk, ties_by_id

log = logging.getLogger(__name__)

EXACT_LIMIT = 300_000
DUP_THRESHOLD = 0.999
EXTRA = 4  # candidates searched beyond k + 1 (itself), for exclusions
TARGET_RECALL = 0.97  # recall@k the tuned nprobe reaches on its sample of queries
FIRST_NPROBE = 8


@dataclass
class Embeddings:
    vectors: np.ndarray  # [N, D] memmap (float16/32), L2-normalised rows; invalid rows are zero
    keys: list[str]
    hashes: np.ndarray  # int64 [N]: first 8 bytes of blake2b of the image bytes
    valid: np.ndarray  # bool [N]: image decoded
    path: Path

    @property
    def skipped(self) -> int:
        return int((~self.valid).sum())


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def load_embeddings(path: str | Path) -> Embeddings:
    path = Path(path)
    info = json.loads(_sidecar(path).read_text())
    return Embeddings(np.load(path, mmap_mode="r"), info["keys"], np.array(info["hashes"], np.int64),
                      np.array(info["valid"], bool), path)


def _sources(directory: str | Path) -> list[str]:
    return [s["sha256"] for s in read_manifest(directory)["shards"]]


def _image_encoder(scorer) -> tuple[Optional[Callable], Callable]:
    """(transform run in the loader workers, encode of a list of what it returns). A scorer with
    `preprocess` and `encode_image_tensors` (`models.encode.OpenClipEncoder`) gets its preprocessing done in the
    workers; any other `encode_images` scorer gets decoded PIL images."""
    if hasattr(scorer, "preprocess") and hasattr(scorer, "encode_image_tensors"):
        import torch
        return scorer.preprocess, lambda images: scorer.encode_image_tensors(torch.stack(images))
    return None, scorer.encode_images


def embed_shard_set(directory: str | Path, scorer, out_path: str | Path, batch_size: int = 256,
                    dtype: str = "float16", workers: Optional[int] = None,
                    progress: bool = False) -> Embeddings:
    """Embed every anchor image of a shard set into an .npy memmap; reuses a finished one.

    `workers` DataLoader processes read, decode and preprocess the images (default
    `default_workers()`; 0: in this process); the result does not depend on it."""
    from compclip.cli import progress as bar_of
    from compclip.datagen.images.knn_images import default_workers, image_loader
    out_path = Path(out_path)
    side = _sidecar(out_path)
    if side.is_file() and out_path.is_file():
        info = json.loads(side.read_text())
        if info.get("complete") and info.get("sources") == _sources(directory) \
                and info.get("scorer") == getattr(scorer, "name", "?"):
            log.info("%s: reusing embeddings", out_path)
            return load_embeddings(out_path)
    total = sum(s["samples"] for s in read_manifest(directory)["shards"])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    keys, hashes, valid = [], [], []
    table: Optional[np.ndarray] = None
    pending: list[tuple[int, object]] = []
    transform, encode = _image_encoder(scorer)
    workers = default_workers() if workers is None else workers
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    loader = image_loader(shard_urls(directory), transform, workers)
    bar = bar_of(total=total, unit="img", unit_scale=True, desc="knn embed", quiet=not progress)

    def flush() -> None:
        nonlocal table
        if not pending:
            return
        vecs = encode([im for _, im in pending]).numpy()
        if table is None:
            table = np.lib.format.open_memmap(out_path, "w+", dtype, (total, vecs.shape[1]))
        table[[i for i, _ in pending]] = vecs.astype(dtype)
        bar.update(len(pending))
        pending.clear()

    with bar:
        for item in loader:
            if item["row"] != len(keys):
                raise RuntimeError(f"{directory}: embedding loader gave row {item['row']}, "
                                   f"expected {len(keys)}")
            keys.append(item["key"])
            hashes.append(item["hash"])
            valid.append(item["error"] is None)
            if item["error"] is None:
                pending.append((item["row"], item["image"]))
            else:
                log.warning("not embedded: %s", item["error"])
                bar.update(1)
            if len(pending) >= batch_size:
                flush()
        flush()
    if table is None:
        raise ValueError(f"{directory}: no decodable image to embed")
    for row in np.flatnonzero(~np.array(valid, bool)):
        table[row] = 0
    table.flush()
    del table
    side.write_text(json.dumps({"complete": True, "sources": _sources(directory),
                                "scorer": getattr(scorer, "name", "?"), "keys": keys,
                                "hashes": hashes, "valid": valid}))
    return load_embeddings(out_path)


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield start, min(n, start + size)


class BlasFlatIP:
    """Exact inner-product search: numpy's BLAS for the products, faiss' heaps for the top k.

    Same answers as `faiss.IndexFlatIP` (same float32 products, same heap selection), but the
    products run in numpy's OpenBLAS, which has kernels for this CPU; the OpenBLAS bundled in
    the faiss-cpu wheel measured 2-4x slower here (see docs/images.md). Database blocks of
    `block` rows bound the temporary [queries x block] score matrix. `self_join` answers all
    stored rows at once for half the products (`self_join_topk`, blocks of `join_block`).
    """

    def __init__(self, d: int, capacity: int, block: int = 16_384, join_block: int = 2048):
        self.d, self.block, self.join_block, self.ntotal = d, block, join_block, 0
        self._xb = np.empty((capacity, d), np.float32)

    def add(self, x: np.ndarray) -> None:
        self._xb[self.ntotal:self.ntotal + len(x)] = x
        self.ntotal += len(x)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, np.float32)
        scores = np.empty((len(queries), k), np.float32)
        ids = np.empty((len(queries), k), np.int64)
        heaps = faiss.float_minheap_array_t()
        heaps.nh, heaps.k = len(queries), k
        heaps.val, heaps.ids = faiss.swig_ptr(scores), faiss.swig_ptr(ids)
        heaps.heapify()
        xb = self._xb[:self.ntotal]
        for start in range(0, self.ntotal, self.block):
            block = np.ascontiguousarray(queries @ xb[start:start + self.block].T)
            heaps.addn(block.shape[1], faiss.swig_ptr(block), start, 0, -1)
        heaps.reorder()
        return scores, ids

    def self_join(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top k of every stored row against all stored rows (itself included): `self_join_topk`."""
        return self_join_topk(self._xb[:self.ntotal], k, self.join_block)


def build_index(vectors: np.ndarray, rows: np.ndarray, method: str = "exact",
                factory: Optional[str] = None, nprobe: Optional[int] = 16, chunk: int = 65_536,
                train_size: int = 1_000_000, seed: int = 0) -> faiss.Index:
    """Inner-product index over `vectors[rows]`, added chunk by chunk; ids are positions in rows.
    `nprobe` None: left to the caller (`tune_nprobe`)."""
    d = vectors.shape[1]
    if method == "exact":
        index = BlasFlatIP(d, len(rows))
    elif method == "flat":
        index = faiss.IndexFlatIP(d)
    elif method == "approx":
        factory = factory or default_factory(len(rows))
        index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:  # k-means on 40 points per list, 10 iterations: enough for IVF
            ivf.cp.niter = 10
            train_size = min(train_size, 40 * ivf.nlist)
        if not index.is_trained:
            pick = np.sort(np.random.default_rng(seed).choice(len(rows), min(len(rows), train_size),
                                                              replace=False))
            index.train(np.ascontiguousarray(vectors[rows[pick]], np.float32))
        if nprobe is not None:
            set_nprobe(index, factory, nprobe)
    else:
        raise ValueError(f"unknown kNN method '{method}' (exact, flat or approx)")
    for start, stop in _chunks(len(rows), chunk):
        index.add(np.ascontiguousarray(vectors[rows[start:stop]], np.float32))
    return index


def default_factory(n: int) -> str:
    """IVF with 4*sqrt(n) lists (faiss' guideline), distances within probed lists from float16
    copies of the vectors."""
    return f"IVF{max(1, int(4 * math.sqrt(n)))},SQfp16"


def _params(factory: str, nprobe: int) -> str:
    if "HNSW" in factory and "IVF" not in factory:
        return f"efSearch={max(64, 4 * nprobe)}"
    return f"nprobe={nprobe}"


def set_nprobe(index: faiss.Index, factory: str, nprobe: int) -> None:
    faiss.ParameterSpace().set_index_parameters(index, _params(factory, nprobe))


def _nprobe_limit(index: faiss.Index, factory: str) -> int:
    """The largest nprobe worth trying: every list (IVF), efSearch 4096 (HNSW), else the first."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        return ivf.nlist
    return 1024 if "HNSW" in factory else FIRST_NPROBE


def tune_nprobe(index: faiss.Index, factory: str, emb: Embeddings, rows: np.ndarray, k: int,
                dup_threshold: float, sample: int = 1000, seed: int = 1,
                target: float = TARGET_RECALL) -> tuple[int, dict]:
    """The smallest nprobe of 8, 16, 32, ... (up to the number of lists) whose recall@k against
    exact search on `sample` random queries reaches `target`; sets it on the index. Returns it
    and {"target_recall", "recall": {nprobe: recall@k of each value tried}}."""
    pick = _sample(rows, sample, seed)
    truth = exact_neighbours(emb, rows, pick, k, dup_threshold)
    limit, nprobe, tried = _nprobe_limit(index, factory), FIRST_NPROBE, {}
    while True:
        nprobe = min(nprobe, limit)
        set_nprobe(index, factory, nprobe)
        found, _ = search(index, emb.vectors, rows, pick, k, emb.hashes, dup_threshold)
        tried[str(nprobe)] = _recall(truth, np.where(found >= 0, rows[np.maximum(found, 0)], -1))
        if tried[str(nprobe)] >= target or nprobe >= limit:
            return nprobe, {"target_recall": target, "recall": tried}
        nprobe *= 2


def _keep(query_ids, ids, scores, hashes, dup_threshold):
    """Mask of acceptable neighbours: not self, not a byte-identical image, not a near-duplicate."""
    safe = np.where(ids >= 0, ids, 0)
    return ((ids >= 0) & (ids != query_ids[:, None]) & (scores < dup_threshold)
            & (hashes[safe] != hashes[query_ids][:, None]))


def search(index: faiss.Index, vectors: np.ndarray, rows: np.ndarray, query_pos: np.ndarray, k: int,
           hashes: np.ndarray, dup_threshold: float = DUP_THRESHOLD, extra: int = EXTRA,
           first: Optional[tuple[np.ndarray, np.ndarray]] = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k acceptable neighbours of `rows[query_pos]` as (positions in rows, scores); -1 pads.

    `first`: the queries' top `k + 1 + extra` (scores, ids) already found (the self-join), used
    in place of the first search; rows that need more are searched again with a larger K."""
    queries = np.ascontiguousarray(vectors[rows[query_pos]], np.float32)
    h = hashes[rows]
    out_ids = np.full((len(query_pos), k), -1, np.int64)
    out_scores = np.zeros((len(query_pos), k), np.float32)
    todo = np.arange(len(query_pos))
    ks = k + 1 + extra
    while len(todo):
        if first is not None:
            scores, ids = first
            first = None
        else:
            scores, ids = ties_by_id(*index.search(queries[todo], min(ks, index.ntotal)))
        keep = _keep(query_pos[todo], ids, scores, h, dup_threshold)
        order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
        got = np.take_along_axis(keep, order, 1)
        out_ids[todo] = np.where(got, np.take_along_axis(ids, order, 1), -1)
        out_scores[todo] = np.where(got, np.take_along_axis(scores, order, 1), 0)
        exhausted = (ids < 0).any(1) | (ks >= index.ntotal)
        todo = todo[(keep.sum(1) < k) & ~exhausted]
        ks *= 4
    return out_ids, out_scores


def find_neighbours(emb: Embeddings, k: int = 3, method: str = "auto",
                    dup_threshold: float = DUP_THRESHOLD, query_chunk: int = 4096,
                    factory: Optional[str] = None, nprobe: Optional[int] = None,
                    recall_sample: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    """K nearest acceptable neighbours of every valid row: (row ids [N, k], scores, stats).

    Invalid rows get -1. stats holds the method, timings and (approx) the nprobe used (tuned by
    `tune_nprobe` on `recall_sample` queries when None) and the recall@k measured against exact
    search on another `recall_sample` random queries.
    """
    rows = np.flatnonzero(emb.valid)
    if method == "auto":
        method = "exact" if len(rows) <= EXACT_LIMIT else "approx"
    if method == "approx":
        factory = factory or default_factory(len(rows))
    t0 = time.perf_counter()
    index = build_index(emb.vectors, rows, method, factory, nprobe, seed=seed)
    build_s = time.perf_counter() - t0
    tuning = None
    if method == "approx" and nprobe is None:
        nprobe, tuning = tune_nprobe(index, factory, emb, rows, k, dup_threshold, recall_sample, seed + 1)
        tuning["seconds"] = round(time.perf_counter() - t0 - build_s, 3)
    t1 = time.perf_counter()
    ids = np.full((len(emb.keys), k), -1, np.int64)
    scores = np.zeros((len(emb.keys), k), np.float32)
    joined = index.self_join(k + 1 + EXTRA) if method == "exact" else None
    for start, stop in _chunks(len(rows), query_chunk):
        pos = np.arange(start, stop)
        first = None if joined is None else (joined[0][start:stop], joined[1][start:stop])
        found, sc = search(index, emb.vectors, rows, pos, k, emb.hashes, dup_threshold, first=first)
        ids[rows[pos]] = np.where(found >= 0, rows[np.maximum(found, 0)], -1)
        scores[rows[pos]] = sc
    stats = {"method": method, "k": k, "images": len(rows), "dup_threshold": dup_threshold,
             "build_s": round(build_s, 3), "search_s": round(time.perf_counter() - t1, 3)}
    if method == "approx":
        stats.update(factory=factory, nprobe=nprobe)
        if tuning is not None:
            stats["nprobe_tuning"] = tuning
        stats["recall"] = measure_recall(emb, rows, ids, k, dup_threshold, recall_sample, seed)
    return ids, scores, stats


def _sample(rows: np.ndarray, sample: int, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).choice(len(rows), min(sample, len(rows)), replace=False))


def _recall(truth: np.ndarray, found: np.ndarray) -> float:
    hits = [len(set(t[t >= 0]) & set(a[a >= 0])) / max(1, (t >= 0).sum()) for t, a in zip(truth, found)]
    return round(float(np.mean(hits)), 4)


def measure_recall(emb: Embeddings, rows: np.ndarray, ids: np.ndarray, k: int,
                   dup_threshold: float, sample: int = 1000, seed: int = 0,
                   chunk: int = 65_536) -> float:
    """recall@k of `ids` against exact search, averaged over `sample` random valid queries."""
    pick = _sample(rows, sample, seed)
    return _recall(exact_neighbours(emb, rows, pick, k, dup_threshold, chunk), ids[rows[pick]])


def exact_neighbours(emb: Embeddings, rows: np.ndarray, pick: np.ndarray, k: int,
                     dup_threshold: float, chunk: int = 65_536) -> np.ndarray:
    """Exact top-k acceptable neighbours (row ids, -1 pads) of `rows[pick]` among `rows`.

    Streams the vectors in chunks (exact search per chunk, merged), so checking an approximate
    index over a set larger than memory needs no second full index.
    """
    queries = np.ascontiguousarray(emb.vectors[rows[pick]], np.float32)
    h = emb.hashes[rows]
    ks = k + 1 + 4
    while True:
        best_s = np.full((len(pick), 0), -np.inf, np.float32)
        best_i = np.zeros((len(pick), 0), np.int64)
        for start, stop in _chunks(len(rows), chunk):
            block = BlasFlatIP(emb.vectors.shape[1], stop - start)
            block.add(emb.vectors[rows[start:stop]])
            s, i = block.search(queries, min(ks, stop - start))
            best_s, best_i = np.hstack([best_s, s]), np.hstack([best_i, np.where(i >= 0, i + start, -1)])
            order = np.argsort(-best_s, axis=1, kind="stable")[:, :ks]
            best_s, best_i = np.take_along_axis(best_s, order, 1), np.take_along_axis(best_i, order, 1)
        keep = _keep(pick, best_i, best_s, h, dup_threshold)
        if (keep.sum(1) >= k).all() or ks >= len(rows):
            break
        ks *= 4
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    truth = np.where(np.take_along_axis(keep, order, 1), np.take_along_axis(best_i, order, 1), -1)
    return np.where(truth >= 0, rows[np.maximum(truth, 0)], -1)


def brute_force(vectors: np.ndarray, k: int, hashes: Optional[np.ndarray] = None,
                dup_threshold: float = DUP_THRESHOLD) -> tuple[np.ndarray, np.ndarray]:
    """Reference in plain numpy (all pairs in memory): for tests and small checks."""
    sims = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    n = len(vectors)
    bad = np.eye(n, dtype=bool) | (sims >= dup_threshold)
    if hashes is not None:
        bad |= hashes[:, None] == hashes[None, :]
    sims[bad] = -np.inf
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(sims, order, 1)
    return np.where(np.isfinite(top), order, -1), np.where(np.isfinite(top), top, 0)


def write_neighbours(src: str | Path, dst: str | Path, emb: Embeddings, ids: np.ndarray,
                     scores: np.ndarray, max_count: int = 10_000, max_bytes: int = 1 << 30,
                     extra_manifest: Optional[dict] = None, progress: bool = False) -> dict:
    """Copy `src` into `dst` adding `nn.json`; samples whose image is unreadable are skipped and
    counted. Resumes an interrupted `dst`; builds `dst/keys.tsv` when complete. `progress`: a
    bar on stderr (samples copied of the source's total)."""
    from compclip.cli import progress as bar_of
    src_manifest = read_manifest(src)
    features = dict(src_manifest.get("features", {}))
    features["neighbours"] = int(ids.shape[1])
    writer = ShardSetWriter(dst, max_count=max_count, max_bytes=max_bytes, features=features,
                            order=inherited_order(src, src_manifest))
    writer.manifest.update({k: src_manifest[k] for k in CARRIED_KEYS if k in src_manifest})
    if extra_manifest:
        writer.manifest.update(extra_manifest)
    start = writer.inputs_done
    total = sum(s["samples"] for s in src_manifest["shards"])
    with bar_of(total=total, initial=min(start, total), desc="knn write", unit="sample",
                unit_scale=True, quiet=not progress) as bar:
        manifest = _copy_with_neighbours(src, writer, emb, ids, scores, start, bar)
    if not manifest.get("complete"):
        return manifest
    KeyIndex.build(dst)
    return manifest


def _copy_with_neighbours(src, writer: ShardSetWriter, emb: Embeddings, ids: np.ndarray,
                          scores: np.ndarray, start: int, bar) -> dict:
    row = -1
    for url in shard_urls(src):
        for raw in iter_raw_samples(url):
            row += 1
            if row < start:
                continue
            bar.update(1)
            if raw["__key__"] != emb.keys[row]:
                raise SchemaError(f"{url}: sample {row} is '{raw['__key__']}' but the embeddings "
                                  f"say '{emb.keys[row]}'; re-embed {src}")
            if not emb.valid[row]:
                writer.skip("corrupt_image")
                continue
            nn = [{"key": emb.keys[j], "score": round(float(s), 6)}
                  for j, s in zip(ids[row], scores[row]) if j >= 0]
            extra = {"nn.json": json.dumps(nn, separators=(",", ":")).encode()} if nn else {}
            writer.add_raw(raw, extra=extra)
    return writer.close()


def run_knn(src: str | Path, dst: str | Path, scorer, k: int = 3, method: str = "auto",
            batch_size: int = 256, dtype: str = "float16", dup_threshold: float = DUP_THRESHOLD,
            factory: Optional[str] = None, nprobe: Optional[int] = None, work_dir: Optional[str | Path] = None,
            max_count: int = 10_000, max_bytes: int = 1 << 30, workers: Optional[int] = None,
            progress: bool = False) -> dict:
    """Embed `src` (`workers` loader processes, progress on stderr), search, write `dst` with
    nn.json and keys.tsv; returns the manifest."""
    dst = Path(dst)
    work = Path(work_dir) if work_dir else dst / ".knn"
    emb = embed_shard_set(src, scorer, work / "embeddings.npy", batch_size, dtype, workers, progress)
    if progress:
        print(f"knn search: {k} nearest neighbours of {len(emb.keys)} images ({method}) ...",
              file=sys.stderr, flush=True)
    t0 = time.time()
    ids, scores, stats = find_neighbours(emb, k, method, dup_threshold, factory=factory, nprobe=nprobe)
    if progress:
        print(f"knn search: done in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    stats.update(scorer=getattr(scorer, "name", "?"), embeddings=str(emb.path), not_embedded=emb.skipped)
    log.info("kNN: %s", stats)
    return write_neighbours(src, dst, emb, ids, scores, max_count, max_bytes, {"knn": stats},
                            progress=progress)


def neighbour_keys(ids: np.ndarray, keys: Sequence[str]) -> list[list[str]]:
    return [[keys[j] for j in row if j >= 0] for row in ids]
