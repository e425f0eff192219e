"""VISLA (Dumpala et al. 2024): generic (973 triplets) and spatial (640 usable of 652 rows).

Files: `<root>/visla/Generic_VISLA.tsv` (columns filename, caption, second positive,
negative_caption = image, P1, P2, N) and `<root>/visla/Spatial_VISLA.tsv` (columns image, sent1,
sent2, Best reference (Semantically close) = image, P1, P2, N; rows with an empty N dropped).
Images: COCO 2017 file names, looked up in `visla/images/`, then `coco/val2017`, `coco/train2017`.
Metrics (strict, see `eval.metrics.triplet_correct`): with images I2T, P1-N, P2-N; for every
scorer (text encoders and unimodal sentence encoders too) T2T and its two halves, the text-only
P1-N / P2-N columns `t2t_p1_n` = s(P1,P2) > s(P1,N) and `t2t_p2_n` = s(P1,P2) > s(P2,N).
Headline names: `generic/i2t`, `spatial/t2t`, `generic/t2t_p1_n`, ...
"""
from __future__ import annotations

from pathlib import Path

from compclip.eval.benchmarks.base import Benchmark, BenchmarkResult, Problem, changed_problems, files_problem, images_problem
from compclip.eval.benchmarks.triplet import read_visla_tsv, score_triplets, triplet_table
from compclip.eval.images import resolve_files
from compclip.eval.metrics import accuracy
from compclip.eval.registry import register_benchmark

SUBSETS = {
    "generic": ("Generic_VISLA.tsv", ("filename", "caption", "second positive", "negative_caption")),
    "spatial": ("Spatial_VISLA.tsv", ("image", "sent1", "sent2", "Best reference (Semantically close)")),
}


def visla_files(data_root: Path, subsets) -> list[Path]:
    unknown = set(subsets) - set(SUBSETS)
    if unknown:
        raise ValueError(f"visla: unknown subset(s) {sorted(unknown)}; known: {list(SUBSETS)}")
    return [Path(data_root) / "visla" / SUBSETS[s][0] for s in subsets]


def visla_file_problems(name: str, data_root: Path, subsets, images: bool) -> list[Problem]:
    """The VISLA TSVs absent (fetched by `download visla`) or changed since their download."""
    files = visla_files(data_root, subsets)
    absent = files_problem(name, files, data_root, images=images, download="visla")
    return [absent] if absent else changed_problems(name, files, data_root, download="visla")


def read_visla(data_root: Path, subsets) -> tuple[dict[str, list], list[str]]:
    """({subset: triplets}, notes) from the TSVs (used by VISLA and the lexical-overlap diagnostic)."""
    out, notes = {}, []
    for s, f in zip(subsets, visla_files(data_root, subsets)):
        out[s], dropped = read_visla_tsv(f, SUBSETS[s][1])
        if dropped:
            notes.append(f"visla/{s}: dropped {dropped} rows with an empty negative")
    return out, notes


class TripletImages:
    """Shared by VISLA-format benchmarks: read the triplets once, check their images."""

    def _triplet_problems(self, download: str) -> list[Problem]:
        self.subsets, self._read_notes = read_visla(self.data_root, self.options.get("subsets", tuple(SUBSETS)))
        self.image_paths = None
        if not self.require_images:
            return []
        dirs = self.image_dirs()
        self.image_paths, missing = resolve_files((t.image for ts in self.subsets.values() for t in ts), dirs)
        p = images_problem(self.name, missing, dirs, self.data_root, download=download)
        return [p] if p else []


@register_benchmark
class Visla(TripletImages, Benchmark):
    name = "visla"
    needs_images = False  # T2T and its halves work text-only
    primary = "generic/i2t"
    option_names = ("subsets",)

    def _missing(self):
        subsets = self.options.get("subsets", tuple(SUBSETS))
        problems = visla_file_problems(self.name, self.data_root, subsets, self.require_images)
        return problems or self._triplet_problems("visla")

    def _load(self):
        self.notes += self._read_notes

    def _score(self, cache, per_instance):
        with_images = cache.supports_images and self.image_paths is not None
        notes = [] if with_images else ["visla: text-only scoring: T2T and its halves t2t_p1_n, t2t_p2_n"]
        headline, categories, instances, counts = {}, {}, [], {}
        for subset, triplets in self.subsets.items():
            cache.label = f"{self.name}/{subset}"  # names the progress bars
            masks = score_triplets(cache, triplets, self.image_paths if with_images else None)
            for metric, mask in masks.items():
                headline[f"{subset}/{metric}"] = accuracy(mask)
            categories[subset] = {m: accuracy(v) for m, v in masks.items()} | {"n": len(triplets)}
            counts[subset] = len(triplets)
            if per_instance:
                instances += [{"subset": subset, "source": t.source, "image": t.image,
                               **{k: bool(m[i]) for k, m in masks.items()}} for i, t in enumerate(triplets)]
        return BenchmarkResult(self.name, headline, categories, instances if per_instance else None,
                               notes, counts)

    @classmethod
    def item_table(cls, instances):
        return triplet_table(instances, aggregates=False)
