"""Regression guard: zero-shot classification on CIFAR-10, CIFAR-100 and ImageNet (val).

Files under `<root>/zeroshot/`: `cifar-10-batches-py/{test_batch,batches.meta}` and
`cifar-100-python/{test,meta}` (the official python pickles as the CIFAR tarballs unpack), and
`imagenet/val/<wnid>/<images>` (1000 class folders; sorted wnid order = open_clip's
`IMAGENET_CLASSNAMES` order). Class prompts use open_clip's OpenAI ImageNet templates
(`templates: simple` for its 2-template set); a class embedding is the normalised mean of its
normalised prompt embeddings. Top-1 (and top-5) accuracy by argmax. CIFAR files that are absent
are missing (`MissingData`); ImageNet, which needs a licence, is skipped with a note unless
named in `datasets`. `max_images` keeps the first N test images of each dataset.

The CIFAR pickles are read by `CifarUnpickler`, which resolves only the globals the official
files reference (numpy's array reconstruction: `numpy.core.multiarray._reconstruct` or its numpy 2
spelling `numpy._core.multiarray._reconstruct`, `numpy.ndarray`, `numpy.dtype`); a pickle that
names any other is refused when it names it, before calling it (`DataError` naming the file), so
a file planted in a shared data root runs no code.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from compclip.eval.benchmarks.base import Benchmark, BenchmarkResult, DataError, Problem, files_problem
from compclip.eval.images import ArrayImage, FileImage
from compclip.eval.registry import register_benchmark

DATASETS = {"cifar10": "cifar-10-batches-py/test_batch", "cifar100": "cifar-100-python/test",
            "imagenet": "imagenet/val"}
MANUAL = {"imagenet": "ImageNet needs a licence: put the validation set as <root>/zeroshot/imagenet/val/<wnid>/*.JPEG"}

try:  # numpy 2 (numpy.core is its deprecated alias)
    from numpy._core.multiarray import _reconstruct
except ImportError:  # numpy 1
    from numpy.core.multiarray import _reconstruct

ALLOWED_GLOBALS = {("numpy.core.multiarray", "_reconstruct"): _reconstruct,
                   ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
                   ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that resolves only `ALLOWED_GLOBALS` (what the official CIFAR pickles name)."""

    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which no official CIFAR file does; "
                                         "refused without calling it")
        return ALLOWED_GLOBALS[module, name]


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            data = CifarUnpickler(f, encoding="latin1").load()
    except Exception as e:
        raise DataError(f"{path}: not a CIFAR python pickle ({e})") from e
    if not isinstance(data, dict):
        raise DataError(f"{path}: not a CIFAR python pickle (it holds a {type(data).__name__}, not a dict)")
    return data


def load_cifar(root: Path, which: str):
    """(images [N, 32, 32, 3] uint8, labels, class names) from the official pickles."""
    if which == "cifar10":
        data, meta, label_key, names_key = root / "cifar-10-batches-py/test_batch", \
            root / "cifar-10-batches-py/batches.meta", "labels", "label_names"
    else:
        data, meta, label_key, names_key = root / "cifar-100-python/test", \
            root / "cifar-100-python/meta", "fine_labels", "fine_label_names"
    d, m = _unpickle(data), _unpickle(meta)
    for key, src, path in (("data", d, data), (label_key, d, data), (names_key, m, meta)):
        if key not in src:
            raise DataError(f"{path}: missing key '{key}'")
    try:
        images = np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    except (ValueError, TypeError) as e:
        raise DataError(f"{data}: 'data' is not N x 3072 bytes of 32x32 RGB images ({e})") from e
    if len(d[label_key]) != len(images):
        raise DataError(f"{data}: {len(images)} images but {len(d[label_key])} labels")
    return images, list(d[label_key]), [n.replace("_", " ") for n in m[names_key]]


def load_imagenet(root: Path):
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES  # open_clip imported only when scoring
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset
    classes, class_to_idx = find_classes(str(root))
    if len(classes) != len(IMAGENET_CLASSNAMES):
        raise DataError(f"{root}: expected {len(IMAGENET_CLASSNAMES)} class folders, found {len(classes)}")
    samples = make_dataset(str(root), class_to_idx, extensions=IMG_EXTENSIONS)
    return [p for p, _ in samples], [y for _, y in samples], list(IMAGENET_CLASSNAMES)


@register_benchmark
class ZeroShot(Benchmark):
    name = "zeroshot"
    needs_images = True
    primary = "imagenet/top1"
    option_names = ("datasets", "templates", "max_images")

    def _missing(self):
        root = self.path()
        explicit = "datasets" in self.options
        wanted = tuple(self.options.get("datasets", DATASETS))
        if set(wanted) - set(DATASETS):
            raise ValueError(f"zeroshot: unknown dataset(s) {sorted(set(wanted) - set(DATASETS))}; known: {list(DATASETS)}")
        self.present, self.skip_notes, problems = [], [], []
        for d in wanted:
            path = root / DATASETS[d]
            if path.exists():
                self.present.append(d)
            elif d in MANUAL and not explicit:
                self.skip_notes.append(f"zeroshot/{d} skipped: {path} not found; {MANUAL[d].replace('<root>', str(self.data_root))}"
                                       f"; to require it: --options '{{\"zeroshot\": {{\"datasets\": [\"{d}\"]}}}}'")
            elif d in MANUAL:
                problems.append(Problem(f"zeroshot/{d}", f"{path} not found", str(self.data_root),
                                        manual=MANUAL[d].replace("<root>", str(self.data_root))))
            else:
                problems.append(files_problem(f"zeroshot/{d}", [path], self.data_root, download="zeroshot"))
        if not problems:
            self._read_sets()  # every file read here, so a damaged one is a data problem before any scoring
        return problems

    def _load(self):
        self.notes += self.skip_notes
        if not self.present:
            raise DataError(f"zeroshot: no dataset left to score ({'; '.join(self.skip_notes)})")

    def _read_sets(self):
        root = self.path()
        from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES, SIMPLE_IMAGENET_TEMPLATES
        templates = self.options.get("templates", "openai")
        self.templates = SIMPLE_IMAGENET_TEMPLATES if templates == "simple" else OPENAI_IMAGENET_TEMPLATES
        limit = self.options.get("max_images")
        self.sets = {}
        for d in self.present:
            if d == "imagenet":
                paths, labels, names = load_imagenet(root / DATASETS[d])
                refs = [FileImage(p) for p in paths]
            else:
                images, labels, names = load_cifar(root, d)
                refs = [ArrayImage(d, i, images) for i in range(len(images))]
            self.sets[d] = (refs[:limit], labels[:limit], names)

    def _score(self, cache, per_instance):
        import torch
        import torch.nn.functional as F
        headline, categories = {}, {}
        for d, (refs, labels, names) in self.sets.items():
            cache.label = f"{self.name}/{d}"  # names the progress bars
            prompts = [t(c) for c in names for t in self.templates]
            emb = cache.texts(prompts).view(len(names), len(self.templates), -1)
            classifier = F.normalize(F.normalize(emb, dim=-1).mean(1), dim=-1)
            logits = cache.images(refs) @ classifier.T
            y = torch.tensor(labels)
            top = logits.topk(min(5, len(names)), dim=-1).indices
            headline[f"{d}/top1"] = float((logits.argmax(-1) == y).float().mean())
            headline[f"{d}/top5"] = float((top == y[:, None]).any(-1).float().mean())
            categories[d] = {"top1": headline[f"{d}/top1"], "top5": headline[f"{d}/top5"], "n": len(refs)}
        return BenchmarkResult(self.name, headline, categories,
                               counts={d: len(s[0]) for d, s in self.sets.items()})
