"""The one interface every benchmark implements, and the result it returns.

A benchmark is built by `load(data_root, **options)`, which first checks its files (`missing`:
existence, and pinned and recorded checksums (`eval.checksums.changed`); `MissingData` lists
every `Problem` with the command that fetches it) and then reads them and holds its items.
`missing` runs the same checks without loading anything, which is what `eval.api.missing_data`
calls for every benchmark at once. `score(scorer)` embeds through an `EmbeddingCache` (a bare
scorer is wrapped in one) and returns a `BenchmarkResult`: `headline` (flat metric name ->
value, what `eval.api.evaluate` reports as `<benchmark>/<metric>`), `categories` (category ->
metric -> value, the per-category tables), optional per-instance records, and notes (skipped
parts and why). `item_table(records)` rebuilds the per-item values behind the headline metrics
from those records, grouped by the unit items share (`eval.stats`); `eval.api.run` fills the
result's `intervals` from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

from compclip.errors import CompclipError, DataError
from compclip.eval.cache import EmbeddingCache, as_cache


@dataclass(frozen=True)
class Problem:
    """One thing a benchmark needs that is not there (or has changed), and how to get it.

    `download` names the `python -m eval download` target that fetches it (with `--images` when
    `images`); `manual` says what to do where nothing can fetch it (a licence sign-up)."""
    benchmark: str  # "aro" or a part, "aro/flickr30k_order"
    what: str  # "<file> not found", "1560 images not found (first: ...)", "<file> changed since ..."
    data_root: str
    download: Optional[str] = None
    images: bool = False
    manual: Optional[str] = None
    force: bool = False  # the file is there but changed: fetch again with --force

    @property
    def command(self) -> str:
        if self.download is None:
            return self.manual or "no automatic download"
        return (f"python -m eval download --benchmarks {self.download} --data-root {self.data_root}"
                + (" --images" if self.images else "") + (" --force" if self.force else ""))

    def line(self) -> str:
        return f"{self.benchmark}: {self.what} -> {self.command}"


def files_problem(benchmark: str, paths: list, data_root, images: bool = False,
                  download: Optional[str] = None) -> Optional[Problem]:
    """One problem for the absent files among `paths` (grouped by folder), or None."""
    missing = [Path(p) for p in paths if not Path(p).exists()]
    if not missing:
        return None
    folders = dict.fromkeys(p.parent for p in missing)
    if len(missing) == 1:
        what = f"{missing[0]} not found"
    elif len(folders) == 1:
        what = f"{len(missing)} files not found in {next(iter(folders))}: {', '.join(p.name for p in missing)}"
    else:
        what = f"{len(missing)} files not found: {', '.join(str(p) for p in missing)}"
    return Problem(benchmark, what, str(data_root), download or benchmark.split("/")[0], images)


def images_problem(benchmark: str, missing: list[str], dirs: list[Path], data_root,
                   download: Optional[str] = None, manual: Optional[str] = None) -> Optional[Problem]:
    """One problem for image files found in none of `dirs`, or None."""
    if not missing:
        return None
    where = ", ".join(str(d) for d in dirs)
    what = f"{len(missing)} image(s) not found (first: {Path(missing[0]).name}; looked in {where})"
    if manual:
        return Problem(benchmark, what, str(data_root), manual=manual)
    return Problem(benchmark, what, str(data_root), download or benchmark.split("/")[0], images=True)


def changed_problems(benchmark: str, paths: list, data_root, download: Optional[str] = None) -> list[Problem]:
    """Problems for files that differ from their pinned sha256 or their recorded download checksum
    (`eval.checksums.changed`)."""
    from compclip.eval import checksums
    root = Path(data_root)
    out = []
    for p in paths:
        p = Path(p)
        try:
            rel = p.relative_to(root).as_posix()
        except ValueError:
            continue
        what = checksums.changed(root, rel)
        if what:
            out.append(Problem(benchmark, what, str(root), download or benchmark.split("/")[0], force=True))
    return out


def download_commands(problems: list[Problem]) -> list[str]:
    """The fewest `python -m eval download` commands that fetch every fetchable problem."""
    out = []
    for force in (False, True):
        for images in (False, True):
            names = list(dict.fromkeys(p.download for p in problems if p.download and p.images == images
                                       and p.force == force))
            if names:
                root = next(p.data_root for p in problems if p.download)
                out.append(f"python -m eval download --benchmarks {','.join(names)} --data-root {root}"
                           + (" --images" if images else "") + (" --force" if force else ""))
    return out


def _state(problems: list) -> str:
    """What the problems are: files missing, files there but changed or unreadable, or both."""
    found = {p.force for p in problems if isinstance(p, Problem)}
    return {frozenset({True}): "changed or unreadable",
            frozenset({True, False}): "missing, changed or unreadable"}.get(frozenset(found), "missing")


class MissingData(CompclipError, FileNotFoundError, ValueError):
    """Benchmark files are missing or changed; the message lists every problem and how to fix it.

    `problems` holds the `Problem`s (or plain lines); one message covers every benchmark asked
    for, so a user sees everything at once; its first line says "missing", "changed or
    unreadable" (every problem is a file that is there), or "missing, changed or unreadable". A
    ValueError too, so callers that treat bad input as exit 2 catch it."""

    def __init__(self, problems: list, data_root: str | Path, skipped: list[str] = ()):
        self.problems, self.skipped = list(problems), list(skipped)
        self.lines = [p.line() if isinstance(p, Problem) else str(p) for p in self.problems]
        benches = list(dict.fromkeys(b.strip().split("/")[0] for p in self.problems if isinstance(p, Problem)
                                     for b in p.benchmark.split(",")))
        msg = (f"benchmark data {_state(self.problems)} under {data_root} for {', '.join(benches)} "
               f"(nothing was loaded or scored); {len(self.lines)} problem(s):\n  " + "\n  ".join(self.lines))
        commands = download_commands([p for p in self.problems if isinstance(p, Problem)])
        if commands:
            msg += "\nfetch everything that can be fetched with:\n  " + "\n  ".join(commands)
        if self.skipped:
            msg += "\nnot required (no automatic download; skipped with a note when scoring):\n  " + "\n  ".join(self.skipped)
        super().__init__(msg)

    def __str__(self) -> str:  # OSError would prefix an errno; keep the message as written
        return self.args[0]


# a benchmark file that is present but malformed raises `DataError` (compclip.errors); the
# message names file, key and sample


def read_text(path) -> str:
    """A benchmark's text file as UTF-8; `DataError` naming the file when it is not text or not readable."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except IsADirectoryError as e:
        raise DataError(f"{path}: a folder where a file is expected") from e


@dataclass
class BenchmarkResult:
    name: str
    headline: dict[str, float]
    categories: dict[str, dict[str, float]] = field(default_factory=dict)
    instances: Optional[list[dict[str, Any]]] = None
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> 95 % (low, high)
    table: Any = None  # the eval.stats.ItemTable the intervals come from (not serialised here)

    def as_dict(self, with_instances: bool = False) -> dict[str, Any]:
        out = {"name": self.name, "headline": self.headline, "categories": self.categories,
               "counts": self.counts, "notes": self.notes}
        if self.intervals:
            out["intervals"] = {k: list(v) for k, v in self.intervals.items()}
        if with_instances and self.instances is not None:
            out["instances"] = self.instances
        return out


class Benchmark:
    """Base class: subclasses set `name`, `needs_images` and implement `_load` and `_score`."""

    name: ClassVar[str] = "benchmark"
    needs_images: ClassVar[bool] = True  # False: a text-only scorer still gets (some) metrics
    primary: ClassVar[str] = ""  # the headline metric used for radar charts
    option_names: ClassVar[tuple[str, ...]] = ()  # the options `load` accepts
    data_folders: ClassVar[tuple[str, ...]] = ()  # the data-root folders its files are in; () = (name,)

    @classmethod
    def folders(cls) -> tuple[str, ...]:
        """The data-root folders whose files this benchmark reads (`eval.scorecache` hashes them)."""
        return cls.data_folders or (cls.name,)

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
        """Check the files (`MissingData` listing every problem), then read them."""
        bench = cls(data_root, require_images=require_images, **options)
        problems = bench._missing()
        if problems:
            raise MissingData(problems, data_root)
        bench._load()
        return bench

    @classmethod
    def missing(cls, data_root: str | Path, require_images: bool = True, **options) -> list[Problem]:
        """What `load` would find missing or changed, without loading anything (existence and
        checksum checks; annotation files are read only to list the images they need)."""
        return cls.check(data_root, require_images, **options)[0]

    @classmethod
    def check(cls, data_root: str | Path, require_images: bool = True, **options) -> tuple[list[Problem], list[str]]:
        """(`missing`'s problems, notes on parts that scoring will skip: those needing a manual step)."""
        bench = cls(data_root, require_images=require_images, **options)
        return bench._missing(), list(getattr(bench, "skip_notes", []))

    def _missing(self) -> list[Problem]:
        """Problems with this benchmark's files; the same rules `_load` relies on."""
        raise NotImplementedError

    def _load(self) -> None:
        raise NotImplementedError

    def _score(self, cache: EmbeddingCache, per_instance: bool) -> BenchmarkResult:
        raise NotImplementedError

    @classmethod
    def item_table(cls, instances: list[dict]):
        """The per-item values behind the headline metrics (an `eval.stats.ItemTable`), rebuilt
        from `_score`'s per-item records; None where the benchmark keeps no records (no intervals)."""
        return None

    def score(self, scorer, per_instance: bool = False, progress: bool = True) -> BenchmarkResult:
        cache = as_cache(scorer, progress=progress)
        if self.needs_images and not cache.supports_images:
            return BenchmarkResult(self.name, {}, notes=[
                f"{self.name} skipped: it needs images and scorer '{cache.name}' is text-only"])
        with cache.labelled(self.name):
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

    def file_problems(self, paths: list[Path], images: bool = False, download: Optional[str] = None) -> list[Problem]:
        """Absent files (one problem) or files that differ from their pin or recorded download."""
        absent = files_problem(self.name, paths, self.data_root, images=images, download=download)
        if absent:
            return [absent]
        return changed_problems(self.name, paths, self.data_root, download=download)

