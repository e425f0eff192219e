"""Bootstrap intervals over a benchmark's items, resampled by the unit items share.

A benchmark turns its per-item records into an `ItemTable` (`Benchmark.item_table`): `clusters`,
one id per item naming the unit that is resampled (the image items share, BiVLC's 2x2 row), and
per headline metric a `Metric`: one value per item (1 / 0 for correct / wrong, ARO-Order's share
of seeds correct) and its parts, disjoint item index arrays. A metric is the mean over its parts of
each part's mean value: one part is an accuracy (a subset, `micro`), several a macro average.

`replicates` draws `RESAMPLES` bootstrap samples of the clusters (with replacement, as many as
there are, from `numpy.random.default_rng(seed)`) and recomputes every metric on each, all metrics
of a call on the same draws (so the difference of two models' metrics is a paired bootstrap). A
part a sample misses is left out of that sample's macro average. `intervals` gives the
percentile interval (`LEVEL` = 95 %) per metric. Point estimates are the benchmark's own numbers;
nothing here changes them.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 1000
SEED = 0
_CHUNK = 2 ** 22  # counts per block of resamples (memory bound: 8 bytes each)


@dataclass(frozen=True)
class Metric:
    values: np.ndarray  # one float per item
    parts: tuple[np.ndarray, ...]  # disjoint item index arrays

    def point(self) -> float:
        return float(np.mean([self.values[p].mean() for p in self.parts]))

    @property
    def binary(self) -> bool:
        """One part of 0 / 1 values: an accuracy over items (McNemar's test applies)."""
        return len(self.parts) == 1 and bool(np.isin(self.values[self.parts[0]], (0.0, 1.0)).all())


@dataclass(frozen=True)
class ItemTable:
    clusters: np.ndarray  # int id per item, 0 .. n_clusters - 1
    metrics: dict[str, Metric]

    @property
    def n_clusters(self) -> int:
        return int(self.clusters.max()) + 1 if len(self.clusters) else 0


def cluster_ids(keys: Sequence) -> np.ndarray:
    """0-based ids of the distinct keys (sorted order), one per item."""
    return np.unique(np.asarray(keys, dtype=str), return_inverse=True)[1].ravel().astype(np.int64)


def index_by(keys: Sequence) -> dict[str, np.ndarray]:
    """{key: indices of the items with it}, keys in sorted order."""
    keys = np.asarray(keys, dtype=str)
    return {str(k): np.flatnonzero(keys == k) for k in np.unique(keys)}


def metric(values, *parts) -> Metric:
    """A `Metric` from per-item values (bools or floats) and its parts (index arrays or masks)."""
    values = np.asarray(values, dtype=np.float64)
    idx = tuple(np.flatnonzero(p) if np.asarray(p).dtype == bool else np.asarray(p, dtype=np.int64) for p in parts)
    return Metric(values, tuple(p for p in idx if len(p)))


def resample_counts(n_clusters: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """[resamples, n_clusters] times each cluster is drawn (n_clusters draws with replacement)."""
    draws = rng.integers(0, n_clusters, size=(resamples, n_clusters))
    draws += np.arange(resamples)[:, None] * n_clusters
    return np.bincount(draws.ravel(), minlength=resamples * n_clusters).reshape(resamples, n_clusters)


def _sums(m: Metric, clusters: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster value sums and item counts of each part: two [n_clusters, parts] arrays."""
    s = np.stack([np.bincount(clusters[p], weights=m.values[p], minlength=n) for p in m.parts], axis=1)
    c = np.stack([np.bincount(clusters[p], minlength=n) for p in m.parts], axis=1).astype(np.float64)
    return s, c


def replicates(metrics: Sequence[Metric], clusters: np.ndarray, resamples: int = RESAMPLES,
               seed: int = SEED) -> np.ndarray:
    """[len(metrics), resamples] bootstrap values, every metric on the same cluster draws."""
    n = int(clusters.max()) + 1
    sums = [_sums(m, clusters, n) for m in metrics]
    out = np.empty((len(metrics), resamples))
    rng = np.random.default_rng(seed)
    step = max(1, _CHUNK // n)
    for start in range(0, resamples, step):
        counts = resample_counts(n, min(step, resamples - start), rng).astype(np.float64)
        for i, (s, c) in enumerate(sums):
            den = counts @ c
            with warnings.catch_warnings():  # 0 / 0: a part the sample missed; all missed: NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                acc = np.where(den > 0, (counts @ s) / np.maximum(den, 1), np.nan)
                out[i, start:start + len(counts)] = np.nanmean(acc, axis=1)
    return out


def percentile_interval(reps: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The central `level` percentile interval of bootstrap values (NaN samples dropped)."""
    reps = reps[~np.isnan(reps)]
    if not len(reps):
        return float("nan"), float("nan")
    lo, hi = np.percentile(reps, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def intervals(table: ItemTable, resamples: int = RESAMPLES, seed: int = SEED,
              level: float = LEVEL) -> dict[str, tuple[float, float]]:
    """{metric: (low, high)} for every metric of the table."""
    names = [k for k, m in table.metrics.items() if m.parts]
    if not names:
        return {}
    reps = replicates([table.metrics[k] for k in names], table.clusters, resamples, seed)
    return {k: percentile_interval(r, level) for k, r in zip(names, reps)}


def half_widths(found: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """{name: (high - low) / 2} for {name: (low, high)}."""
    return {k: (float(hi) - float(lo)) / 2 for k, (lo, hi) in found.items()}


def save_tables(tables: Mapping[str, ItemTable], path) -> None:
    """The item tables of one model's benchmarks in one compressed `.npz` (what `eval compare`
    reads from a report folder): per benchmark its clusters, per metric its values and a part
    number per item (-1: in no part)."""
    arrays = {}
    for bench, t in tables.items():
        arrays[f"{bench}|clusters"] = t.clusters
        for name, m in t.metrics.items():
            part = np.full(len(m.values), -1, dtype=np.int32)
            for i, p in enumerate(m.parts):
                part[p] = i
            binary = np.isin(m.values, (0.0, 1.0)).all()
            arrays[f"{bench}|{name}|values"] = m.values.astype(bool) if binary else m.values
            arrays[f"{bench}|{name}|part"] = part
    np.savez_compressed(path, **arrays)


def load_tables(path) -> dict[str, ItemTable]:
    """`save_tables`'s file back as {benchmark: ItemTable}."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    out: dict[str, ItemTable] = {}
    for key in arrays:
        bench, *rest = key.split("|")
        if rest == ["clusters"]:
            out[bench] = ItemTable(arrays[key].astype(np.int64), {})
    for key, values in arrays.items():
        bench, *rest = key.split("|")
        if len(rest) == 2 and rest[1] == "values":
            part = arrays[f"{bench}|{rest[0]}|part"]
            parts = tuple(np.flatnonzero(part == i) for i in range(int(part.max()) + 1))
            out[bench].metrics[rest[0]] = Metric(values.astype(np.float64), parts)
    return out
