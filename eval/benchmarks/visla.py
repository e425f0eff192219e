"""VISLA (Dumpala et al. 2024): generic (973 triplets) and spatial (640 usable of 652 rows).

Files: `<root>/visla/Generic_VISLA.tsv` (columns filename, caption, second positive,
negative_caption = image, P1, P2, N) and `<root>/visla/Spatial_VISLA.tsv` (columns image, sent1,
sent2, Best reference (Semantically close) = image, P1, P2, N; rows with an empty N dropped).
Images: COCO 2017 file names, looked up in `visla/images/`, then `coco/val2017`, `coco/train2017`.
Metrics (strict, see `eval.metrics.triplet_correct`): I2T, P1-N, P2-N, T2T; T2T alone for a
text-only scorer. Headline names: `generic/i2t`, `spatial/t2t`, ...
"""
from __future__ import annotations

from pathlib import Path

from eval.benchmarks.base import Benchmark, BenchmarkResult, MissingData
from eval.benchmarks.triplet import read_visla_tsv, score_triplets
from eval.images import resolve_files
from eval.metrics import accuracy
from eval.registry import register_benchmark

SUBSETS = {
    "generic": ("Generic_VISLA.tsv", ("filename", "caption", "second positive", "negative_caption")),
    "spatial": ("Spatial_VISLA.tsv", ("image", "sent1", "sent2", "Best reference (Semantically close)")),
}


def read_visla(data_root: Path, subsets) -> tuple[dict[str, list], list[str]]:
    """({subset: triplets}, notes) from the TSVs (used by VISLA and the lexical-overlap diagnostic)."""
    unknown = set(subsets) - set(SUBSETS)
    if unknown:
        raise ValueError(f"visla: unknown subset(s) {sorted(unknown)}; known: {list(SUBSETS)}")
    files = [data_root / "visla" / SUBSETS[s][0] for s in subsets]
    if missing := [str(f) for f in files if not f.is_file()]:
        raise MissingData("visla", missing, data_root)
    out, notes = {}, []
    for s, f in zip(subsets, files):
        out[s], dropped = read_visla_tsv(f, SUBSETS[s][1])
        if dropped:
            notes.append(f"visla/{s}: dropped {dropped} rows with an empty negative")
    return out, notes


@register_benchmark
class Visla(Benchmark):
    name = "visla"
    needs_images = False  # T2T works text-only
    primary = "generic/i2t"
    option_names = ("subsets",)

    def _load(self):
        self.subsets, notes = read_visla(self.data_root, self.options.get("subsets", tuple(SUBSETS)))
        self.notes += notes
        self.image_paths = None
        if self.require_images:
            self.image_paths, missing = resolve_files(
                (t.image for ts in self.subsets.values() for t in ts), self.image_dirs())
            if missing:
                raise MissingData(self.name, missing, self.data_root, images=True)

    def _score(self, cache, per_instance):
        with_images = cache.supports_images and self.image_paths is not None
        notes = [] if with_images else ["visla: text-only scoring, T2T only"]
        headline, categories, instances, counts = {}, {}, [], {}
        for subset, triplets in self.subsets.items():
            masks = score_triplets(cache, triplets, self.image_paths if with_images else None)
            for metric, mask in masks.items():
                headline[f"{subset}/{metric}"] = accuracy(mask)
            categories[subset] = {m: accuracy(v) for m, v in masks.items()} | {"n": len(triplets)}
            counts[subset] = len(triplets)
            if per_instance:
                instances += [{"subset": subset, "source": t.source, **{k: bool(m[i]) for k, m in masks.items()}}
                              for i, t in enumerate(triplets)]
        return BenchmarkResult(self.name, headline, categories, instances if per_instance else None,
                               notes, counts)
