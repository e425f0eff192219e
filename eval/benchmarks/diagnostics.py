"""Diagnostics the seed papers report: VISLA's lexical-overlap view and the left-right view.

`visla_lexical` (VISLA, Dumpala et al. 2024): in each triplet, P1 and P2 are reordered so that
P1 is the positive closer to N by word edit distance (Levenshtein over lower-cased word tokens;
on a tie the stored order is kept). Reported per subset: `close_n` / `far_n` = P1-N / P2-N after
the reordering (with images), `close_t2t` = s(P1,P2) > s(P1,N) and `far_t2t` = s(P1,P2) >
s(P2,N) (text only), and `close_is_p1` = share of triplets where the stored P1 already was the
closer one (or tied); the categories add `n`, `mean_dist_close` and `mean_dist_far`. Strict
comparisons throughout. Reads the VISLA files (see `visla`).

`left_right` ("What's left can't be right"): accuracy on the VG-Relation items whose relation is
"to the left of" / "to the right of" (ARO's argmax rule: a tie picks the false caption), and the
mean cosine similarity of "the X to the left of the Y" vs "the X to the right of the Y" next to
that of the two nouns X, Y alone, over `n_pairs` random pairs of distinct nouns (pair k = the
k-th `numpy.random.default_rng(seed).choice(n, 2, replace=False)`) from the `n_nouns` most
frequent nouns of the benchmark text: VG-Relation captions when present, else VISLA /
SugarCrepe++ / SugarCrepe captions (those files checked against their pinned sha256 first, as
their own benchmarks check them: `eval.checksums`). Nouns: spaCy NN/NNS tags, alphabetic, 3+
letters, lower-cased, counted over the distinct captions, equal counts in alphabetical order.
Words that name a position rather than a thing (`POSITION_NOUNS`: "left", "right", "top",
"front", ..., which the tagger reads as nouns in "to the left of", "on top of", "in front of")
are not mined: they would give "the left to the left of the top".
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np

from compclip.eval.benchmarks.aro import PARTS as ARO_PARTS, load_vg
from compclip.eval.benchmarks.base import (Benchmark, BenchmarkResult, DataError, changed_problems, files_problem,
                                  images_problem, read_text)
from compclip.eval.benchmarks.triplet import read_scpp_json
from compclip.eval.benchmarks.visla import SUBSETS as VISLA_SUBSETS, TripletImages, read_visla, visla_file_problems
from compclip.eval.images import FileImage
from compclip.eval.metrics import accuracy, argmax_correct, option_scores, rowwise_sim
from compclip.eval.stats import ItemTable, cluster_ids, metric
from compclip.eval.registry import register_benchmark

LEFT, RIGHT = "to the left of", "to the right of"
POSITION_NOUNS = frozenset({"left", "right", "top", "bottom", "front", "back", "side", "middle",
                            "center", "centre", "edge"})


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_edit_distance(a: list[str], b: list[str]) -> int:
    """Levenshtein distance over word tokens (insert, delete, substitute cost 1)."""
    prev = list(range(len(b) + 1))
    for i, wa in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, wb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (wa != wb))
        prev = cur
    return prev[-1]


@register_benchmark
class VislaLexical(TripletImages, Benchmark):
    """VISLA's lexical-overlap view: P1-N / P2-N with P1 the positive closer to N by word edits."""
    name = "visla_lexical"
    data_folders = ("visla",)
    needs_images = False
    primary = "generic/close_n"
    option_names = ("subsets",)

    def _missing(self):
        subsets = self.options.get("subsets", tuple(VISLA_SUBSETS))
        problems = visla_file_problems(self.name, self.data_root, subsets, self.require_images)
        return problems or self._triplet_problems("visla")

    def _load(self):
        self.notes += self._read_notes

    def image_dirs(self, folder=None):
        coco = self.data_root / "coco"
        return [self.data_root / "visla" / "images", coco / "val2017", coco / "train2017"]

    def _score(self, cache, per_instance):
        headline, categories = {}, {}
        with_images = cache.supports_images and self.image_paths is not None
        for subset, triplets in self.subsets.items():
            cache.label = f"{self.name}/{subset}"  # names the progress bars
            d1 = np.array([word_edit_distance(words(t.p1), words(t.n)) for t in triplets])
            d2 = np.array([word_edit_distance(words(t.p2), words(t.n)) for t in triplets])
            swap = d2 < d1
            close = cache.texts([t.p2 if s else t.p1 for t, s in zip(triplets, swap)])
            far = cache.texts([t.p1 if s else t.p2 for t, s in zip(triplets, swap)])
            n = cache.texts([t.n for t in triplets])
            s_cf, s_cn, s_fn = rowwise_sim(close, far), rowwise_sim(close, n), rowwise_sim(far, n)
            m = {"close_t2t": s_cf > s_cn, "far_t2t": s_cf > s_fn}
            if with_images:
                image = cache.images([FileImage(self.image_paths[t.image]) for t in triplets])
                m = {"close_n": rowwise_sim(image, close) > rowwise_sim(image, n),
                     "far_n": rowwise_sim(image, far) > rowwise_sim(image, n), **m}
            row = {k: accuracy(v) for k, v in m.items()}
            row["close_is_p1"] = accuracy(~swap)
            headline.update({f"{subset}/{k}": v for k, v in row.items()})
            categories[subset] = row | {"n": len(triplets), "mean_dist_close": float(np.minimum(d1, d2).mean()),
                                        "mean_dist_far": float(np.maximum(d1, d2).mean())}
        notes = [] if with_images else ["visla_lexical: text-only scoring, close_t2t / far_t2t only"]
        return BenchmarkResult(self.name, headline, categories, notes=notes,
                               counts={s: len(t) for s, t in self.subsets.items()})


@register_benchmark
class LeftRight(Benchmark):
    """Left-right view: VG-Relation left/right accuracy; cos("X left of Y", "X right of Y") vs cos(X, Y)."""
    name = "left_right"
    data_folders = ("aro", "visla", "sugarcrepe_pp", "sugarcrepe")
    needs_images = False
    primary = "acc"
    option_names = ("n_nouns", "n_pairs", "seed")

    def _missing(self):
        aro_file = self.data_root / "aro" / ARO_PARTS["vg_relation"][0]
        self.items, self.paths = [], {}
        if aro_file.is_file():
            if changed := changed_problems(self.name, [aro_file], self.data_root, download="aro"):
                return changed
            items, self.paths, missing = load_vg(self.data_root, "vg_relation", self.require_images)
            self.items = [it for it in items if it["relation_name"] in (LEFT, RIGHT)]
            self.texts = [it["true_caption"] for it in items]
            p = images_problem(self.name, missing, [self.data_root / "aro" / "images"], self.data_root, download="aro")
            return [p] if p else []
        changed = [p for bench, paths in self._fallback_files().items()
                   for p in changed_problems(self.name, paths, self.data_root, download=bench)]
        if changed:
            return changed
        self.texts = self._fallback_texts()
        if not self.texts:
            return [files_problem(self.name, [aro_file], self.data_root, images=self.require_images, download="aro")]
        self.notes.append(f"left_right: {aro_file} not found; accuracy skipped, nouns mined from "
                          "VISLA / SugarCrepe text")
        return []

    def _load(self):
        aro_file = self.data_root / "aro" / ARO_PARTS["vg_relation"][0]
        self.nouns = self._mine_nouns(self.texts, int(self.options.get("n_nouns", 100)))
        if len(self.nouns) < 2:
            raise DataError(f"left_right: fewer than 2 nouns found in the text of {aro_file} "
                            "(or of the VISLA / SugarCrepe files)")

    def _fallback_files(self) -> dict[str, list[Path]]:
        """The VISLA / SugarCrepe++ / SugarCrepe files `_fallback_texts` reads, by the benchmark
        whose download fetches them."""
        visla = [self.data_root / "visla" / file for file, _ in VISLA_SUBSETS.values()]
        return {"visla": [p for p in visla if p.is_file()],
                "sugarcrepe_pp": sorted((self.data_root / "sugarcrepe_pp").glob("*.json")),
                "sugarcrepe": sorted((self.data_root / "sugarcrepe").glob("*.json"))}

    def _fallback_texts(self) -> list[str]:
        texts = []
        for subset, (file, cols) in VISLA_SUBSETS.items():
            if (self.data_root / "visla" / file).is_file():
                texts += [t.p1 for t in read_visla(self.data_root, [subset])[0][subset]]
        for p in sorted((self.data_root / "sugarcrepe_pp").glob("*.json")):
            texts += [t.p1 for t in read_scpp_json(p)]
        for p in sorted((self.data_root / "sugarcrepe").glob("*.json")):
            texts += [r["caption"] for r in json.loads(read_text(p)).values()]
        return texts

    @staticmethod
    def _mine_nouns(texts: list[str], n: int) -> list[str]:
        from compclip.eval.text_perturb import tag
        counts = Counter(w.lower() for tokens, tags in tag(list(dict.fromkeys(texts)))
                         for w, t in zip(tokens, tags) if t in ("NN", "NNS") and w.isalpha() and len(w) > 2
                         and w.lower() not in POSITION_NOUNS)
        return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]

    def _score(self, cache, per_instance):
        import torch
        rng = np.random.default_rng(int(self.options.get("seed", 0)))
        n_pairs = int(self.options.get("n_pairs", 500))
        idx = [rng.choice(len(self.nouns), size=2, replace=False) for _ in range(n_pairs)]
        xs, ys = [self.nouns[i] for i, _ in idx], [self.nouns[j] for _, j in idx]
        left = cache.texts([f"the {x} {LEFT} the {y}" for x, y in zip(xs, ys)])
        right = cache.texts([f"the {x} {RIGHT} the {y}" for x, y in zip(xs, ys)])
        headline = {"cos_left_right": float(rowwise_sim(left, right).mean()),
                    "cos_random_nouns": float(rowwise_sim(cache.texts(xs), cache.texts(ys)).mean())}
        categories, notes, instances = {}, [], []
        if self.items and cache.supports_images and self.paths:
            image = cache.images([FileImage(self.paths[it["image_path"]],
                                            (it["bbox_x"], it["bbox_y"], it["bbox_w"], it["bbox_h"]))
                                  for it in self.items])
            options = torch.stack([cache.texts([it["false_caption"] for it in self.items]),
                                   cache.texts([it["true_caption"] for it in self.items])], dim=1)
            correct = argmax_correct(option_scores(image, options), answer=1)
            rel = np.array([it["relation_name"] for it in self.items])
            instances = [{"index": i, "image": it["image_path"], "relation": "left" if r == LEFT else "right",
                          "correct": bool(c)} for i, (it, r, c) in enumerate(zip(self.items, rel, correct))]
            headline["acc"] = accuracy(correct)
            for name, key in ((LEFT, "left"), (RIGHT, "right")):
                headline[f"acc_{key}"] = accuracy(correct[rel == name])
                categories[key] = {"acc": headline[f"acc_{key}"], "n": int((rel == name).sum())}
        else:
            notes.append("left_right: accuracy skipped (needs VG-Relation images and an image scorer)")
        categories["text"] = headline | {"n_pairs": n_pairs, "n_nouns": len(self.nouns)}
        return BenchmarkResult(self.name, headline, categories, instances if per_instance else None, notes=notes,
                               counts={"items": len(self.items), "pairs": n_pairs})

    @classmethod
    def item_table(cls, instances):
        """`acc`, `acc_left`, `acc_right` over the scored items (one part each); items sharing an
        image are one cluster. The text cosines have no items: no interval."""
        if not instances:
            return None
        correct = [r["correct"] for r in instances]
        rel = np.array([r["relation"] for r in instances])
        return ItemTable(cluster_ids([r["image"] for r in instances]),
                         {"acc": metric(correct, np.arange(len(instances))),
                          "acc_left": metric(correct, rel == "left"), "acc_right": metric(correct, rel == "right")})

