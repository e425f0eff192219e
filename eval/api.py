"""Python entry points: score a scorer on named benchmarks; write reports.

    from eval.api import evaluate
    metrics = evaluate(OpenClipScorer.from_loaded(loaded), ["sugarcrepe", "visla"], "data/")
    # {"sugarcrepe/macro": 0.73, "visla/generic/i2t": 0.41, ...}

`evaluate` is what the trainer calls every epoch (it prefixes the names with `eval/`): flat
`<benchmark>/<metric>` names, one embedding cache shared by all benchmarks of the call, so a
text or image common to several benchmarks is encoded once. `run` returns the full
`BenchmarkResult`s for reports (`eval.report.write_reports`).
"""
from __future__ import annotations

import json
import logging
from typing import Optional

from eval.benchmarks.base import BenchmarkResult
from eval.cache import EmbeddingCache
from eval.registry import get_benchmark

log = logging.getLogger(__name__)
_LOADED: dict[tuple, object] = {}  # loaded benchmarks, reused by later calls (the trainer's epochs)


def load_benchmark(name: str, data_root: str, require_images: bool, options: dict, reuse: bool = True):
    """A loaded benchmark; with `reuse`, one loaded earlier in this process with the same
    arguments is returned (files are read and captions tagged once per process, not per epoch)."""
    key = (name, str(data_root), require_images, json.dumps(options, sort_keys=True, default=str))
    if not reuse or key not in _LOADED:
        _LOADED[key] = get_benchmark(name).load(data_root, require_images=require_images, **options)
    return _LOADED[key]


def run(scorer, benchmarks: list[str], data_root: str, options: Optional[dict[str, dict]] = None,
        progress: bool = True, per_instance: bool = False, batch_size: int = 256,
        reuse: bool = True) -> dict[str, BenchmarkResult]:
    """Load and score each benchmark; a text-only scorer skips image-only benchmarks with a note."""
    if not data_root:
        raise ValueError("data_root is required (the folder holding the benchmarks, see docs/benchmark_data.md)")
    options = options or {}
    unknown = set(options) - set(benchmarks)
    if unknown:
        raise ValueError(f"options given for benchmark(s) not requested: {sorted(unknown)}")
    cache = scorer if isinstance(scorer, EmbeddingCache) else EmbeddingCache(scorer, batch_size, progress)
    results = {}
    for name in benchmarks:
        cls = get_benchmark(name)
        if cls.needs_images and not cache.supports_images:
            results[name] = BenchmarkResult(name, {}, notes=[
                f"{name} skipped: it needs images and scorer '{cache.name}' is text-only"])
            log.info(results[name].notes[0])
            continue
        bench = load_benchmark(name, data_root, cache.supports_images, options.get(name, {}), reuse)
        results[name] = bench.score(cache, per_instance=per_instance)
        for note in results[name].notes:
            log.info(note)
    return results


def flatten(results: dict[str, BenchmarkResult]) -> dict[str, float]:
    return {f"{name}/{metric}": float(value) for name, r in results.items() for metric, value in r.headline.items()}


def evaluate(scorer, benchmarks: list[str], data_root: str, options: Optional[dict[str, dict]] = None,
             progress: bool = True) -> dict[str, float]:
    """Flat `{"<benchmark>/<metric>": value}` for the given scorer (accuracies in [0, 1])."""
    return flatten(run(scorer, benchmarks, data_root, options, progress))
