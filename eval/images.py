"""Image references: what a benchmark item points at, hashable, opened only when encoded.

The embedding cache keys images by `ref.key`, so an image file (with its crop box), a row of a
saved Hugging Face dataset or an in-memory array is encoded once per run however many items
share it. `open()` returns an RGB PIL image.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from PIL import Image


@dataclass(frozen=True)
class FileImage:
    """An image file, optionally cropped to an (x, y, w, h) box as ARO's loaders do."""
    path: str
    box: Optional[tuple[float, float, float, float]] = None

    @property
    def key(self):
        return ("file", self.path, self.box)

    def open(self) -> Image.Image:
        try:
            image = Image.open(self.path).convert("RGB")
        except (OSError, ValueError) as e:
            raise ValueError(f"{self.path}: cannot read image ({e})") from e
        if self.box is not None:
            x, y, w, h = self.box
            image = image.crop((x, y, x + w, y + h))
        return image


@lru_cache(maxsize=8)
def _saved_column(path: str, column: str):
    """One image column of a saved dataset, so that opening a row decodes one image only."""
    import datasets
    ds = datasets.load_from_disk(path)
    ds = ds["test"] if isinstance(ds, datasets.DatasetDict) else ds
    return ds.select_columns([column])


@dataclass(frozen=True)
class DatasetImage:
    """An image column of one row of a dataset saved with `datasets.Dataset.save_to_disk`."""
    path: str
    row: int
    column: str

    @property
    def key(self):
        return ("hf", self.path, self.row, self.column)

    def open(self) -> Image.Image:
        value = _saved_column(self.path, self.column)[self.row][self.column]
        if not isinstance(value, Image.Image):
            raise ValueError(f"{self.path}: row {self.row} column '{self.column}' is not an image")
        return value.convert("RGB")


@dataclass(frozen=True)
class ArrayImage:
    """Row `index` of an in-memory image collection (e.g. torchvision CIFAR); keyed by name+index."""
    name: str
    index: int
    source: Any = field(compare=False, hash=False, repr=False)

    @property
    def key(self):
        return ("array", self.name, self.index)

    def open(self) -> Image.Image:
        image = self.source[self.index]
        image = image[0] if isinstance(image, tuple) else image
        return image if isinstance(image, Image.Image) else Image.fromarray(image).convert("RGB")


def resolve_files(names, dirs: list[Path]) -> tuple[dict[str, str], list[str]]:
    """{name: path of the first `dir/name` that exists}, and the names found nowhere (as they
    would sit in the first folder)."""
    found, missing = {}, []
    for name in dict.fromkeys(names):
        path = next((d / name for d in dirs if (d / name).is_file()), None)
        if path is None:
            missing.append(str(dirs[0] / name))
        else:
            found[name] = str(path)
    return found, missing


IMAGE_PERTURBATIONS = {"shuffle_rows_4": (4, 1), "shuffle_cols_4": (1, 4), "shuffle_patches_9": (3, 3)}


@dataclass(frozen=True)
class ShuffledImage:
    """`ref` cut into a rows x cols grid whose cells are permuted (ARO's image perturbations,
    applied to the PIL image before the model's preprocessing); seeded per image."""
    ref: Any
    kind: str
    seed: int = 0

    @property
    def key(self):
        return ("shuffled", self.ref.key, self.kind, self.seed)

    def open(self) -> Image.Image:
        import zlib

        import numpy as np
        rows, cols = IMAGE_PERTURBATIONS[self.kind]
        image = np.asarray(self.ref.open())
        h, w = image.shape[0] // rows * rows, image.shape[1] // cols * cols
        cells = [image[r * h // rows:(r + 1) * h // rows, c * w // cols:(c + 1) * w // cols]
                 for r in range(rows) for c in range(cols)]
        rng = np.random.default_rng([self.seed, zlib.crc32(repr(self.ref.key).encode())])
        order = rng.permutation(len(cells))
        grid = [np.concatenate([cells[order[r * cols + c]] for c in range(cols)], axis=1) for r in range(rows)]
        return Image.fromarray(np.ascontiguousarray(np.concatenate(grid, axis=0)))
