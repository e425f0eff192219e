"""VISLA's text-only P1-N / P2-N columns on the real files, against a brute-force reference.

The scorer embeds a caption as its word counts (hashed into 4096 integer dimensions, left
unnormalised), so every similarity is an exact integer whatever the summation order and the
reference can compare with Python integers; identical word multisets tie exactly.
"""
import csv
import re
import zlib
from collections import Counter

import pytest
import torch

from compclip.eval.api import run
from compclip.eval.scorer import TextScorer

DIM = 4096


def words(text):
    return re.findall(r"[a-z]+", text.lower())


class WordCounts(TextScorer):
    name = "word-counts"

    def encode_texts(self, texts):
        out = torch.zeros(len(texts), DIM)
        for i, t in enumerate(texts):
            for w in words(t):
                out[i, zlib.crc32(w.encode()) % DIM] += 1
        return out


def bag(text):
    return Counter(zlib.crc32(w.encode()) % DIM for w in words(text))


def dot(a, b):
    return sum(v * b[k] for k, v in a.items())


@pytest.fixture(scope="module")
def real_root(tmp_path_factory, shared_benchmarks):
    root = tmp_path_factory.mktemp("visla_text")
    (root / "visla").symlink_to(shared_benchmarks / "visla", target_is_directory=True)
    return root


def reference(path, cols):
    """{metric: (correct, n)} read straight from the TSV (csv module, own column lookup)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    idx = [rows[0].index(c) for c in cols]
    counts = Counter()
    n = 0
    for row in rows[1:]:
        p1, p2, neg = (row[i] for i in idx[1:])
        if not neg.strip():
            continue
        n += 1
        b1, b2, bn = bag(p1), bag(p2), bag(neg)
        s_pp, s_1n, s_2n = dot(b1, b2), dot(b1, bn), dot(b2, bn)
        counts["t2t_p1_n"] += s_pp > s_1n
        counts["t2t_p2_n"] += s_pp > s_2n
        counts["t2t"] += s_pp > s_1n and s_pp > s_2n
        counts["ties"] += s_pp == s_1n
    return counts, n


def test_text_only_p1_n_p2_n_match_brute_force_on_real_visla(real_root, shared_benchmarks):
    r = run(WordCounts(), ["visla"], str(real_root), progress=False)["visla"]
    files = {"generic": ("Generic_VISLA.tsv", ["filename", "caption", "second positive", "negative_caption"]),
             "spatial": ("Spatial_VISLA.tsv", ["image", "sent1", "sent2", "Best reference (Semantically close)"])}
    for subset, (name, cols) in files.items():
        counts, n = reference(shared_benchmarks / "visla" / name, cols)
        assert r.counts[subset] == n == {"generic": 973, "spatial": 640}[subset]
        for metric in ("t2t", "t2t_p1_n", "t2t_p2_n"):
            assert r.headline[f"{subset}/{metric}"] == counts[metric] / n, (subset, metric)
        assert counts["ties"] > 0  # exact ties occur and count as wrong
        # P1-N and P2-N differ: N is written close to P1, so the halves are not interchangeable
        assert counts["t2t_p1_n"] != counts["t2t_p2_n"]
    assert any("t2t_p1_n" in n for n in r.notes) and "i2t" not in " ".join(r.headline)


def test_text_only_columns_reach_the_reports(real_root, tmp_path):
    from compclip.eval.report import write_reports
    r = run(WordCounts(), ["visla"], str(real_root), progress=False)
    md = write_reports({"words": r}, tmp_path, plots=False)["markdown"].read_text()
    assert "| visla/generic/t2t_p1_n |" in md and "| visla/spatial/t2t_p2_n |" in md
    assert "| category | t2t | t2t_p1_n | t2t_p2_n | n |" in md
