"""SugarCrepe (Hsieh et al. 2023): 7,511 image / positive / hard-negative caption pairs.

Files: `<root>/sugarcrepe/<subset>.json` for add_att, add_obj, replace_att, replace_obj,
replace_rel, swap_att, swap_obj; each a JSON object keyed by string ids ("0", "1", ...; gaps
allowed) of {filename, caption, negative_caption}. Images: COCO val2017 (`sugarcrepe/images/`,
then `coco/val2017`). An item is correct iff s(I, pos) > s(I, neg) (strict: a tie is wrong).
Headline: each subset, `replace` / `swap` / `add` (micro over their subsets, as in the paper),
`micro` over all items and `macro` over the seven subsets.
"""
from __future__ import annotations

import json

import numpy as np

from compclip.eval.benchmarks.base import Benchmark, BenchmarkResult, DataError, images_problem, read_text
from compclip.eval.images import FileImage, resolve_files
from compclip.eval.metrics import accuracy, pair_correct
from compclip.eval.registry import register_benchmark
from compclip.eval.stats import ItemTable, cluster_ids, index_by, metric

SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def read_sugarcrepe_json(path) -> list[dict]:
    """[{id, filename, caption, negative_caption}] in file order."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object keyed by id")
    out = []
    for key, r in data.items():
        missing = [k for k in ("filename", "caption", "negative_caption") if not isinstance(r, dict) or k not in r]
        if missing:
            raise DataError(f"{path}: item '{key}' lacks key(s) {missing}")
        out.append({"id": key, "filename": r["filename"], "caption": r["caption"],
                    "negative_caption": r["negative_caption"]})
    return out


def sugarcrepe_headline(masks: dict[str, np.ndarray]) -> dict[str, float]:
    """Each subset's accuracy, `replace` / `swap` / `add` (micro over their subsets), `micro`, `macro`."""
    headline = {s: accuracy(m) for s, m in masks.items()}
    for kind in ("replace", "swap", "add"):
        parts = [m for s, m in masks.items() if s.startswith(kind + "_")]
        if parts:
            headline[kind] = accuracy(np.concatenate(parts))
    headline["micro"] = accuracy(np.concatenate(list(masks.values())))
    headline["macro"] = float(np.mean([accuracy(m) for m in masks.values()]))
    return headline


@register_benchmark
class SugarCrepe(Benchmark):
    name = "sugarcrepe"
    needs_images = True
    primary = "macro"
    option_names = ("subsets",)

    def _missing(self):
        subsets = tuple(self.options.get("subsets", SUBSETS))
        if set(subsets) - set(SUBSETS):
            raise ValueError(f"sugarcrepe: unknown subset(s) {sorted(set(subsets) - set(SUBSETS))}")
        problems = self.file_problems([self.path(f"{s}.json") for s in subsets], images=self.require_images)
        if problems:
            return problems
        self.subsets = {s: read_sugarcrepe_json(self.path(f"{s}.json")) for s in subsets}
        self.image_paths = {}
        if self.require_images:
            dirs = self.image_dirs()
            self.image_paths, missing = resolve_files(
                (r["filename"] for rs in self.subsets.values() for r in rs), dirs)
            if p := images_problem(self.name, missing, dirs, self.data_root):
                return [p]
        return []

    def _load(self):
        pass  # read by _missing

    def _score(self, cache, per_instance):
        masks, instances = {}, []
        for subset, items in self.subsets.items():
            cache.label = f"{self.name}/{subset}"  # names the progress bars
            image = cache.images([FileImage(self.image_paths[r["filename"]]) for r in items])
            pos = cache.texts([r["caption"] for r in items])
            neg = cache.texts([r["negative_caption"] for r in items])
            masks[subset] = pair_correct(image, pos, neg)
            if per_instance:
                instances += [{"subset": subset, "id": r["id"], "image": r["filename"], "correct": bool(c)}
                              for r, c in zip(items, masks[subset])]
        headline = sugarcrepe_headline(masks)
        categories = {s: {"acc": accuracy(m), "n": len(m)} for s, m in masks.items()}
        return BenchmarkResult(self.name, headline, categories, instances if per_instance else None,
                               counts={s: len(m) for s, m in masks.items()})

    @classmethod
    def item_table(cls, instances):
        """Each subset, `replace` / `swap` / `add`, `micro`, `macro`; items sharing an image are one cluster."""
        if not instances:
            return None
        subsets = index_by([r["subset"] for r in instances])
        values = [r["correct"] for r in instances]
        out = {s: metric(values, idx) for s, idx in subsets.items()}
        for kind in ("replace", "swap", "add"):
            parts = [idx for s, idx in subsets.items() if s.startswith(kind + "_")]
            if parts:
                out[kind] = metric(values, np.concatenate(parts))
        out["micro"] = metric(values, np.arange(len(values)))
        out["macro"] = metric(values, *subsets.values())
        return ItemTable(cluster_ids([r["image"] for r in instances]), out)
