"""Metric rules shared by the benchmarks, exactly as the reference code defines them.

All similarities are dot products of L2-normalised embeddings (cosine similarity), computed in
the embeddings' precision (fp32 by default; fp16 / bf16 with `--precision`, see `eval.precision`). Strict
comparisons (`>`) count a tie as wrong (VISLA, SugarCrepe, SugarCrepe++, BiVLC). ARO scores by
`numpy.argmax`, which returns the first maximum: with options [false, true] (VG-Relation,
VG-Attribution) a tie picks the false caption (wrong); with [true, perturbations...] (Order) a
tie picks the true caption (correct). Accuracies are fractions in [0, 1].
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Optional

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor


def rowwise_sim(a: Tensor, b: Tensor) -> np.ndarray:
    """s(a_i, b_i) for paired rows, computed in the embeddings' dtype (fp16 / bf16 when scoring at
    that precision, so the scores are rounded to that grid) and returned as float32 numpy values
    (exact: every fp16 / bf16 value is a float32 value, so ties are kept)."""
    return (a * b).sum(-1).float().numpy()


def triplet_correct(p1: Tensor, p2: Tensor, n: Tensor, image: Optional[Tensor] = None) -> dict[str, np.ndarray]:
    """VISLA / SugarCrepe++ per-item correctness (strict).

    Text only (every scorer): t2t: s(P1,P2) > s(P1,N) and s(P1,P2) > s(P2,N); its two halves
    t2t_p1_n: s(P1,P2) > s(P1,N) and t2t_p2_n: s(P1,P2) > s(P2,N) (the text-only P1-N / P2-N
    columns: the comparison the reference's ULM script names `p1_p2 > p1_ref` / `p1_p2 > p2_ref`).
    With an image: i2t: s(I,P1) > s(I,N) and s(I,P2) > s(I,N); p1_n / p2_n its single comparisons.
    """
    s_pp, s_1n, s_2n = rowwise_sim(p1, p2), rowwise_sim(p1, n), rowwise_sim(p2, n)
    out = {"t2t": (s_pp > s_1n) & (s_pp > s_2n), "t2t_p1_n": s_pp > s_1n, "t2t_p2_n": s_pp > s_2n}
    if image is not None:
        s_i1, s_i2, s_in = rowwise_sim(image, p1), rowwise_sim(image, p2), rowwise_sim(image, n)
        out = {"i2t": (s_i1 > s_in) & (s_i2 > s_in), "p1_n": s_i1 > s_in, "p2_n": s_i2 > s_in, **out}
    return out


def pair_correct(image: Tensor, pos: Tensor, neg: Tensor) -> np.ndarray:
    """SugarCrepe: s(I,pos) > s(I,neg), strict."""
    return rowwise_sim(image, pos) > rowwise_sim(image, neg)


def bivlc_correct(c0: Tensor, c1: Tensor, i0: Tensor, i1: Tensor) -> dict[str, np.ndarray]:
    """BiVLC per instance (I0, C0 positive; I1, C1 negative), strict.

    i2t_pos: s(C0,I0) > s(C1,I0); i2t_neg: s(C1,I1) > s(C0,I1); t2i_pos: s(C0,I0) > s(C0,I1);
    t2i_neg: s(C1,I1) > s(C1,I0); i2t, t2i: both of their pair; group: i2t and t2i.
    """
    s00, s01 = rowwise_sim(c0, i0), rowwise_sim(c0, i1)
    s10, s11 = rowwise_sim(c1, i0), rowwise_sim(c1, i1)
    out = {"i2t_pos": s00 > s10, "i2t_neg": s11 > s01, "t2i_pos": s00 > s01, "t2i_neg": s11 > s10}
    out["i2t"] = out["i2t_pos"] & out["i2t_neg"]
    out["t2i"] = out["t2i_pos"] & out["t2i_neg"]
    out["group"] = out["i2t"] & out["t2i"]
    return {k: out[k] for k in ("i2t", "t2i", "group", "i2t_pos", "i2t_neg", "t2i_pos", "t2i_neg")}


def option_scores(image: Tensor, options: Tensor) -> np.ndarray:
    """[N, K] scores of N images against their K caption options ([N, K, D])."""
    import torch
    return torch.einsum("nd,nkd->nk", image, options).float().numpy()


def argmax_correct(scores: np.ndarray, answer: int) -> np.ndarray:
    """numpy argmax (first maximum wins) equals the answer's option index."""
    return np.argmax(scores, axis=-1) == answer


def accuracy(mask: np.ndarray) -> float:
    return float(np.mean(mask)) if len(mask) else float("nan")


def per_group(mask: np.ndarray, groups: Iterable[str]) -> dict[str, tuple[float, int]]:
    """{group: (accuracy, count)} in sorted group order."""
    groups = np.asarray(list(groups))
    return {g: (accuracy(mask[groups == g]), int((groups == g).sum())) for g in np.unique(groups)}


def group_table(masks: Mapping[str, np.ndarray], groups: Iterable[str]) -> dict[str, dict[str, float]]:
    """{group: {metric: accuracy, ..., "n": count}} for several per-item masks."""
    groups = np.asarray(list(groups))
    return {str(g): {k: accuracy(m[groups == g]) for k, m in masks.items()} | {"n": int((groups == g).sum())}
            for g in np.unique(groups)}


def macro(table: Mapping[str, tuple[float, int]], min_count: int = 0,
          exclude: Iterable[str] = ()) -> tuple[float, list[str]]:
    """Mean of per-category accuracies over the categories kept; returns (macro, kept)."""
    drop = set(exclude)
    kept = [g for g, (_, n) in table.items() if n >= min_count and g not in drop]
    return (float(np.mean([table[g][0] for g in kept])) if kept else float("nan")), kept


def recall_at_k(sim: np.ndarray, positives: list[set[int]], ks=(1, 5, 10)) -> dict[int, float]:
    """Query i is a hit at k if fewer than k wrong candidates score >= its best positive:
    a tie with a wrong candidate counts against the query."""
    hits = {k: 0 for k in ks}
    for i, pos in enumerate(positives):
        row, idx = sim[i], np.fromiter(pos, dtype=np.int64)
        wrong = np.ones(len(row), dtype=bool)
        wrong[idx] = False
        best = int((row[wrong] >= row[idx].max()).sum())
        for k in ks:
            hits[k] += best < k
    return {k: hits[k] / len(positives) for k in ks}
