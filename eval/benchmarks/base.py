"""The one interface every benchmark implements, and the result it returns.

A benchmark is built by `load(data_root, **options)`, which reads its files (raising
`MissingData` listing every missing file and the command that fetches it) and holds its items.
`score(scorer)` embeds through an `EmbeddingCache` (a bare scorer is wrapped in one) and returns a
`BenchmarkResult`: `headline` (flat metric name -> value, what `eval.api.evaluate` reports as
`<benchmark>/<metric>`), `categories` (category -> metric -> value, the per-category tables),
optional per-instance records, and notes (skipped parts and why).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

from eval.cache import EmbeddingCache, as_cache


class MissingData(FileNotFoundError):
    """A benchmark's files are missing or unreadable; the message says which and how to fetch them."""

    def __init__(self, benchmark: str, missing: list[str], data_root: str | Path, images: bool = False):
        self.benchmark, self.missing = benchmark, missing
        listed = "\n  ".join(missing[:20] + ([f"... and {len(missing) - 20} more"] if len(missing) > 20 else []))
        super().__init__(
            f"{benchmark}: {len(missing)} required {'image' if images else 'file'}(s) missing under {data_root}:\n"
            f"  {listed}\nfetch them with: python -m eval download {benchmark} --data-root {data_root}"
            + (" --images" if images else ""))


class DataError(ValueError):
    """A benchmark file is present but malformed (the message names file, key and sample)."""


@dataclass
class BenchmarkResult:
    name: str
    headline: dict[str, float]
    categories: dict[str, dict[str, float]] = field(default_factory=dict)
    instances: Optional[list[dict[str, Any]]] = None
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self, with_instances: bool = False) -> dict[str, Any]:
        out = {"name": self.name, "headline": self.headline, "categories": self.categories,
               "counts": self.counts, "notes": self.notes}
        if with_instances and self.instances is not None:
            out["instances"] = self.instances
        return out


class Benchmark:
    """Base class: subclasses set `name`, `needs_images` and implement `_load` and `_score`."""

    name: ClassVar[str] = "benchmark"
    needs_images: ClassVar[bool] = True  # False: a text-only scorer still gets (some) metrics
    primary: ClassVar[str] = ""  # the headline metric used for radar charts
    option_names: ClassVar[tuple[str, ...]] = ()  # the options `load` accepts

    def __init__(self, data_root: str | Path, require_images: bool = True, **options):
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            raise ValueError(f"{self.name}: unknown option(s) {unknown}; accepted: {list(self.option_names) or 'none'}")
        self.data_root = Path(data_root)
        self.require_images = require_images
        self.options = options
        self.notes: list[str] = []

    @classmethod
    def load(cls, data_root: str | Path, require_images: bool = True, **options) -> "Benchmark":
        bench = cls(data_root, require_images=require_images, **options)
        bench._load()
        return bench

    def _load(self) -> None:
        raise NotImplementedError

    def _score(self, cache: EmbeddingCache, per_instance: bool) -> BenchmarkResult:
        raise NotImplementedError

    def score(self, scorer, per_instance: bool = False, progress: bool = True) -> BenchmarkResult:
        cache = as_cache(scorer, progress=progress)
        if self.needs_images and not cache.supports_images:
            return BenchmarkResult(self.name, {}, notes=[
                f"{self.name} skipped: it needs images and scorer '{cache.name}' is text-only"])
        result = self._score(cache, per_instance)
        result.notes = self.notes + result.notes
        return result

    # helpers for subclasses -------------------------------------------------------------
    def path(self, *parts: str) -> Path:
        return self.data_root.joinpath(self.name, *parts)

    def image_dirs(self, folder: str | None = None) -> list[Path]:
        """Where image files are looked up: `<bench>/images`, then the shared COCO folders."""
        own = self.path(folder or "images")
        coco = self.data_root / "coco"
        return [own, coco / "val2017", coco / "train2017"]

    def check_files(self, paths: list[Path]) -> None:
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise MissingData(self.name, missing, self.data_root)

