"""The exact kNN self-join: every row's top k by inner product against all rows, each pair's
product computed once (`self_join_topk`), and the (score descending, id ascending) order of ties
shared with the faiss searches of `datagen.images.knn` (`ties_by_id`).

The diagonal block pairs take one triangle of their product by BLAS `ssyrk`
(`compclip.compat.blas.ssyrk`: scipy's routine reached through ctypes in the checked scipy
versions, numpy's full product otherwise). The answers are the same either way.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from compclip.compat.blas import ssyrk

ONE_PASS_SHARE = 1 / 32  # self-join: above this share of a block passing the lowest threshold, a second pass


_SIGN = np.uint32(0x80000000)
_LOW = np.uint64(0xFFFFFFFF)


def _rank_keys(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """uint64 keys ordered like (score descending, id ascending): the float's bits made monotonic
    in the high half, the complement of the id in the low half; 0 is below every key."""
    bits = (np.asarray(scores, np.float32) + np.float32(0)).view(np.uint32)  # -0.0 -> +0.0
    high = np.where(bits & _SIGN, ~bits, bits | _SIGN).astype(np.uint64)
    return (high << np.uint64(32)) | (_LOW - np.asarray(ids).astype(np.uint64))


def ties_by_id(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    full N x N. A diagonal pair computes one triangle of `X_i X_i^T` (`ssyrk`; the other holds
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
    syrk = ssyrk()  # imported before the thread limit below, so that it covers its BLAS too
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
        """X_i X_j^T in this thread's buffer. On the diagonal only its lower
        triangle, diagonal included, is computed, into a buffer whose strict upper triangle
        holds NaN, which passes no threshold."""
        if not hasattr(local, "prod"):
            local.prod, local.mask, local.diag = np.empty(side * side, np.float32), np.empty(side * side, bool), {}
        xi, xj = xb[i0:i0 + block], xb[j0:j0 + block]
        if i0 == j0:
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
        if j0 == i0:  # the triangle: (a, a) serves row a once
            by_j &= a != b
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
