"""Regression guard: COCO and Flickr30k (Karpathy test) image-text retrieval, R@1/5/10 both ways.

Files: `<root>/retrieval/coco_karpathy_test.json` and `<root>/retrieval/flickr30k_test.json`
(the BLIP/ARO Karpathy files: a list of {image, caption: [5 str]}), images at the stored relative
path under `retrieval/coco_images/` / `retrieval/flickr30k_images/` (or ARO's `aro/coco_images/`,
`aro/flickr30k_images/`, which hold the same files). Captions are normalised as ARO's
`pre_caption` (30 words). Image-to-text: a hit at k if fewer than k wrong captions score >= the
best of the image's own captions (ties count against); text-to-image likewise. Parts whose file
is absent are skipped with a note. COCO image-to-text R@1 is what NegCLIP selects epochs by.
Options: `text_perturb` (one of ARO's caption perturbations, `eval.text_perturb.PERTURBATIONS`,
applied to every caption with `seed`) and `image_perturb` (`shuffle_rows_4`, `shuffle_cols_4`,
`shuffle_patches_9`: grid cells of the image permuted, before the model's preprocessing), as in
ARO's retrieval-under-perturbation experiments; `max_images` keeps the first N images.
"""
from __future__ import annotations

import numpy as np

from eval.benchmarks.aro import read_json_list
from eval.benchmarks.base import Benchmark, BenchmarkResult, MissingData
from eval import text_perturb
from eval.images import IMAGE_PERTURBATIONS, FileImage, ShuffledImage, resolve_files
from eval.metrics import recall_at_k
from eval.registry import register_benchmark
from eval.text_perturb import pre_caption

PARTS = {"coco": ("coco_karpathy_test.json", "coco_images"),
         "flickr30k": ("flickr30k_test.json", "flickr30k_images")}
KS = (1, 5, 10)


@register_benchmark
class Retrieval(Benchmark):
    name = "retrieval"
    needs_images = True
    primary = "coco/i2t_r1"
    option_names = ("parts", "max_images", "text_perturb", "image_perturb", "seed")

    def _load(self):
        wanted = tuple(self.options.get("parts", PARTS))
        present = [p for p in wanted if self.path(PARTS[p][0]).is_file()]
        if not present:
            raise MissingData(self.name, [str(self.path(PARTS[p][0])) for p in wanted], self.data_root)
        self.notes += [f"retrieval/{p} skipped: {self.path(PARTS[p][0])} not found" for p in wanted if p not in present]
        self.text_perturb = self.options.get("text_perturb")
        self.image_perturb = self.options.get("image_perturb")
        self.seed = int(self.options.get("seed", 0))
        if self.text_perturb not in (None, *text_perturb.PERTURBATIONS):
            raise ValueError(f"retrieval: text_perturb must be one of {text_perturb.PERTURBATIONS}")
        if self.image_perturb not in (None, *IMAGE_PERTURBATIONS):
            raise ValueError(f"retrieval: image_perturb must be one of {list(IMAGE_PERTURBATIONS)}")
        self.parts = {}
        for part in present:
            file, folder = PARTS[part]
            ann = read_json_list(self.path(file), ("image", "caption"))
            ann = ann[:self.options["max_images"]] if self.options.get("max_images") else ann
            paths = {}
            if self.require_images:
                paths, missing = resolve_files((a["image"] for a in ann),
                                               [self.path(folder), self.data_root / "aro" / folder])
                if missing:
                    raise MissingData(self.name, missing, self.data_root, images=True)
            self.parts[part] = (ann, paths)

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
            sim = (images @ cache.texts(texts).T).numpy()  # [images, texts]
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

