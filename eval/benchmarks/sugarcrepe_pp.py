"""SugarCrepe++ (Dumpala et al. 2024): VISLA's triplet task on SugarCrepe's images, 4,757 items.

Files: `<root>/sugarcrepe_pp/<subset>.json` for replace_att, replace_obj, replace_rel, swap_att,
swap_obj; each a JSON list of {id, filename, caption, caption2, negative_caption} = P1, P2, N.
Images: COCO val2017 (`sugarcrepe_pp/images/`, then `coco/val2017`). Metrics per subset (strict):
I2T, P1-N, P2-N (with images), T2T and its halves t2t_p1_n / t2t_p2_n (every scorer), plus their micro average over all
items (`all/<metric>`) and the macro average over subsets (`macro/<metric>`).
"""
from __future__ import annotations

from compclip.eval.benchmarks.base import Benchmark, BenchmarkResult, images_problem
from compclip.eval.benchmarks.triplet import read_scpp_json, score_triplets, triplet_headline, triplet_table
from compclip.eval.images import resolve_files
from compclip.eval.metrics import accuracy
from compclip.eval.registry import register_benchmark

SUBSETS = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


@register_benchmark
class SugarCrepePP(Benchmark):
    name = "sugarcrepe_pp"
    needs_images = False
    primary = "macro/i2t"
    option_names = ("subsets",)

    def _subsets(self) -> tuple[str, ...]:
        subsets = tuple(self.options.get("subsets", SUBSETS))
        if set(subsets) - set(SUBSETS):
            raise ValueError(f"sugarcrepe_pp: unknown subset(s) {sorted(set(subsets) - set(SUBSETS))}")
        return subsets

    def _missing(self):
        subsets = self._subsets()
        problems = self.file_problems([self.path(f"{s}.json") for s in subsets], images=self.require_images)
        if problems:
            return problems
        self.subsets = {s: read_scpp_json(self.path(f"{s}.json")) for s in subsets}
        self.image_paths = None
        if self.require_images:
            dirs = self.image_dirs()
            self.image_paths, missing = resolve_files((t.image for ts in self.subsets.values() for t in ts), dirs)
            if p := images_problem(self.name, missing, dirs, self.data_root):
                return [p]
        return []

    def _load(self):
        pass  # read by _missing

    def _score(self, cache, per_instance):
        with_images = cache.supports_images and self.image_paths is not None
        notes = [] if with_images else ["sugarcrepe_pp: text-only scoring: T2T and its halves t2t_p1_n, t2t_p2_n"]
        categories, instances, all_masks = {}, [], {}
        for subset, triplets in self.subsets.items():
            cache.label = f"{self.name}/{subset}"  # names the progress bars
            masks = score_triplets(cache, triplets, self.image_paths if with_images else None)
            categories[subset] = {m: accuracy(v) for m, v in masks.items()} | {"n": len(triplets)}
            all_masks[subset] = masks
            if per_instance:
                instances += [{"subset": subset, "source": t.source, "image": t.image,
                               **{k: bool(v[i]) for k, v in masks.items()}} for i, t in enumerate(triplets)]
        headline = triplet_headline(all_masks, aggregates=True)
        counts = {s: len(t) for s, t in self.subsets.items()}
        return BenchmarkResult(self.name, headline, categories, instances if per_instance else None,
                               notes, counts)

    @classmethod
    def item_table(cls, instances):
        return triplet_table(instances, aggregates=True)
