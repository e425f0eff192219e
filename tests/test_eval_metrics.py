"""Metric rules against brute-force loops on random embeddings with many exact ties."""
import itertools
import random

import numpy as np
import pytest
import torch

from compclip.eval import metrics

# Unit vectors whose pairwise dot products are exact in fp32 and fp64 whatever the summation
# order (entries 0, +-1, +-1/2), so that ties are real ties and brute force agrees bit for bit.
POOL = [list(v) for v in np.eye(4)] + [[.5, .5, .5, .5], [.5, -.5, .5, -.5], [.5, .5, -.5, -.5], [-.5, .5, .5, -.5]]


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def draw(rng, n, k=len(POOL)):
    vecs = [POOL[rng.randrange(k)] for _ in range(n)]
    return vecs, torch.tensor(vecs, dtype=torch.float32)


@pytest.mark.parametrize("seed", range(5))
def test_triplet_matches_brute_force_with_ties(seed):
    rng = random.Random(seed)
    (p1, tp1), (p2, tp2), (n, tn), (im, tim) = (draw(rng, 300, 5) for _ in range(4))
    got = metrics.triplet_correct(tp1, tp2, tn, tim)
    ties = 0
    for i in range(300):
        s1, s2, sn = dot(im[i], p1[i]), dot(im[i], p2[i]), dot(im[i], n[i])
        ties += (s1 == sn) + (dot(p1[i], p2[i]) == dot(p1[i], n[i]))
        assert got["i2t"][i] == (s1 > sn and s2 > sn)
        assert got["p1_n"][i] == (s1 > sn) and got["p2_n"][i] == (s2 > sn)
        spp = dot(p1[i], p2[i])
        assert got["t2t"][i] == (spp > dot(p1[i], n[i]) and spp > dot(p2[i], n[i]))
    assert ties > 20  # the ties really were exercised
    text = metrics.triplet_correct(tp1, tp2, tn)  # text-only: T2T and its two halves (P1-N, P2-N)
    assert set(text) == {"t2t", "t2t_p1_n", "t2t_p2_n"}
    for i in range(300):
        spp = dot(p1[i], p2[i])
        assert text["t2t_p1_n"][i] == (spp > dot(p1[i], n[i])) and text["t2t_p2_n"][i] == (spp > dot(p2[i], n[i]))
        assert got["t2t_p1_n"][i] == text["t2t_p1_n"][i] and got["t2t_p2_n"][i] == text["t2t_p2_n"][i]


@pytest.mark.parametrize("seed", range(5))
def test_pair_and_bivlc_match_brute_force_with_ties(seed):
    rng = random.Random(seed)
    (c0, tc0), (c1, tc1), (i0, ti0), (i1, ti1) = (draw(rng, 300, 5) for _ in range(4))
    pair = metrics.pair_correct(ti0, tc0, tc1)
    got = metrics.bivlc_correct(tc0, tc1, ti0, ti1)
    for k in range(300):
        s = {(a, b): dot(c, i) for (a, c), (b, i) in itertools.product(
            [(0, c0[k]), (1, c1[k])], [(0, i0[k]), (1, i1[k])])}
        assert pair[k] == (s[0, 0] > s[1, 0])
        i2t_pos, i2t_neg = s[0, 0] > s[1, 0], s[1, 1] > s[0, 1]
        t2i_pos, t2i_neg = s[0, 0] > s[0, 1], s[1, 1] > s[1, 0]
        assert (got["i2t_pos"][k], got["i2t_neg"][k], got["t2i_pos"][k], got["t2i_neg"][k]) == \
            (i2t_pos, i2t_neg, t2i_pos, t2i_neg)
        assert got["i2t"][k] == (i2t_pos and i2t_neg) and got["t2i"][k] == (t2i_pos and t2i_neg)
        assert got["group"][k] == (i2t_pos and i2t_neg and t2i_pos and t2i_neg)


@pytest.mark.parametrize("answer", [0, 1])
def test_argmax_first_maximum_wins(answer):
    rng = np.random.default_rng(answer)
    scores = rng.integers(0, 3, size=(500, 5 if answer == 0 else 2)).astype(np.float32)  # many ties
    got = metrics.argmax_correct(scores, answer)
    for row, ok in zip(scores, got):
        best = max(row)
        first = min(j for j, v in enumerate(row) if v == best)
        assert ok == (first == answer)
    at_max = scores.max(1)[:, None] == scores
    tied_with_answer = at_max[:, answer] & (at_max.sum(1) > 1)
    assert tied_with_answer.any()
    # VG ([false, true], answer 1): a tie is wrong; Order ([true, ...], answer 0): a tie is right.
    assert (got[tied_with_answer] == (answer == 0)).all()


def test_macro_filters_and_per_group():
    mask = np.array([1, 1, 0, 0, 1, 0, 1, 1, 1, 1], dtype=bool)
    groups = ["a"] * 2 + ["b"] * 3 + ["c"] * 5
    table = metrics.per_group(mask, groups)
    assert table == {"a": (1.0, 2), "b": (1 / 3, 3), "c": (0.8, 5)}
    assert metrics.macro(table)[0] == pytest.approx((1 + 1 / 3 + 0.8) / 3)
    assert metrics.macro(table, min_count=3) == (pytest.approx((1 / 3 + 0.8) / 2), ["b", "c"])
    assert metrics.macro(table, exclude={"c"})[1] == ["a", "b"]


@pytest.mark.parametrize("seed", range(3))
def test_recall_at_k_matches_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    sim = rng.integers(0, 4, size=(30, 90)).astype(np.float32)
    positives = [set(rng.choice(90, size=3, replace=False).tolist()) for _ in range(30)]
    got = metrics.recall_at_k(sim, positives, (1, 5, 10))
    for k in (1, 5, 10):
        hits = 0
        for row, pos in zip(sim, positives):
            best = max(row[j] for j in pos)
            beaten_or_tied = sum(1 for j, v in enumerate(row) if j not in pos and v >= best)
            hits += beaten_or_tied < k
        assert got[k] == hits / 30
