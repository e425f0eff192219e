"""Python entry points: score a scorer on named benchmarks; write reports.

    from compclip.eval.api import evaluate
    metrics = evaluate(OpenClipScorer.from_loaded(loaded), ["sugarcrepe", "visla"], "data/")
    # {"sugarcrepe/macro": 0.73, "visla/generic/i2t": 0.41, ...}

`evaluate` is what the trainer calls every epoch (it prefixes the names with `eval/`): flat
`<benchmark>/<metric>` names (their 95 % intervals in the result's `intervals`), one embedding
cache shared by all benchmarks of the call, so a text or image common to several benchmarks is
encoded once. `run` returns the full
`BenchmarkResult`s for reports (`eval.report.write_reports`).

Data checks, for a start-up check before any model is loaded (no model, no scoring; file
existence, pinned and recorded checksums (`eval.checksums`), and annotation files read to list
the images they need):

    problems = missing_data(["visla", "aro"], "data/")   # [] when everything is there
    check_data(["visla", "aro"], "data/")                # raises MissingData listing every problem

`run` calls `check_data` for the benchmarks it has not loaded yet before scoring any of them.
A benchmark that still fails while it is loaded or scored raises as it is, unless `run` is given
a `failures` dict: then the failure is recorded there and the other benchmarks are scored (what
`python -m eval score` does, to write the report of what was scored before exiting with status 3).
"""
from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Optional

from compclip.cli import InputError
from compclip.eval.benchmarks.base import BenchmarkResult, DataError, MissingData, Problem
from compclip.eval.cache import EmbeddingCache
from compclip.eval.registry import get_benchmark, list_benchmarks

__all__ = ["MissingData", "UnknownBenchmark", "check_data", "evaluate", "flatten", "flatten_intervals",
           "missing_data", "run", "validate_names"]

log = logging.getLogger(__name__)
_LOADED: dict[tuple, object] = {}  # loaded benchmarks, reused by later calls (the trainer's epochs)


def load_benchmark(name: str, data_root: str, require_images: bool, options: dict, reuse: bool = True):
    """A loaded benchmark; with `reuse`, one loaded earlier in this process with the same
    arguments is returned (files are read and captions tagged once per process, not per epoch)."""
    key = _key(name, data_root, require_images, options)
    if not reuse or key not in _LOADED:
        _LOADED[key] = get_benchmark(name).load(data_root, require_images=require_images, **options)
    return _LOADED[key]


def _key(name: str, data_root, require_images: bool, options: dict) -> tuple:
    return (name, str(data_root), require_images, json.dumps(options, sort_keys=True, default=str))


class UnknownBenchmark(InputError, ValueError):
    """A benchmark name (or an options key) that names no registered benchmark."""


def validate_names(benchmarks: list[str], options: Optional[dict] = None) -> dict:
    """The options, once every benchmark name and options key is known (`UnknownBenchmark` else)."""
    known = list_benchmarks()
    unknown = [b for b in benchmarks if b not in known]
    if unknown:
        import difflib
        close = [c for u in unknown for c in difflib.get_close_matches(u, known, n=1)]
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UnknownBenchmark(f"unknown benchmark{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                               f"{hint}known: {', '.join(known)}")
    options = options or {}
    extra = set(options) - set(benchmarks)
    if extra:
        raise UnknownBenchmark(f"options given for benchmark(s) not requested: {sorted(extra)}; add them to the "
                               "benchmarks or drop their options")
    return options


def problems(benchmarks: list[str], data_root, options: Optional[dict] = None,
             require_images: bool = True) -> list[Problem]:
    """Every `Problem` of every benchmark asked for (see `missing_data`)."""
    return _check(benchmarks, data_root, options, require_images)[0]


def _check(benchmarks: list[str], data_root, options: Optional[dict] = None,
           require_images: bool = True) -> tuple[list[Problem], list[str]]:
    if not data_root:
        raise ValueError("data_root is required (the folder holding the benchmarks, see docs/benchmark_data.md)")
    options = validate_names(list(benchmarks), options)
    out: list[Problem] = []
    skipped: list[str] = []
    for name in dict.fromkeys(benchmarks):
        cls = get_benchmark(name)
        if cls.needs_images and not require_images:
            continue  # a text-only scorer skips it: nothing of it is needed
        try:
            found, notes = cls.check(data_root, require_images, **options.get(name, {}))
            out += found
            skipped += notes
        except (DataError, UnicodeDecodeError, OSError) as e:  # present but unreadable: a data problem
            what = f"malformed: {e}" if isinstance(e, DataError) else f"unreadable: {type(e).__name__}: {e}"
            out.append(Problem(name, what, str(data_root), DOWNLOAD_TARGET.get(name, name), force=True))
    merged: dict[tuple, Problem] = {}  # the same file missing for two benchmarks: one line naming both
    for p in out:
        key = (p.what, p.command)
        merged[key] = replace(merged[key], benchmark=f"{merged[key].benchmark}, {p.benchmark}") if key in merged else p
    return list(merged.values()), skipped


DOWNLOAD_TARGET = {"visla_lexical": "visla", "left_right": "aro"}


def missing_data(benchmarks: list[str], data_root, options: Optional[dict] = None,
                 require_images: bool = True) -> list[str]:
    """One line per problem (the missing or changed file / folder, and the command that fetches
    it, or the manual step), empty when everything the benchmarks need is there.

    Loads no model and scores nothing: it checks files exist, verifies the published files'
    pinned sha256 (not in a root marked as local data) and the checksums recorded at download
    (`eval.checksums.changed`), and reads annotation files only to list the images they refer
    to. With `require_images=False` (a text-only scorer) image-only benchmarks are not checked, as
    `run` would skip them. Parts that need a manual licence step (ARO / retrieval Flickr30k,
    zero-shot ImageNet) are not missing unless named in the options; they are skipped with a
    note when scored. Unknown benchmark names or options raise ValueError."""
    return [p.line() for p in problems(benchmarks, data_root, options, require_images)]


def check_data(benchmarks: list[str], data_root, options: Optional[dict] = None,
               require_images: bool = True) -> None:
    """Raise `MissingData` (a ValueError) listing every problem of every benchmark at once."""
    found, skipped = _check(benchmarks, data_root, options, require_images)
    if found:
        raise MissingData(found, data_root, skipped)


def run(scorer, benchmarks: list[str], data_root: str, options: Optional[dict[str, dict]] = None,
        progress: bool = True, per_instance: bool = False, batch_size: int = 256,
        reuse: bool = True, failures: Optional[dict[str, BaseException]] = None,
        score_cache=None) -> dict[str, BenchmarkResult]:
    """Check every benchmark's data (`MissingData` lists all problems before anything is
    encoded), then load and score each; a text-only scorer skips image-only benchmarks with a note.
    With `failures`, a benchmark that fails while loaded or scored is recorded there
    ({name: exception}) and left out of the results, and the others are scored.
    With `score_cache` (an `eval.scorecache.ScoreCache`) and a scorer carrying a `cache_identity`,
    a benchmark whose entry is there is neither loaded nor scored, and one that is scored is stored
    (with its per-item records)."""
    options = validate_names(list(benchmarks), options)
    if not data_root:
        raise ValueError("data_root is required (the folder holding the benchmarks, see docs/benchmark_data.md)")
    cache = scorer if isinstance(scorer, EmbeddingCache) else EmbeddingCache(scorer, batch_size, progress)
    images = cache.supports_images
    unchecked = [b for b in benchmarks if not (reuse and _key(b, data_root, images, options.get(b, {})) in _LOADED)]
    check_data(unchecked, data_root, {b: o for b, o in options.items() if b in unchecked}, images)
    results = {}
    for name in benchmarks:
        cls = get_benchmark(name)
        if cls.needs_images and not cache.supports_images:
            results[name] = BenchmarkResult(name, {}, notes=[
                f"{name} skipped: it needs images and scorer '{cache.name}' is text-only"])
            log.info(results[name].notes[0])
            continue
        try:
            results[name] = _score_one(cls, cache, data_root, options.get(name, {}), per_instance, reuse, score_cache)
        except Exception as err:  # noqa: BLE001 -- recorded for the caller, who reports it
            if failures is None:
                raise
            failures[name] = err
            continue
        if cache.precision != "fp32":
            results[name].notes.append(f"{name}: scored in {cache.precision} (towers and score arithmetic)")
        for note in results[name].notes:
            log.info(note)
    return results


def _score_one(cls, cache: EmbeddingCache, data_root, options: dict, per_instance: bool, reuse: bool,
               score_cache) -> BenchmarkResult:
    identity = getattr(cache.scorer, "cache_identity", None)
    if score_cache is None or not identity:
        bench = load_benchmark(cls.name, data_root, cache.supports_images, options, reuse)
        result = bench.score(cache, per_instance=True)
    else:
        key = score_cache.key(identity, cls, data_root, options, cache.supports_images)
        result = score_cache.get(key)
        if result is not None:
            log.info("%s: scores from the score cache (%s)", cls.name, score_cache.path(key))
        else:  # read afresh: what is stored must be what the hashed files hold, not an earlier load
            bench = load_benchmark(cls.name, data_root, cache.supports_images, options, reuse=False)
            result = bench.score(cache, per_instance=True)
            score_cache.put(key, result)
    return with_intervals(cls, replace(result, notes=list(result.notes)), per_instance)


def with_intervals(cls, result: BenchmarkResult, per_instance: bool) -> BenchmarkResult:
    """`result` with its item table and 95 % intervals (`eval.stats`) from its per-item records,
    which it keeps only with `per_instance`."""
    from compclip.eval import stats
    table = cls.item_table(result.instances or [])
    found = stats.intervals(table) if table is not None else {}
    return replace(result, table=table, instances=result.instances if per_instance else None,
                   intervals={k: v for k, v in found.items() if k in result.headline})


def flatten(results: dict[str, BenchmarkResult]) -> dict[str, float]:
    return {f"{name}/{metric}": float(value) for name, r in results.items() for metric, value in r.headline.items()}


def flatten_intervals(results: dict[str, BenchmarkResult]) -> dict[str, tuple[float, float]]:
    """`flatten`'s names -> their 95 % interval (low, high), for the metrics that have one."""
    return {f"{name}/{metric}": value for name, r in results.items() for metric, value in r.intervals.items()}


class Scores(dict):
    """`evaluate`'s flat {name: value}; `intervals` holds {name: (low, high)}, the 95 % bootstrap
    intervals of the metrics that have one (`eval.stats`), and `tables` {benchmark: ItemTable},
    the per-item values behind them."""

    def __init__(self, values: dict, intervals: dict, tables: Optional[dict] = None):
        super().__init__(values)
        self.intervals = intervals
        self.tables = tables or {}


def evaluate(scorer, benchmarks: list[str], data_root: str, options: Optional[dict[str, dict]] = None,
             progress: bool = True) -> Scores:
    """Flat `{"<benchmark>/<metric>": value}` for the given scorer (accuracies in [0, 1]), a dict
    whose `intervals` attribute gives the 95 % intervals by the same names."""
    results = run(scorer, benchmarks, data_root, options, progress)
    return Scores(flatten(results), flatten_intervals(results),
                  {name: r.table for name, r in results.items() if r.table is not None})
