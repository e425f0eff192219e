"""Reports for one or several scored models: JSON, a Markdown table, a radar chart, bar charts.

`write_reports({model_label: {benchmark: BenchmarkResult}}, out_dir)` writes
- `summary.json`: {model: {"<benchmark>/<metric>": value}} (the flat names of `evaluate`);
- `intervals.json`: {"level", "resamples", "seed", "models": {model: {"<benchmark>/<metric>":
  [low, high]}}}, the 95 % bootstrap intervals (`eval.stats`) of the metrics that have one;
- `<model>.json`: per benchmark its headline, per-category table, counts, notes, `intervals`
  (metric -> [low, high]) and the per-instance records when `per_instance`;
- `<model>.items.npz`: the per-item values behind the intervals (`eval.stats.save_tables`),
  what `python -m eval compare` reads from a report folder;
- `results.md`: headline metrics, models side by side (`58.9 [55.8, 62.0]`: value and interval),
  then each benchmark's category table (with the interval where the category is a headline metric);
- `radar.png`: each benchmark's primary metric on one axis, one polygon per model (as NegCLIP's
  figure 3), with its interval as an error bar; `categories_<benchmark>.png`: per-category bars of
  the first metric, per model, with error bars where the category has an interval.
Accuracies are shown as percentages in the Markdown and plots, stored as fractions in JSON.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from compclip.eval import stats
from compclip.eval.api import flatten, flatten_intervals
from compclip.eval.benchmarks.base import BenchmarkResult
from compclip.eval.registry import get_benchmark


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "model"


def _fmt(v) -> str:
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and v > 1):
        return str(int(v))
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}"


def _fmt_ci(v, ci) -> str:
    """`58.9 [55.8, 62.0]`, or the bare value without an interval."""
    if ci is None or v is None or (isinstance(v, float) and math.isnan(v)) or any(map(math.isnan, ci)):
        return _fmt(v)
    return f"{_fmt(v)} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def category_interval(result: BenchmarkResult, category: str, column: str):
    """The interval of a category table's cell where it is a headline metric (`<category>/<column>`,
    or `<category>` for an `acc` column), else None."""
    found = result.intervals.get(f"{category}/{column}")
    return found if found is not None or column != "acc" else result.intervals.get(category)


def primary_metric(name: str, result: BenchmarkResult) -> str | None:
    try:
        key = get_benchmark(name).primary
    except KeyError:
        key = ""
    return key if key in result.headline else next(iter(result.headline), None)


def markdown(results: dict[str, dict[str, BenchmarkResult]]) -> str:
    models = list(results)
    lines = ["# Evaluation results", "", "Accuracies in %; in brackets the 95 % bootstrap interval over items "
             "(docs/eval.md, \"Intervals and comparisons\").", "",
             "| metric | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    flat = {m: flatten(r) for m, r in results.items()}
    cis = {m: flatten_intervals(r) for m, r in results.items()}
    for metric in dict.fromkeys(k for m in models for k in flat[m]):
        lines.append(f"| {metric} | " + " | ".join(_fmt_ci(flat[m].get(metric), cis[m].get(metric))
                                                   for m in models) + " |")
    benches = dict.fromkeys(b for m in models for b in results[m])
    for b in benches:
        for m in models:
            r = results[m].get(b)
            if r is None or not (r.categories or r.notes):
                continue
            lines += ["", f"## {b} — {m}", ""]
            lines += [f"- {n}" for n in r.notes]
            if r.categories:
                cols = list(dict.fromkeys(c for row in r.categories.values() for c in row))
                lines += ["", "| category | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
                for cat, row in r.categories.items():
                    lines.append(f"| {cat} | " + " | ".join(
                        str(row[c]) if c.startswith("n") and c in row else
                        _fmt_ci(row.get(c), category_interval(r, cat, c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def radar(results: dict[str, dict[str, BenchmarkResult]], path: Path) -> Path | None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    axes = []
    for m in results:
        for b, r in results[m].items():
            key = primary_metric(b, r)
            if key and f"{b}/{key}" not in axes:
                axes.append(f"{b}/{key}")
    if len(axes) < 3:  # a radar needs at least three axes; fall back to all headline metrics
        axes = list(dict.fromkeys(k for m in results for k in flatten(results[m])))
    if not axes:
        return None
    angles = np.linspace(0, 2 * np.pi, len(axes), endpoint=False).tolist()
    fig, ax = plt.subplots(figsize=(7, 7), subplot_kw={"polar": True})
    for m, res in results.items():
        flat, cis = flatten(res), flatten_intervals(res)
        vals = [100 * flat.get(a, float("nan")) for a in axes]
        line, = ax.plot(angles + angles[:1], vals + vals[:1], label=m)
        ax.fill(angles + angles[:1], vals + vals[:1], alpha=0.1)
        ax.errorbar(angles, vals, yerr=_yerr(vals, [cis.get(a) for a in axes]), fmt="none",
                    ecolor=line.get_color(), capsize=2)
    ax.set_xticks(angles)
    ax.set_xticklabels(axes, fontsize=8)
    ax.set_ylim(0, 100)
    ax.legend(loc="upper right", bbox_to_anchor=(1.3, 1.1), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _yerr(values: list[float], intervals: list) -> list[list[float]]:
    """matplotlib's asymmetric error bars ([below], [above], in %) for values and their intervals
    (0 where a value has none)."""
    below = [v - 100 * ci[0] if ci is not None else 0.0 for v, ci in zip(values, intervals)]
    above = [100 * ci[1] - v if ci is not None else 0.0 for v, ci in zip(values, intervals)]
    return [[0.0 if math.isnan(b) else b for b in below], [0.0 if math.isnan(a) else a for a in above]]


def category_bars(results: dict[str, dict[str, BenchmarkResult]], bench: str, path: Path) -> Path | None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    tables = {m: r[bench].categories for m, r in results.items() if bench in r and r[bench].categories}
    if not tables:
        return None
    first = next(iter(tables.values()))
    metric = next((c for row in first.values() for c in row if not c.startswith("n") and c != "kept"), None)
    cats = list(dict.fromkeys(c for t in tables.values() for c in t))
    if metric is None or not cats:
        return None
    x = np.arange(len(cats))
    width = 0.8 / len(tables)
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(cats) * len(tables) + 2), 4))
    for i, (m, t) in enumerate(tables.items()):
        vals = [100 * t.get(c, {}).get(metric, float("nan")) for c in cats]
        yerr = _yerr(vals, [category_interval(results[m][bench], c, metric) for c in cats])
        ax.bar(x + i * width, vals, width, label=m, yerr=yerr, capsize=2)
    ax.set_xticks(x + width * (len(tables) - 1) / 2)
    ax.set_xticklabels(cats, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(f"{metric} (%)")
    ax.set_title(f"{bench}: {metric} per category")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_reports(results: dict[str, dict[str, BenchmarkResult]], out_dir: str | Path,
                  per_instance: bool = False, plots: bool = True) -> dict[str, Path]:
    """Write every report for {model label: {benchmark: result}}; returns {kind: path}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {"summary": out / "summary.json", "markdown": out / "results.md"}
    written["summary"].write_text(json.dumps({m: flatten(r) for m, r in results.items()}, indent=2))
    written["intervals"] = out / "intervals.json"
    written["intervals"].write_text(json.dumps(
        {"level": stats.LEVEL, "resamples": stats.RESAMPLES, "seed": stats.SEED,
         "models": {m: {k: list(v) for k, v in flatten_intervals(r).items()} for m, r in results.items()}}, indent=2))
    for m, res in results.items():
        p = out / f"{slug(m)}.json"
        p.write_text(json.dumps({"model": m, "benchmarks": {b: r.as_dict(per_instance) for b, r in res.items()}},
                                indent=1))
        written[f"model:{m}"] = p
        tables = {b: r.table for b, r in res.items() if r.table is not None}
        if tables:
            written[f"items:{m}"] = out / f"{slug(m)}.items.npz"
            stats.save_tables(tables, written[f"items:{m}"])
    written["markdown"].write_text(markdown(results))
    if plots:
        if radar(results, out / "radar.png"):
            written["radar"] = out / "radar.png"
        for b in dict.fromkeys(b for r in results.values() for b in r):
            p = category_bars(results, b, out / f"categories_{b}.png")
            if p:
                written[f"bars:{b}"] = p
    return written
