"""Paired comparison of models scored on the same items: differences, intervals, tests.

    python -m eval compare runs/clip_ft runs/negclip --benchmarks sugarcrepe,visla --data-root data
    python -m eval compare reports/clip reports/negclip --out compare/

Each argument is a checkpoint (a file, a pointer file, a run's `checkpoints/` folder or the run
folder: its `latest`, as `eval score --pretrained` reads them) or a report folder written by
`eval score --out` (every model in it, in its `summary.json` order; the per-item values come from
its `<model>.items.npz`). A checkpoint whose benchmarks are all in the score cache
(`eval.scorecache`) is not loaded; otherwise it is scored (and cached). The first model is the
baseline: for every other model B and every metric compared (each benchmark's primary metric, or
`--metrics`), `compare` gives B - A with a 95 % paired bootstrap interval (both models' metric on
the same resampled clusters, `eval.stats`) and a two-sided test: McNemar's exact test
(`scipy.stats.binomtest` on the items one model gets right and the other wrong) for a metric that
is an accuracy over items, a paired bootstrap test (the share of resampled differences at least
as far from the observed difference as it is from 0) for a macro average or a share of seeds. The
p-values of each pair are Holm-corrected over the metrics compared. Two models must have been
scored on the same items (same benchmark files and options), else `InputError`.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from compclip.errors import InputError
from compclip.eval import stats
from compclip.eval.stats import ItemTable, Metric


@dataclass
class Row:
    model: str  # the model compared with the baseline
    metric: str  # <benchmark>/<metric>
    baseline: float
    value: float
    diff: float  # value - baseline
    ci_low: float
    ci_high: float
    test: str  # "mcnemar" or "bootstrap"
    p: float
    p_holm: float = float("nan")
    discordant: Optional[tuple[int, int]] = None  # McNemar: (baseline right only, model right only)
    per_set: Optional[list[float]] = None  # pooled over item sets: each set's difference


def mcnemar(a: Metric | Sequence[Metric], b: Metric | Sequence[Metric]) -> tuple[float, tuple[int, int]]:
    """McNemar's exact two-sided p-value for two accuracies over the same items, and the
    discordant counts (a right and b wrong, a wrong and b right). Given lists (one pair per
    independent item set, e.g. per seed), the discordant counts are summed: under the null each
    discordant item is either way with probability 1/2, whichever set it is in."""
    from scipy.stats import binomtest
    pairs = zip(a, b) if isinstance(a, (list, tuple)) else [(a, b)]
    only_a = only_b = 0
    for x, y in pairs:
        idx = x.parts[0]
        only_a += int(((x.values[idx] == 1) & (y.values[idx] == 0)).sum())
        only_b += int(((x.values[idx] == 0) & (y.values[idx] == 1)).sum())
    p = binomtest(only_b, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    return float(p), (only_a, only_b)


def bootstrap_p(diffs: np.ndarray, observed: float) -> float:
    """Two-sided paired bootstrap p-value: resampled differences, centred on the observed one, at
    least as far from it as the observed difference is from 0 ((1 + count) / (1 + resamples))."""
    diffs = diffs[~np.isnan(diffs)]
    if observed == 0 or not len(diffs):
        return 1.0
    return float((1 + np.sum(np.abs(diffs - observed) >= abs(observed))) / (1 + len(diffs)))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given."""
    order = np.argsort(pvalues, kind="stable")
    m, out, running = len(pvalues), [1.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def same_items(a: ItemTable, b: ItemTable, bench: str, labels: tuple[str, str]) -> None:
    if len(a.clusters) != len(b.clusters) or not np.array_equal(a.clusters, b.clusters):
        raise InputError(f"{bench}: {labels[0]} and {labels[1]} were not scored on the same items "
                         f"({len(a.clusters)} vs {len(b.clusters)} items, or a different grouping); score both "
                         "on the same benchmark files and options")


def compare(models: dict[str, dict[str, ItemTable]], metrics: Optional[list[str]] = None) -> list[Row]:
    """One `Row` per (model after the first, metric): see the module docstring."""
    return compare_pooled([models], metrics)


def compare_pooled(strata: list[dict[str, dict[str, ItemTable]]], metrics: Optional[list[str]] = None,
                   names: Optional[list[str]] = None) -> list[Row]:
    """`compare` over several independent item sets holding the same models (a demo's seeds: each
    seed its own world, benchmarks and trained models). Per metric the difference is the mean of
    the sets' differences (`Row.per_set` lists them); its interval resamples each set's clusters
    independently (set k draws from seed `stats.SEED + k`); McNemar's test sums the discordant
    counts, the bootstrap test uses the pooled resamples. With one set this is `compare`. The
    intervals and tests treat the trained models as fixed: they say how sure the difference is
    over benchmark items, not over training runs (`names`: each set's name in errors)."""
    labels = list(strata[0])
    names = names or [f"set {k}" for k in range(len(strata))]
    if len(labels) < 2:
        raise InputError("compare needs at least two models")
    for where, models in zip(names, strata):
        if list(models) != labels:
            raise InputError(f"{where}: holds models {list(models)}, the first set {labels}")
    wanted_names = metrics or default_metrics(strata[0][labels[0]])
    by_bench: dict[str, list[str]] = {}
    for name in wanted_names:
        bench, metric = name.split("/", 1)
        by_bench.setdefault(bench, []).append(metric)
    rows: list[Row] = []
    for label in labels[1:]:
        pair = []
        for bench, wanted in by_bench.items():
            diffs = []
            for k, (where, models) in enumerate(zip(names, strata)):
                ta, tb = _tables(models, labels[0], label, bench, wanted, where if len(strata) > 1 else "")
                reps = stats.replicates([t.metrics[m] for m in wanted for t in (ta, tb)], ta.clusters,
                                        seed=stats.SEED + k)
                diffs.append(reps[1::2] - reps[0::2])
            pooled = np.mean(diffs, axis=0)
            pair += [_row(label, f"{bench}/{m}", [s[labels[0]][bench].metrics[m] for s in strata],
                          [s[label][bench].metrics[m] for s in strata], pooled[i]) for i, m in enumerate(wanted)]
        for row, adjusted in zip(pair, holm([r.p for r in pair])):
            row.p_holm = adjusted
        rows += pair
    return rows


def _tables(models: dict, base: str, label: str, bench: str, wanted: list[str], where: str) -> tuple:
    """The baseline's and the model's tables of `bench`, checked to hold `wanted` on the same items."""
    at = f"{where}: " if where else ""
    if bench not in models[base] or bench not in models[label]:
        raise InputError(f"{at}{bench}: not scored for {base if bench not in models[base] else label}")
    ta, tb = models[base][bench], models[label][bench]
    for metric in wanted:
        if metric not in ta.metrics or metric not in tb.metrics:
            known = ", ".join(f"{bench}/{k}" for k in ta.metrics)
            raise InputError(f"{at}{bench}/{metric}: no per-item values for this metric; known: {known}")
    same_items(ta, tb, f"{at}{bench}", (base, label))
    return ta, tb


def _row(label: str, name: str, a: list[Metric], b: list[Metric], diffs: np.ndarray) -> Row:
    """The comparison of one metric over one or more item sets: its paired interval and test."""
    lo, hi = stats.percentile_interval(diffs)
    per_set = [y.point() - x.point() for x, y in zip(a, b)]
    diff, base, value = float(np.mean(per_set)), float(np.mean([x.point() for x in a])), float(np.mean([y.point() for y in b]))
    extra = {"per_set": per_set} if len(a) > 1 else {}
    if all(x.binary and y.binary for x, y in zip(a, b)):
        p, discordant = mcnemar(a, b)
        return Row(label, name, base, value, diff, lo, hi, "mcnemar", p, discordant=discordant, **extra)
    return Row(label, name, base, value, diff, lo, hi, "bootstrap", bootstrap_p(diffs, diff), **extra)


def default_metrics(tables: dict[str, ItemTable]) -> list[str]:
    """Each benchmark's primary metric (`Benchmark.primary`), else its first metric with values."""
    from compclip.eval.registry import get_benchmark
    out = []
    for bench, table in tables.items():
        try:
            primary = get_benchmark(bench).primary
        except KeyError:
            primary = ""
        usable = [k for k, m in table.metrics.items() if m.parts]
        if usable:
            out.append(f"{bench}/{primary if primary in usable else usable[0]}")
    return out


def _pct(v: float) -> str:
    return "–" if math.isnan(v) else f"{100 * v:.1f}"


def _p(v: float) -> str:
    return "–" if math.isnan(v) else (f"{v:.3f}" if v >= 0.001 else f"{v:.1e}")


def markdown(rows: list[Row], baseline: str) -> str:
    lines = [f"# Paired comparison with {baseline}", "",
             "Accuracies in %; difference in points with its 95 % paired bootstrap interval; p two-sided, "
             "Holm-corrected per model over the metrics compared (docs/eval.md, \"Intervals and comparisons\").", "",
             "| model | metric | baseline | model | difference [95 %] | test | p | p (Holm) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        test = f"McNemar ({r.discordant[0]} / {r.discordant[1]})" if r.discordant else r.test
        lines.append(f"| {r.model} | {r.metric} | {_pct(r.baseline)} | {_pct(r.value)} | "
                     f"{100 * r.diff + 0:+.1f} [{100 * r.ci_low + 0:+.1f}, {100 * r.ci_high + 0:+.1f}] | {test} | {_p(r.p)} | "
                     f"{_p(r.p_holm)} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[Row], path: Path, baseline: str) -> Path:
    """Difference with its interval per metric (points), one marker series per model."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    metrics = list(dict.fromkeys(r.metric for r in rows))
    models = list(dict.fromkeys(r.model for r in rows))
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.45 * len(metrics) * len(models)))
    step = 0.8 / len(models)
    for i, m in enumerate(models):
        mine = [r for r in rows if r.model == m]
        y = [metrics.index(r.metric) + i * step for r in mine]
        x = [100 * r.diff for r in mine]
        err = [[100 * (r.diff - r.ci_low) for r in mine], [100 * (r.ci_high - r.diff) for r in mine]]
        ax.errorbar(x, y, xerr=err, fmt="o", capsize=3, label=m)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks([k + step * (len(models) - 1) / 2 for k in range(len(metrics))])
    ax.set_yticklabels(metrics, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"difference from {baseline} (points, 95 % interval)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write(rows: list[Row], baseline: str, out_dir: str | Path, plots: bool = True) -> dict[str, Path]:
    """`compare.md`, `compare.json` (the rows) and `compare.png` in `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {"markdown": out / "compare.md", "json": out / "compare.json"}
    written["markdown"].write_text(markdown(rows, baseline))
    written["json"].write_text(json.dumps({"baseline": baseline, "level": stats.LEVEL, "resamples": stats.RESAMPLES,
                                           "seed": stats.SEED, "rows": [asdict(r) for r in rows]}, indent=1))
    if plots and rows:
        written["plot"] = plot(rows, out / "compare.png", baseline)
    return written


def from_report(folder: Path, benchmarks: Optional[list[str]] = None) -> dict[str, dict[str, ItemTable]]:
    """{model: {benchmark: ItemTable}} from a report folder (`summary.json`, `<model>.items.npz`)."""
    from compclip.eval.report import slug
    try:
        labels = list(json.loads((folder / "summary.json").read_text(encoding="utf-8")))
    except (OSError, ValueError) as err:
        raise InputError(f"{folder / 'summary.json'}: not a report's summary ({err})") from None
    out = {}
    for label in labels:
        path = folder / f"{slug(label)}.items.npz"
        if not path.is_file():
            raise InputError(f"{path} not found: {folder} holds no per-item values for {label} (reports written "
                             "before intervals were added); score it again with python -m eval score --out")
        tables = stats.load_tables(path)
        out[label] = {b: t for b, t in tables.items() if not benchmarks or b in benchmarks}
    return out


def from_checkpoint(weights: str, benchmarks: list[str], data_root: str, options: dict, score_cache,
                    arch: Optional[str] = None, lineage: str = "auto", precision: str = "fp32",
                    device: str = "cpu", batch_size: int = 256, progress: bool = False) -> dict[str, ItemTable]:
    """{benchmark: ItemTable} of a checkpoint: from the score cache when every benchmark is there
    (no model is loaded), else scored (and cached)."""
    from compclip.eval.api import run
    from compclip.eval.registry import get_benchmark
    from compclip.eval.scorecache import model_identity
    from compclip.models import read_meta, resolve_checkpoint
    path = resolve_checkpoint(weights)
    meta = read_meta(path)  # a sidecar naming the architecture: the cache is read without open_clip
    if score_cache is not None and meta is not None and arch in (None, meta.arch):
        identity = model_identity(meta.arch, str(path), lineage, precision, device)
        found = {}
        for name in benchmarks:
            cls = get_benchmark(name)
            hit = score_cache.get(score_cache.key(identity, cls, data_root, options.get(name, {}), True))
            if hit is None:
                break
            found[name] = cls.item_table(hit.instances or [])
        else:
            return {b: t for b, t in found.items() if t is not None}
    from compclip.eval.scorer import OpenClipScorer
    from compclip.eval.weights import check_file, check_model
    from compclip.models import load_model, resolve_model
    arch, tag = resolve_model(arch, weights)
    identity = model_identity(arch, tag, lineage, precision, device)
    if tag and Path(tag).is_file():
        check_file(tag)
    loaded = load_model(arch, tag, lineage=lineage, device=device)
    check_model(loaded.model, tag or f"{arch}:random")
    scorer = OpenClipScorer.from_loaded(loaded, name=weights, batch_size=batch_size, device=device, precision=precision)
    scorer.cache_identity = identity
    results = run(scorer, benchmarks, data_root, options, progress=progress, batch_size=batch_size,
                  score_cache=score_cache)
    return {b: r.table for b, r in results.items() if r.table is not None}
