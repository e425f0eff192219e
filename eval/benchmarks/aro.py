"""ARO (Yuksekgonul et al. 2023): VG-Relation, VG-Attribution, COCO-Order, Flickr30k-Order.

Files under `<root>/aro/` (the reference repo's names and fields). Every part asked for must be
there (`MissingData` lists what is not), except Flickr30k-Order when no `parts` option was given:
its images need a licence sign-up no download can do, so without them it is skipped with a
one-line note and the manual instructions; name it in `parts` (`{"parts": ["vg_relation",
"vg_attribution", "coco_order", "flickr30k_order"]}`) to make their absence an error.
- `visual_genome_relation.json`: a list of {image_path, bbox_x, bbox_y, bbox_w, bbox_h,
  true_caption, false_caption, relation_name}; images in `aro/images/`.
- `visual_genome_attribution.json`: the same with `attributes: [a1, a2]` instead of
  relation_name; images in `aro/images/`.
- `coco_karpathy_test.json` / `flickr30k_test.json`: lists of {image, caption: [str, ...]};
  images under `aro/coco_images/` / `aro/flickr30k_images/` at the stored relative `image` path.
Rules of the reference: the VG image is cropped to the stored box; options [false, true] scored
by argmax (a tie picks the false caption: wrong). VG-Relation macro = mean per-relation accuracy
without the symmetric relations of the reference notebook; VG-Attribution macro = mean per
attribute-pair ("a1_a2") accuracy over pairs with >= 25 samples. Order: options [true, 4
perturbations] (`eval.text_perturb`), argmax (a tie counts correct), mean and std (numpy, ddof=0)
of precision@1 over `seeds` (default 0..4).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from compclip.eval.benchmarks.base import Benchmark, BenchmarkResult, DataError, images_problem, read_text
from compclip.eval.images import FileImage, resolve_files
from compclip.eval.metrics import accuracy, argmax_correct, macro, option_scores, per_group
from compclip.eval.registry import register_benchmark
from compclip.eval.stats import ItemTable, cluster_ids, index_by, metric
from compclip.eval import text_perturb

# Replicate ARO! VG-Relation, VG-Attribution.ipynb (mertyg/vision-language-models-are-bows @ 42dbb5e2)
SYMMETRIC_RELATIONS = frozenset([
    'adjusting', 'attached to', 'between', 'bigger than', 'biting', 'boarding', 'brushing', 'chewing',
    'cleaning', 'climbing', 'close to', 'coming from', 'coming out of', 'contain', 'crossing', 'dragging',
    'draped over', 'drinking', 'drinking from', 'driving', 'driving down', 'driving on', 'eating from',
    'eating in', 'enclosing', 'exiting', 'facing', 'filled with', 'floating in', 'floating on', 'flying',
    'flying above', 'flying in', 'flying over', 'flying through', 'full of', 'going down', 'going into',
    'going through', 'grazing in', 'growing in', 'growing on', 'guiding', 'hanging from', 'hanging in',
    'hanging off', 'hanging over', 'higher than', 'holding onto', 'hugging', 'in between', 'jumping off',
    'jumping on', 'jumping over', 'kept in', 'larger than', 'leading', 'leaning over', 'leaving', 'licking',
    'longer than', 'looking in', 'looking into', 'looking out', 'looking over', 'looking through',
    'lying next to', 'lying on top of', 'making', 'mixed with', 'mounted on', 'moving', 'on the back of',
    'on the edge of', 'on the front of', 'on the other side of', 'opening', 'painted on', 'parked at',
    'parked beside', 'parked by', 'parked in', 'parked in front of', 'parked near', 'parked next to',
    'perched on', 'petting', 'piled on', 'playing', 'playing in', 'playing on', 'playing with', 'pouring',
    'reaching for', 'reading', 'reflected on', 'riding on', 'running in', 'running on', 'running through',
    'seen through', 'sitting behind', 'sitting beside', 'sitting by', 'sitting in front of', 'sitting near',
    'sitting next to', 'sitting under', 'skiing down', 'skiing on', 'sleeping in', 'sleeping on',
    'smiling at', 'sniffing', 'splashing', 'sprinkled on', 'stacked on', 'standing against',
    'standing around', 'standing behind', 'standing beside', 'standing in front of', 'standing near',
    'standing next to', 'staring at', 'stuck in', 'surrounding', 'swimming in', 'swinging', 'talking to',
    'topped with', 'touching', 'traveling down', 'traveling on', 'tying', 'typing on', 'underneath',
    'wading in', 'waiting for', 'walking across', 'walking by', 'walking down', 'walking next to',
    'walking through', 'working in', 'working on', 'worn on', 'wrapped around', 'wrapped in', 'by', 'of',
    'near', 'next to', 'with', 'beside', 'on the side of', 'around'])
MIN_ATTRIBUTE_PAIR = 25
PARTS = {  # part: (annotation file, image folder)
    "vg_relation": ("visual_genome_relation.json", "images"),
    "vg_attribution": ("visual_genome_attribution.json", "images"),
    "coco_order": ("coco_karpathy_test.json", "coco_images"),
    "flickr30k_order": ("flickr30k_test.json", "flickr30k_images"),
}
MANUAL_IMAGES = {  # parts whose images no download can fetch: skipped unless asked for explicitly
    "flickr30k_order": "Flickr30k images need a sign-up (https://forms.illinois.edu/sec/229675): put them "
                       "under <root>/aro/flickr30k_images/flickr30k-images/",
}
VG_KEYS = ("image_path", "bbox_x", "bbox_y", "bbox_w", "bbox_h", "true_caption", "false_caption")


def read_json_list(path: Path, keys: tuple[str, ...]) -> list[dict]:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list")
    for i, item in enumerate(data):
        missing = [k for k in keys if not isinstance(item, dict) or k not in item]
        if missing:
            raise DataError(f"{path}: item {i} lacks key(s) {missing}")
    return data


def load_vg(data_root: Path, part: str, require_images: bool) -> tuple[list[dict], dict[str, str], list[str]]:
    """VG items, {image_path: file} and the image files found nowhere (both empty when images
    are not required)."""
    file, folder = PARTS[part]
    key = "relation_name" if part == "vg_relation" else "attributes"
    items = read_json_list(data_root / "aro" / file, VG_KEYS + (key,))
    paths, missing = {}, []
    if require_images:
        paths, missing = resolve_files((it["image_path"] for it in items), [data_root / "aro" / folder])
    return items, paths, missing


@register_benchmark
class ARO(Benchmark):
    name = "aro"
    needs_images = True
    primary = "vg_relation/macro"
    option_names = ("parts", "seeds", "max_words", "max_images")

    def _missing(self):
        explicit = "parts" in self.options
        wanted = tuple(self.options.get("parts", PARTS))
        if set(wanted) - set(PARTS):
            raise ValueError(f"aro: unknown part(s) {sorted(set(wanted) - set(PARTS))}; known: {list(PARTS)}")
        self.data, self.skip_notes, problems = {}, [], []
        for part in wanted:
            file, folder = PARTS[part]
            manual = MANUAL_IMAGES.get(part, "").replace("<root>", str(self.data_root))
            if manual and not explicit:  # scored only when all there; otherwise skipped, not missing
                reason = self._manual_part_absent(part)
                if reason:
                    self.skip_notes.append(
                        f"aro/{part} skipped: {reason}; {manual}; to require it, ask for it explicitly: "
                        f"--options '{{\"aro\": {{\"parts\": [..., \"{part}\"]}}}}'")
                    continue
            got = self.file_problems([self.path(file)], images=self.require_images)
            if got:
                problems += [replace(p, benchmark=f"aro/{part}") for p in got]
                continue
            if part.startswith("vg_"):
                items, paths, missing = load_vg(self.data_root, part, self.require_images)
                self.data[part] = (items, paths)
            else:
                ann = read_json_list(self.path(file), ("image", "caption"))
                limit = self.options.get("max_images")
                ann = ann[:limit] if limit else ann
                paths, missing = {}, []
                if self.require_images:
                    paths, missing = resolve_files((a["image"] for a in ann), [self.path(folder)])
                self.data[part] = (ann, paths)
            if missing:
                problems.append(images_problem(f"aro/{part}", missing, [self.path(folder)], self.data_root,
                                               download="aro", manual=manual or None))
        return problems

    def _manual_part_absent(self, part: str):
        """Why a part whose images need a manual step cannot be scored, or None if it can."""
        file, folder = PARTS[part]
        if not self.path(file).is_file():
            return f"{self.path(file)} not found"
        if not self.require_images:
            return None
        ann = read_json_list(self.path(file), ("image", "caption"))
        limit = self.options.get("max_images")
        _, missing = resolve_files((a["image"] for a in (ann[:limit] if limit else ann)), [self.path(folder)])
        if missing:
            return f"{len(missing)} of its images are not under {self.path(folder)}"
        return None

    def _load(self):
        self.notes += self.skip_notes
        self.seeds = tuple(self.options.get("seeds", range(5)))
        self.max_words = int(self.options.get("max_words", 30))
        if not self.data:
            raise DataError(f"aro: no part left to score under {self.data_root / 'aro'} ({'; '.join(self.skip_notes)})")
        self.parts = {}
        for part, (items, paths) in self.data.items():
            if part.startswith("vg_"):
                self.parts[part] = (items, paths)
            else:
                cases = [(a["image"], c) for a in items for c in a["caption"]]
                tagged = text_perturb.tag([c for _, c in cases])
                self.parts[part] = (cases, tagged, paths)

    def _score(self, cache, per_instance):
        headline, categories, counts, instances = {}, {}, {}, []
        for part, data in self.parts.items():
            cache.label = f"{self.name}/{part}"  # names the progress bars
            if part.startswith("vg_"):
                h, table, inst = self._score_vg(cache, part, *data)
            else:
                h, table, inst = self._score_order(cache, part, *data)
            headline.update({f"{part}/{k}": v for k, v in h.items()})
            categories.update({f"{part}/{k}": v for k, v in table.items()})
            counts[part] = len(inst)
            if part.startswith("vg_"):
                counts[f"{part}/categories_kept"] = int(sum(v["kept"] for v in table.values()))
            if per_instance:
                instances += [{"part": part, **r} for r in inst]
        return BenchmarkResult(self.name, headline, categories, instances if per_instance else None,
                               counts=counts)

    @classmethod
    def item_table(cls, instances):
        """VG parts: `macro` (one part per category kept, as the headline's) and `micro` (the kept
        categories' items); Order parts: `mean` (per item, the share of seeds it is right on).
        Items sharing an image are one cluster."""
        if not instances:
            return None
        out = {}
        for part, idx in index_by([r["part"] for r in instances]).items():
            rows = [instances[i] for i in idx]
            if part.startswith("vg_"):
                values = np.zeros(len(instances))
                values[idx] = [r["correct"] for r in rows]
                cats = {c: idx[j] for c, j in index_by([r["category"] for r in rows]).items()}
                kept = [c for c in cats if (c not in SYMMETRIC_RELATIONS if part == "vg_relation"
                                            else len(cats[c]) >= MIN_ATTRIBUTE_PAIR)]
                out[f"{part}/macro"] = metric(values, *(cats[c] for c in kept))
                out[f"{part}/micro"] = metric(values, np.concatenate([cats[c] for c in kept] or [[]]))
            else:
                values = np.zeros(len(instances))
                values[idx] = [r["seeds_correct"] / r["seeds"] for r in rows]
                out[f"{part}/mean"] = metric(values, idx)
        return ItemTable(cluster_ids([r["image"] for r in instances]), out)

    def _score_vg(self, cache, part, items, paths):
        import torch
        image = cache.images([FileImage(paths[it["image_path"]], (it["bbox_x"], it["bbox_y"], it["bbox_w"], it["bbox_h"]))
                              for it in items])
        options = torch.stack([cache.texts([it["false_caption"] for it in items]),  # option 0: false
                               cache.texts([it["true_caption"] for it in items])], dim=1)  # 1: true
        return vg_summary(part, items, argmax_correct(option_scores(image, options), answer=1))

    def _score_order(self, cache, part, cases, tagged, paths):
        image = cache.images([FileImage(paths[name]) for name, _ in cases]) if cases else None
        per_seed, seeds_correct = [], np.zeros(len(cases), dtype=np.int64)
        for seed in self.seeds:
            opts = order_options(cases, tagged, seed, self.max_words)
            emb = cache.texts([o for five in opts for o in five]).view(len(cases), 5, -1)
            correct = argmax_correct(option_scores(image, emb), answer=0)
            per_seed.append(accuracy(correct))
            seeds_correct += correct
        return order_summary(self.seeds, per_seed, cases, seeds_correct)


def order_options(cases, tagged, seed: int, max_words: int) -> list[list[str]]:
    """Per caption [true, 4 perturbations] for one seed (`text_perturb.order_options`)."""
    rng = np.random.default_rng(seed)
    return [text_perturb.order_options(c, tok, tg, rng, max_words) for (_, c), (tok, tg) in zip(cases, tagged)]


def order_summary(seeds, per_seed: list[float], cases, seeds_correct=None):
    """(headline mean / std over seeds, per-seed table, per-caption records; each record holds how
    many seeds the caption is right on when `seeds_correct` is given)."""
    headline = {"mean": float(np.mean(per_seed)), "std": float(np.std(per_seed))}
    cats = {f"seed{s}": {"acc": a, "n": len(cases)} for s, a in zip(seeds, per_seed)}
    inst = [{"index": i, "image": name} for i, (name, _) in enumerate(cases)]
    if seeds_correct is not None:
        for r, k in zip(inst, seeds_correct):
            r.update(seeds_correct=int(k), seeds=len(seeds))
    return headline, cats, inst


def vg_summary(part: str, items: list[dict], correct: np.ndarray):
    """(headline macro / micro, per-category table, per-item records) of a VG part's correct mask."""
    if part == "vg_relation":
        groups = [it["relation_name"] for it in items]
        table = per_group(correct, groups)
        value, kept = macro(table, exclude=SYMMETRIC_RELATIONS)
    else:
        groups = [f"{it['attributes'][0]}_{it['attributes'][1]}" for it in items]
        table = per_group(correct, groups)
        value, kept = macro(table, min_count=MIN_ATTRIBUTE_PAIR)
    kept_mask = np.isin(np.asarray(groups), kept)
    headline = {"macro": value, "micro": accuracy(correct[kept_mask])}
    cats = {g: {"acc": a, "n": n, "kept": float(g in kept)} for g, (a, n) in table.items()}
    inst = [{"index": i, "category": g, "image": it["image_path"], "correct": bool(c)}
            for i, (it, g, c) in enumerate(zip(items, groups, correct))]
    return headline, cats, inst

