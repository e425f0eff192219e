"""Regression guard: COCO and Flickr30k (Karpathy test) image-text retrieval, R@1/5/10 both ways.

Files: `<root>/retrieval/coco_karpathy_test.json` and `<root>/retrieval/flickr30k_test.json`
(the BLIP/ARO Karpathy files: a list of {image, caption: [5 str]}), images at the stored relative
path under `retrieval/coco_images/` / `retrieval/flickr30k_images/` (or ARO's `aro/coco_images/`,
`aro/flickr30k_images/`, which hold the same files). Captions are normalised as ARO's
`pre_caption` (30 words). Image-to-text: a hit at k if fewer than k wrong captions score >= the
best of the image's own captions (ties count against); text-to-image likewise. Parts whose file
is absent are missing (`MissingData`), except
Flickr30k, whose images need a licence sign-up: without them it is skipped with a note unless
named in `parts`. COCO image-to-text R@1 is what NegCLIP selects epochs by.
Options: `text_perturb` (one of ARO's caption perturbations, `eval.text_perturb.PERTURBATIONS`,
applied to every caption with `seed`) and `image_perturb` (`shuffle_rows_4`, `shuffle_cols_4`,
`shuffle_patches_9`: grid cells of the image permuted, before the model's preprocessing), as in
ARO's retrieval-under-perturbation experiments; `max_images` keeps the first N images.
"""
from __future__ import annotations

import numpy as np

from dataclasses import replace

from compclip.eval.benchmarks.aro import MANUAL_IMAGES as ARO_MANUAL, read_json_list
from compclip.eval.benchmarks.base import Benchmark, BenchmarkResult, DataError, images_problem
from compclip.eval import text_perturb
from compclip.eval.images import IMAGE_PERTURBATIONS, FileImage, ShuffledImage, resolve_files
from compclip.eval.metrics import recall_at_k
from compclip.eval.registry import register_benchmark
from compclip.eval.text_perturb import pre_caption

PARTS = {"coco": ("coco_karpathy_test.json", "coco_images"),
         "flickr30k": ("flickr30k_test.json", "flickr30k_images")}
KS = (1, 5, 10)
MANUAL_IMAGES = {"flickr30k": ARO_MANUAL["flickr30k_order"]}


@register_benchmark
class Retrieval(Benchmark):
    name = "retrieval"
    needs_images = True
    primary = "coco/i2t_r1"
    option_names = ("parts", "max_images", "text_perturb", "image_perturb", "seed")

    def _missing(self):
        explicit = "parts" in self.options
        wanted = tuple(self.options.get("parts", PARTS))
        if set(wanted) - set(PARTS):
            raise ValueError(f"retrieval: unknown part(s) {sorted(set(wanted) - set(PARTS))}; known: {list(PARTS)}")
        self.data, self.skip_notes, problems = {}, [], []
        for part in wanted:
            file, folder = PARTS[part]
            dirs = [self.path(folder), self.data_root / "aro" / folder]
            manual = MANUAL_IMAGES.get(part, "").replace("<root>", str(self.data_root))
            got = self.file_problems([self.path(file)], images=self.require_images)
            ann, paths, missing = None, {}, []
            if not got:
                ann = read_json_list(self.path(file), ("image", "caption"))
                ann = ann[:self.options["max_images"]] if self.options.get("max_images") else ann
                if self.require_images:
                    paths, missing = resolve_files((a["image"] for a in ann), dirs)
            if manual and not explicit and (got or missing):  # skipped, not missing
                why = got[0].what if got else f"{len(missing)} of its images are in neither {dirs[0]} nor {dirs[1]}"
                self.skip_notes.append(f"retrieval/{part} skipped: {why}; {manual}; to require it, ask for it "
                                       f"explicitly: --options '{{\"retrieval\": {{\"parts\": [\"coco\", \"{part}\"]}}}}'")
                continue
            problems += [replace(p, benchmark=f"retrieval/{part}") for p in got]
            if missing:
                problems.append(images_problem(f"retrieval/{part}", missing, dirs, self.data_root,
                                               download="retrieval", manual=manual or None))
            if ann is not None and not missing:
                self.data[part] = (ann, paths)
        return problems

    def _load(self):
        self.notes += self.skip_notes
        if not self.data:
            raise DataError(f"retrieval: no part left to score ({'; '.join(self.skip_notes)})")
        self.text_perturb = self.options.get("text_perturb")
        self.image_perturb = self.options.get("image_perturb")
        self.seed = int(self.options.get("seed", 0))
        if self.text_perturb not in (None, *text_perturb.PERTURBATIONS):
            raise ValueError(f"retrieval: text_perturb must be one of {text_perturb.PERTURBATIONS}")
        if self.image_perturb not in (None, *IMAGE_PERTURBATIONS):
            raise ValueError(f"retrieval: image_perturb must be one of {list(IMAGE_PERTURBATIONS)}")
        self.parts = dict(self.data)

    def _perturb_texts(self, texts: list[str]) -> list[str]:
        """Captions under the chosen ARO perturbation (unchanged without one)."""
        if not self.text_perturb:
            return texts
        rng = np.random.default_rng(self.seed)
        fn = getattr(text_perturb, self.text_perturb)
        with_tags = self.text_perturb in ("shuffle_nouns_and_adj", "shuffle_allbut_nouns_and_adj")
        return [fn(tokens, tags, rng) if with_tags else fn(tokens, rng) for tokens, tags in text_perturb.tag(texts)]

    def _score(self, cache, per_instance):
        headline, categories = {}, {}
        for part, (ann, paths) in self.parts.items():
            cache.label = f"{self.name}/{part}"  # names the progress bars
            texts, text_image = [], []
            for i, a in enumerate(ann):
                for c in a["caption"]:
                    texts.append(c)
                    text_image.append(i)
            texts = [pre_caption(t, 30) for t in self._perturb_texts(texts)]
            refs = [FileImage(paths[a["image"]]) for a in ann]
            if self.image_perturb:
                refs = [ShuffledImage(r, self.image_perturb, self.seed) for r in refs]
            images = cache.images(refs)
            sim = (images @ cache.texts(texts).T).float().numpy()  # [images, texts]
            img_texts = [set() for _ in ann]
            for t, i in enumerate(text_image):
                img_texts[i].add(t)
            i2t = recall_at_k(sim, img_texts, KS)
            t2i = recall_at_k(np.ascontiguousarray(sim.T), [{i} for i in text_image], KS)
            for k in KS:
                headline[f"{part}/i2t_r{k}"] = i2t[k]
                headline[f"{part}/t2i_r{k}"] = t2i[k]
            categories[part] = {k.split("/", 1)[1]: v for k, v in headline.items() if k.startswith(part + "/")}
            categories[part]["n_images"], categories[part]["n_texts"] = len(ann), len(texts)
        return BenchmarkResult(self.name, headline, categories, notes=[],
                               counts={p: len(a) for p, (a, _) in self.parts.items()})

