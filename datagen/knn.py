"""Nearest-neighbour hard images (NegCLIP): embed a shard set, find each image's K nearest, and
write them into a copy of the set as `nn.json`.

1. `embed_shard_set`: every anchor image, decoded robustly (corrupt ones are marked invalid and
   later skipped and counted), is embedded by an `OpenClipScorer` in batches and written row by
   row into a float16 (or float32) `.npy` memmap, so the set may exceed memory. Reading,
   decoding and preprocessing run in DataLoader workers (`datagen.knn_images`), in row order,
   so the memmap does not depend on the worker count. A sidecar JSON holds keys, a content
   hash of each image's bytes, and validity.
2. `find_neighbours`: cosine similarity (embeddings are L2-normalised, so inner product) with
   faiss. `method="exact"` (the default up to `EXACT_LIMIT` images) is a self-join: each block
   pair's product once with numpy's BLAS (half the N x N products), top k per row by
   (score, then smaller id) (`self_join_topk`; retries use `BlasFlatIP`, query chunks against
   all rows, top k in faiss' heaps; same answers as `faiss.IndexFlatIP`, `method="flat"`, up to
   the order of exact ties, but faster here); `method="approx"` is any
   faiss index factory string, default
   `IVF{4*sqrt(N)},Flat` probed with `nprobe` lists, whose recall against exact search is
   measured on a sample of queries and reported. Vectors are added to the index in chunks read
   from the memmap.
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

import ctypes
import hashlib
import json
import logging
import math
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import faiss
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from datagen.order import inherited_order
from datagen.schema import SchemaError
from datagen.shards import (CARRIED_KEYS, KeyIndex, ShardSetWriter, iter_raw_samples,
                            read_manifest, shard_urls)

log = logging.getLogger(__name__)

EXACT_LIMIT = 300_000
DUP_THRESHOLD = 0.999
EXTRA = 4  # candidates searched beyond k + 1 (itself), for exclusions
ONE_PASS_SHARE = 1 / 32  # self-join: above this share of a block passing the lowest threshold, a second pass


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


def image_hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


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
    `preprocess` and `encode_image_tensors` (OpenClipScorer) gets its preprocessing done in the
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
    from datagen.knn_images import default_workers, image_loader
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


_SIGN = np.uint32(0x80000000)
_LOW = np.uint64(0xFFFFFFFF)


def _rank_keys(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """uint64 keys ordered like (score descending, id ascending): the float's bits made monotonic
    in the high half, the complement of the id in the low half; 0 is below every key."""
    bits = (np.asarray(scores, np.float32) + np.float32(0)).view(np.uint32)  # -0.0 -> +0.0
    high = np.where(bits & _SIGN, ~bits, bits | _SIGN).astype(np.uint64)
    return (high << np.uint64(32)) | (_LOW - np.asarray(ids).astype(np.uint64))


def _ties_by_id(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows re-ordered by (score descending, id ascending), empty slots (-1) last: faiss' heaps
    list equal scores by descending id, the self-join and numpy's stable argsort ascending."""
    keys = np.where(ids >= 0, _rank_keys(scores, np.maximum(ids, 0)), np.uint64(0))
    order = np.argsort(keys, axis=1, kind="stable")[:, ::-1]
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def _key_scores(keys: np.ndarray) -> np.ndarray:
    high = (keys >> np.uint64(32)).astype(np.uint32)
    return np.where(high & _SIGN, high & ~_SIGN, ~high).astype(np.uint32).view(np.float32)


def _blas_threads() -> int:
    return max([1] + [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"])


def _syrk() -> Optional[Callable[[np.ndarray, np.ndarray], None]]:
    """`syrk(x, out)`: the lower triangle, diagonal included, of `x @ x.T` into the row-major
    `out` (its strict upper triangle untouched), by BLAS `ssyrk` (half a square product's work)
    from scipy, which scikit-learn brings; None without it (the diagonal block pairs then use a
    full product). It is scipy's Cython BLAS routine (the one `scipy.linalg.blas.ssyrk` calls,
    so the same products), called through ctypes, which lets go of the GIL: scipy's Python
    wrapper holds it for the whole product, which made the join's threads wait for each other."""
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        return None
    capsule = cython_blas.__pyx_capi__["ssyrk"]
    ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
    ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
    ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
    ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = ctypes.pythonapi.PyCapsule_GetPointer(capsule, ctypes.pythonapi.PyCapsule_GetName(capsule))
    integer, real, ptr = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float), ctypes.c_void_p
    fortran = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, integer, integer, real, ptr,
                               integer, real, ptr, integer)(address)

    def syrk(x: np.ndarray, out: np.ndarray) -> None:
        """C = A^T A of the column-major A = X^T (X's own memory): syrk's upper triangle,
        column-major, is the row-major lower one of `out`."""
        assert x.dtype == out.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous
        m, d = x.shape
        assert out.shape == (m, m) and max(m, d) < 2 ** 31
        i = lambda v: ctypes.byref(ctypes.c_int(v))  # noqa: E731
        f = lambda v: ctypes.byref(ctypes.c_float(v))  # noqa: E731
        fortran(b"U", b"T", i(m), i(d), f(1.0), x.ctypes.data, i(d), f(0.0), out.ctypes.data, i(m))
    return syrk


def _passing(prod: np.ndarray, thr_i: np.ndarray, thr_j: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Flat positions in `prod` of (at least) every product that reaches its row's threshold
    (`thr_i`) or its column's (`thr_j`); NaN never passes. One comparison with the lowest
    threshold of either, a scalar (numpy compares with a scalar ~3x faster than with a
    broadcast vector of thresholds); where more than `ONE_PASS_SHARE` of the block passes it,
    one comparison with each product's own bound, the lower of its row's and its column's."""
    np.greater_equal(prod, min(thr_i.min(), thr_j.min()), out=mask)
    if np.count_nonzero(mask) > ONE_PASS_SHARE * prod.size:
        np.greater_equal(prod, thr_i[:, None], out=mask)
        mask |= prod >= thr_j[None, :]
    return np.flatnonzero(mask)


def self_join_topk(xb: np.ndarray, k: int, block: int = 2048, probe: int = 256,
                   margin: float = 1e-3, threads: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top k by inner product of every row of `xb` against all rows (itself included),
    computing each pair's product once: (scores [N, k] best first, ids; -1 / -inf pad).

    Blocks of `block` rows: for block pairs i <= j one product `X_i X_j^T` serves the rows of i
    (its rows) and, when i < j, the rows of j (its columns), so the products cost half of the
    full N x N. A diagonal pair computes one triangle of `X_i X_i^T` (`_syrk`; the other holds
    NaN), each product (a, b), a >= b, serving rows a and b. Selection keeps, per row, the k
    best (score, id) pairs as uint64 keys ordered like (score descending, id ascending), so ties
    go to the smaller id whatever the block order (as numpy's stable argsort of the scores). A
    product enters a row's candidates only if it is >= the row's threshold: the k-th best kept
    so far, primed before the loop with the k-th best against `probe` evenly spaced rows (less
    `margin` times the norms, as those products are rounded in another shape), always a lower
    bound of the true k-th best, so nothing that belongs is dropped. Diagonal block pairs go
    first, so every row's threshold is the k-th best of its own block before the off-diagonal
    pairs. Selection is one comparison pass per block (`_passing`), the exact thresholds on
    what passes, and a merge of the few that remain. Block pairs run in `threads` threads
    (default: numpy's BLAS thread count), each product on one BLAS thread.
    """
    xb = np.ascontiguousarray(xb, np.float32)
    n = len(xb)
    k = min(k, n)
    best = np.zeros((n, k), np.uint64)
    thr = np.full(n, -np.inf, np.float32)
    if k == 0:
        return np.empty((n, 0), np.float32), np.empty((n, 0), np.int64)
    syrk = _syrk()  # imported before the thread limit below, so that it covers its BLAS too
    sample = xb[::max(1, n // probe)][:probe]
    primed = len(sample) >= k
    reach = margin * float(np.linalg.norm(sample, axis=1).max()) if primed else 0.0

    def prime(start: int) -> None:
        """Rows [start, start + 8192): the k-th best against the sample, less the margin (the
        margin scales with the norms, as the rounding of a product does)."""
        chunk = xb[start:start + 8192]
        part = chunk @ sample.T
        thr[start:start + 8192] = (np.partition(part, len(sample) - k, axis=1)[:, len(sample) - k]
                                   - reach * np.linalg.norm(chunk, axis=1))

    def candidates(rows: np.ndarray, keys: np.ndarray, i0: int, j0: int, m: int):
        """Per row (ascending), its best k of the new candidate keys: (rows, [rows, <= k] keys,
        0 = none). Outside the lock; `rows` lie in [i0, i0 + m) or [j0, j0 + m), so a stable
        sort of their 16-bit local numbers (a radix sort in numpy) groups them in linear time."""
        local_rows = rows - i0 if j0 == i0 else np.where(rows >= j0, rows - j0 + m, rows - i0)
        order = np.argsort(local_rows.astype(np.uint16 if 2 * m <= 65536 else np.int64), kind="stable")
        rows, keys = rows[order], keys[order]
        first = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
        counts = np.diff(np.append(first, len(rows)))
        width = int(counts.max())
        pad = np.zeros((len(first), width), np.uint64)
        pad[np.repeat(np.arange(len(first)), counts), np.arange(len(rows)) - np.repeat(first, counts)] = keys
        if width > k:
            pad = np.partition(pad, width - k, axis=1)[:, width - k:]
        return rows[first], pad

    def merge(uniq: np.ndarray, new: np.ndarray) -> None:
        """Each row's k best of its kept and its new candidates; its threshold raised to the
        k-th of them once it has k."""
        top = np.partition(np.concatenate([best[uniq], new], axis=1), new.shape[1], axis=1)[:, new.shape[1]:]
        best[uniq] = top
        low = top.min(1)
        full = uniq[low > 0]
        thr[full] = np.maximum(thr[full], _key_scores(low[low > 0]))

    side = min(n, block)
    local, lock = threading.local(), threading.Lock()

    def product(i0: int, j0: int) -> np.ndarray:
        """X_i X_j^T in this thread's buffer. On the diagonal (with syrk) only its lower
        triangle, diagonal included, is computed, into a buffer whose strict upper triangle
        holds NaN, which passes no threshold."""
        if not hasattr(local, "prod"):
            local.prod, local.mask, local.diag = np.empty(side * side, np.float32), np.empty(side * side, bool), {}
        xi, xj = xb[i0:i0 + block], xb[j0:j0 + block]
        if i0 == j0 and syrk is not None:
            m = len(xi)
            if m not in local.diag:
                local.diag[m] = np.triu(np.full((m, m), np.nan, np.float32), 1)
            syrk(xi, local.diag[m])
            return local.diag[m]
        return np.matmul(xi, xj.T, out=local.prod[:len(xi) * len(xj)].reshape(len(xi), len(xj)))

    def join(pair: tuple[int, int]) -> None:
        """The candidates of one block pair: product (a, b) for row i0 + a (`by_i`) and, off
        the diagonal or below it, for row j0 + b (`by_j`)."""
        i0, j0 = pair
        prod = product(i0, j0)
        thr_i, thr_j = thr[i0:i0 + prod.shape[0]].copy(), thr[j0:j0 + prod.shape[1]].copy()
        flat = _passing(prod, thr_i, thr_j, local.mask[:prod.size].reshape(prod.shape))
        a, b = np.divmod(flat, prod.shape[1])
        vals = prod.ravel()[flat]
        by_i, by_j = vals >= thr_i[a], vals >= thr_j[b]
        if j0 == i0 and syrk is not None:  # the triangle: (a, a) serves row a once
            by_j &= a != b
        elif j0 == i0:  # the full product: (b, a) is there too, so rows only
            by_j[:] = False
        rows = np.concatenate([a[by_i] + i0, b[by_j] + j0])
        if not len(rows):
            return
        ids = np.concatenate([b[by_i] + j0, a[by_j] + i0])
        keys = _rank_keys(np.concatenate([vals[by_i], vals[by_j]]), ids)
        uniq, new = candidates(rows, keys, i0, j0, prod.shape[0])
        with lock:
            merge(uniq, new)

    starts = range(0, n, block)
    pairs = [(i, i) for i in starts] + [(i, j) for i in starts for j in starts if j > i]
    threads = threads or _blas_threads()
    # block pairs in `threads` threads, each with a one-thread BLAS: no BLAS synchronisation per
    # product, and the selection runs in parallel as well (numpy releases the GIL). A thread may
    # read a threshold another is raising: either value is a lower bound, so the answer holds.
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        if primed:
            list(pool.map(prime, range(0, n, 8192)))
        list(pool.map(join, pairs))
    best = np.sort(best, axis=1)[:, ::-1]
    empty = best == 0
    scores = np.where(empty, -np.inf, _key_scores(best)).astype(np.float32)
    ids = np.where(empty, -1, (_LOW - (best & _LOW)).astype(np.int64))
    return scores, ids


def build_index(vectors: np.ndarray, rows: np.ndarray, method: str = "exact",
                factory: Optional[str] = None, nprobe: int = 16, chunk: int = 65_536,
                train_size: int = 1_000_000, seed: int = 0) -> faiss.Index:
    """Inner-product index over `vectors[rows]`, added chunk by chunk; ids are positions in rows."""
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
        faiss.ParameterSpace().set_index_parameters(index, _params(factory, nprobe))
    else:
        raise ValueError(f"unknown kNN method '{method}' (exact, flat or approx)")
    for start, stop in _chunks(len(rows), chunk):
        index.add(np.ascontiguousarray(vectors[rows[start:stop]], np.float32))
    return index


def default_factory(n: int) -> str:
    """IVF with 4*sqrt(n) lists (faiss' guideline), exact distances within probed lists."""
    return f"IVF{max(1, int(4 * math.sqrt(n)))},Flat"


def _params(factory: str, nprobe: int) -> str:
    if "HNSW" in factory and "IVF" not in factory:
        return f"efSearch={max(64, 4 * nprobe)}"
    return f"nprobe={nprobe}"


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
            scores, ids = _ties_by_id(*index.search(queries[todo], min(ks, index.ntotal)))
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
                    factory: Optional[str] = None, nprobe: int = 16, recall_sample: int = 1000,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    """K nearest acceptable neighbours of every valid row: (row ids [N, k], scores, stats).

    Invalid rows get -1. stats holds the method, timings and (approx) measured recall@k against
    exact search on `recall_sample` random queries.
    """
    rows = np.flatnonzero(emb.valid)
    if method == "auto":
        method = "exact" if len(rows) <= EXACT_LIMIT else "approx"
    t0 = time.perf_counter()
    index = build_index(emb.vectors, rows, method, factory, nprobe, seed=seed)
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
             "build_s": round(t1 - t0, 3), "search_s": round(time.perf_counter() - t1, 3)}
    if method == "approx":
        stats.update(factory=factory or default_factory(len(rows)), nprobe=nprobe)
        stats["recall"] = measure_recall(emb, rows, ids, k, dup_threshold, recall_sample, seed)
    return ids, scores, stats


def measure_recall(emb: Embeddings, rows: np.ndarray, ids: np.ndarray, k: int,
                   dup_threshold: float, sample: int = 1000, seed: int = 0,
                   chunk: int = 65_536) -> float:
    """recall@k of `ids` against exact search, averaged over `sample` random valid queries.

    The exact answer streams the vectors in chunks (exact search per chunk, merged), so checking
    an approximate index over a set larger than memory needs no second full index.
    """
    pick = np.sort(np.random.default_rng(seed).choice(len(rows), min(sample, len(rows)), replace=False))
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
    truth = np.where(truth >= 0, rows[np.maximum(truth, 0)], -1)
    hits = [len(set(t[t >= 0]) & set(a[a >= 0])) / max(1, (t >= 0).sum())
            for t, a in zip(truth, ids[rows[pick]])]
    return round(float(np.mean(hits)), 4)


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
            factory: Optional[str] = None, nprobe: int = 16, work_dir: Optional[str | Path] = None,
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
