"""The offline demo's report (launch/demo.py): each run's last evaluation and in-batch numbers
read from a demo folder, summarised over seeds (mean, spread, differences to the control, the
first seed's intervals and pooled paired tests from the per-item values), written as results.md's
tables and as comparison.png / curves.png."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a seed's folders: `seed`, `dir`, `runs`
    from demo import Seed

LABELS = {"demo_pretrain": "base (no finetuning)", "demo_clip_ft": "control (CLIP-FT)",
          "demo_negclip": "NegCLIP-style", "demo_trohn_text": "TROHN-Text-style",
          "demo_trohn_img": "TROHN-Img-style", "demo_leftright": "left-right pairs"}
# (metric, short name): what the table shows; the papers' claims are about these
METRICS = [
    ("sugarcrepe/replace", "SC replace"), ("sugarcrepe/swap", "SC swap"), ("sugarcrepe/add", "SC add"),
    ("sugarcrepe/replace_rel", "SC rel"), ("sugarcrepe/swap_att", "SC swap-att"),
    ("aro/vg_relation/macro", "ARO rel"), ("aro/vg_attribution/macro", "ARO attr"),
    ("aro/coco_order/mean", "ARO order"), ("visla/generic/i2t", "VISLA gen I2T"),
    ("visla/spatial/i2t", "VISLA spa I2T"), ("bivlc/i2t", "BiVLC I2T"), ("bivlc/t2i", "BiVLC T2I"),
    ("bivlc/group", "BiVLC group"), ("left_right/acc", "L/R acc"),
]
# chance level of each table metric under random scores (docs/eval.md): two options 1/2; ARO order
# 1 of 5 candidates; VISLA I2T: the negative must score below both positives (1/3); BiVLC I2T / T2I:
# both of two binary choices right (1/4); group: both positives above both cross pairs (1/6)
CHANCE = {m: 0.5 for m, _ in METRICS} | {"aro/coco_order/mean": 0.2, "visla/generic/i2t": 1 / 3,
                                          "visla/spatial/i2t": 1 / 3, "bivlc/i2t": 0.25, "bivlc/t2i": 0.25,
                                          "bivlc/group": 1 / 6}
# chance of the validation in-batch numbers plotted: an image's caption above its one hard negative
# (every demo recipe has at most one per image: negatives.per_image / per_partner <= 1), a caption's
# own image above its partner image: two options each
CHANCE_VAL = {"val/hard_negative_acc": 0.5, "val/partner_acc": 0.5}
# the panels of curves.png (two rows of four; the eighth holds the legend)
CURVES = [("sugarcrepe/swap", "SugarCrepe swap"), ("sugarcrepe/replace_rel", "SugarCrepe replace-rel"),
          ("bivlc/t2i", "BiVLC T2I"), ("bivlc/group", "BiVLC group"), ("left_right/acc", "left/right (ARO VG-Rel)"),
          ("val/hard_negative_acc", "val hard-negative acc"), ("val/partner_acc", "val partner acc")]
# the in-batch numbers (trainer/loss.py batch_metrics) on training and validation batches
INBATCH = [("hard_negative_acc", "hard-negative acc"), ("partner_acc", "partner acc"),
           ("i2t_acc", "in-batch I2T"), ("t2i_acc", "in-batch T2I")]


def eval_lines(seed: Seed, recipe: str) -> list[dict]:
    path = seed.runs / recipe / "eval.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def last_metrics(seed: Seed, recipe: str) -> dict[str, float]:
    lines = eval_lines(seed, recipe)
    return lines[-1]["metrics"] if lines else {}


def start_scalars(seed: Seed, recipe: str) -> dict[str, float]:
    """The base model's numbers as a finetune's epoch 0, under TensorBoard tags: `eval/<metric>`
    from the base run's last evaluation, `val/<metric>` from `start/<recipe>.json`."""
    base = {f"eval/{k}": v for k, v in last_metrics(seed, "demo_pretrain").items() if not k.startswith("val/")}
    start_file = seed.dir / "start" / f"{recipe}.json"
    start = json.loads(start_file.read_text()) if start_file.is_file() else {}
    return base | {k: v for k, v in start.items() if k.startswith("val/")}


# --- results ------------------------------------------------------------------------------------
def summarise(seeds: list[Seed], finetunes: tuple[str, ...]) -> dict:
    """Last-epoch metrics per recipe: per seed, mean, sample standard deviation, delta to control;
    plus the in-batch numbers (`inbatch`, see `inbatch_numbers`)."""
    recipes = ("demo_pretrain",) + finetunes
    summary = summarise_metrics({r: {s.seed: last_metrics(s, r) for s in seeds} for r in recipes})
    summary["inbatch"] = {r: {s.seed: inbatch_numbers(s, r) for s in seeds} for r in finetunes}
    summary.update(item_statistics(seeds, recipes))
    return summary


def run_items(seed: Seed, recipe: str) -> dict | None:
    """The per-item values of a run's last evaluation ({benchmark: ItemTable}, what the trainer
    keeps in `eval_items/`), None without them."""
    from compclip.eval.stats import load_tables
    from compclip.trainer.evaluation import items_path
    lines = eval_lines(seed, recipe)
    path = items_path(seed.runs / recipe, lines[-1]["step"]) if lines else None
    return load_tables(path) if path is not None and path.is_file() else None


def item_statistics(seeds: list[Seed], recipes: tuple[str, ...]) -> dict:
    """From the per-item values of each run's last evaluation (`run_items`): `intervals`, the first
    seed's value and 95 % bootstrap interval per recipe and table metric (`eval.stats.intervals`),
    and `paired`, each finetune against the control pooled over the seeds
    (`eval.compare.compare_pooled`: mean difference, 95 % interval, McNemar's test or the paired
    bootstrap test, Holm over the table's metrics). {} unless every run has them."""
    from compclip.eval import compare, stats
    found = {s.seed: {r: run_items(s, r) for r in recipes} for s in seeds}
    if not seeds or any(t is None for by_recipe in found.values() for t in by_recipe.values()):
        return {}
    wanted = [m for m, _ in METRICS]
    intervals: dict = {}
    for r, tables in found[seeds[0].seed].items():
        for bench, table in tables.items():
            for name, (lo, hi) in stats.intervals(table).items():
                if f"{bench}/{name}" in wanted:
                    intervals.setdefault(r, {})[f"{bench}/{name}"] = {
                        "value": table.metrics[name].point(), "ci": [lo, hi]}
    strata = [{r: found[s.seed][r] for r in recipes if r != "demo_pretrain"} for s in seeds]  # control first
    rows = compare.compare_pooled(strata, wanted, names=[f"seed {s.seed}" for s in seeds]) \
        if len(strata[0]) > 1 else []  # the control alone: nothing to compare
    paired: dict = {}
    for row in rows:
        paired.setdefault(row.model, {})[row.metric] = {
            "diff": row.diff, "ci": [row.ci_low, row.ci_high], "test": row.test, "p": row.p, "p_holm": row.p_holm,
            "discordant": row.discordant, "per_seed": row.per_set or [row.diff]}
    return {"intervals_seed": seeds[0].seed, "intervals": intervals, "paired": paired}


def summarise_metrics(per_seed: dict[str, dict[int, dict[str, float]]]) -> dict:
    """`{recipe: {seed: {metric: value}}}` (the control, `demo_clip_ft`, among the recipes) ->
    per recipe and metric: the values, their mean and sample std, and the mean and std of the
    per-seed difference to the control. A metric a run did not report is left out (mean None)."""
    seeds = list(per_seed["demo_clip_ft"])
    summary: dict = {"seeds": seeds, "metrics": [m for m, _ in METRICS], "recipes": {}}
    for r, by_seed in per_seed.items():
        rows = {}
        for metric, _ in METRICS:
            values = [by_seed[s][metric] for s in seeds if metric in by_seed[s]]
            control = [per_seed["demo_clip_ft"][s].get(metric) for s in seeds]
            deltas = [v - c for v, c in zip(values, control) if c is not None]
            rows[metric] = {"values": values, "mean": statistics.fmean(values) if values else None,
                            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                            "delta_mean": statistics.fmean(deltas) if deltas else None,
                            "delta_std": statistics.stdev(deltas) if len(deltas) > 1 else 0.0,
                            "deltas": deltas}
        summary["recipes"][r] = rows
    return summary


def train_scalars(seed: Seed, recipe: str) -> dict[str, list[tuple[int, float]]]:
    """`train/<metric>` (step, value) series of a run's TensorBoard log ({} without one)."""
    folder = seed.runs / recipe / "tensorboard"
    if not folder.is_dir():
        return {}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"] if tag.startswith("train/")}


def inbatch_numbers(seed: Seed, recipe: str) -> dict[str, dict[str, float]]:
    """Per in-batch metric: `val_start` (the base model on the run's validation batches),
    `val_end` (last epoch), `train_first` (the first logged training step) and `train_last`
    (mean of the logged steps of the last epoch). A number a run has no case for is left out."""
    start_file = seed.dir / "start" / f"{recipe}.json"
    start = json.loads(start_file.read_text()) if start_file.is_file() else {}
    end = last_metrics(seed, recipe)
    train = train_scalars(seed, recipe)
    lines = eval_lines(seed, recipe)
    last_epoch_from = lines[-2]["step"] if len(lines) > 1 else 0
    out = {}
    for metric, _ in INBATCH:
        row = {}
        if f"val/{metric}" in start:
            row["val_start"] = start[f"val/{metric}"]
        if f"val/{metric}" in end:
            row["val_end"] = end[f"val/{metric}"]
        series = train.get(f"train/{metric}", [])
        if series:
            row["train_first"] = series[0][1]
            tail = [v for step, v in series if step > last_epoch_from] or [series[-1][1]]
            row["train_last"] = statistics.fmean(tail)
        if row:
            out[metric] = row
    return out


def markdown(summary: dict, command: str, minutes: float) -> str:
    seeds = summary["seeds"]
    spread = "mean ± sample std over seeds " if len(seeds) > 1 else "one seed "
    return "\n".join(["# Offline demo results", "", f"Command: `{command}`; seeds {seeds}; "
                      f"{minutes:.1f} min wall (the recorded time of every step, seed-<s>/wall_time.json). Accuracies in %, last epoch, {spread}{seeds}. "
                      f"Chance: " + ", ".join(f"{short} {100 * CHANCE[m]:.0f}" for m, short in METRICS
                                               if CHANCE[m] != 0.5) + ", all others 50.", "",
                      tables(summary), interval_table(summary), paired_table(summary), inbatch_table(summary)])


def _cell(values: list[float], signed: bool = False) -> str:
    if not values:
        return "–"
    mean = 100 * statistics.fmean(values)
    text = f"{mean:+.1f}" if signed else f"{mean:.1f}"
    return text + (f" ± {100 * statistics.stdev(values):.1f}" if len(values) > 1 else "")


def table_header() -> list[str]:
    """The two header lines of a recipe x metric table (markdown)."""
    return ["| recipe | " + " | ".join(short for _, short in METRICS) + " |", "|---|" + "---|" * len(METRICS)]


def tables(summary: dict) -> str:
    """The accuracy table (mean ± std per recipe), the difference-to-control table and each
    seed's difference to the control, markdown."""
    seeds = summary["seeds"]
    header = table_header()
    lines = list(header)
    for r, rows in summary["recipes"].items():
        cells = [_cell(rows[m]["values"]) if rows[m]["mean"] is not None else "–" for m, _ in METRICS]
        lines.append(f"| {LABELS[r]} | " + " | ".join(cells) + " |")
    lines += ["", "Difference to the control, percentage points (mean ± std of the per-seed difference):", ""]
    lines += header
    others = [r for r in summary["recipes"] if r not in ("demo_pretrain", "demo_clip_ft")]
    for r in others:
        rows = summary["recipes"][r]
        cells = [_cell(rows[m]["deltas"], signed=True) if rows[m]["delta_mean"] is not None else "–"
                 for m, _ in METRICS]
        lines.append(f"| {LABELS[r]} | " + " | ".join(cells) + " |")
    if len(seeds) > 1:
        lines += ["", "Per-seed difference to the control, percentage points (seeds " +
                  ", ".join(map(str, seeds)) + "):", ""] + header
        for r in others:
            rows = summary["recipes"][r]
            cells = [" / ".join(f"{100 * d:+.1f}" for d in rows[m]["deltas"]) or "–" for m, _ in METRICS]
            lines.append(f"| {LABELS[r]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def interval_table(summary: dict) -> str:
    """The first seed's accuracies with their 95 % bootstrap intervals over items (markdown)."""
    found = summary.get("intervals") or {}
    if not found:
        return ""
    lines = ["", f"Seed {summary['intervals_seed']}, each accuracy with its 95 % bootstrap interval over the "
             "benchmark's items (resampled by image; docs/eval.md):", "",
             *table_header()]
    for r, by_metric in found.items():
        cells = [f"{100 * by_metric[m]['value']:.1f} [{100 * by_metric[m]['ci'][0]:.1f}, "
                 f"{100 * by_metric[m]['ci'][1]:.1f}]" if m in by_metric else "–" for m, _ in METRICS]
        lines.append(f"| {LABELS[r]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def paired_table(summary: dict) -> str:
    """Each finetune minus the control pooled over the seeds, with its interval and Holm p (markdown)."""
    paired = summary.get("paired") or {}
    if not paired:
        return ""
    lines = ["", "Difference to the control over the benchmark items of every seed, percentage points: mean of the "
             "per-seed differences [95 % interval resampling each seed's items], and in brackets below the "
             "two-sided p (McNemar's exact test on the discordant items of all seeds for an accuracy over items, "
             "the paired bootstrap test for a macro average or ARO order), Holm-corrected per recipe over the "
             f"{len(METRICS)} columns; **bold**: p (Holm) < 0.05. The models are taken as fixed: this is the "
             "uncertainty over items, not over training runs (the per-seed rows above show the spread over seeds).",
             "", *table_header()]
    for r, by_metric in paired.items():
        cells = []
        for m, _ in METRICS:
            row = by_metric.get(m)
            if row is None:
                cells.append("–")
                continue
            text = f"{100 * row['diff'] + 0:+.1f} [{100 * row['ci'][0] + 0:+.1f}, {100 * row['ci'][1] + 0:+.1f}]"
            text = f"**{text}**" if row["p_holm"] < 0.05 else text
            cells.append(f"{text}<br>(p {row['p_holm']:.2g})")
        lines.append(f"| {LABELS[r]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def inbatch_table(summary: dict) -> str:
    """In-batch numbers on training and validation batches, start -> last epoch (markdown)."""
    inbatch = summary.get("inbatch") or {}
    if not inbatch:
        return ""
    cols = [("val_start", "val, base"), ("val_end", "val, last epoch"),
            ("train_first", "train, first logged step"), ("train_last", "train, last epoch")]
    lines = ["", "In-batch numbers (trainer/loss.py `batch_metrics`), %: validation batches (5% of the "
             "world's images held out) scored by the base model and after the last epoch; training "
             "batches at the first logged step (step 10) and averaged over the last epoch's logged steps.", "",
             "| recipe | metric | " + " | ".join(c for _, c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for r, by_seed in inbatch.items():
        for metric, name in INBATCH:
            cells = [_cell([v[metric][key] for v in by_seed.values() if key in v.get(metric, {})]) for key, _ in cols]
            if any(c != "–" for c in cells):
                lines.append(f"| {LABELS[r]} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plots(summary: dict, seeds: list[Seed], out: Path, close: bool = True) -> tuple:
    """`comparison.png` (last epoch, one bar per recipe and metric, chance marked, error bars
    only with several seeds) and `curves.png` (mean over seeds per epoch, epoch 0 = the base).
    Returns the two figures (closed unless `close` is False)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    several = len(summary["seeds"]) > 1
    fig, ax = plt.subplots(figsize=(15, 4.5))
    recipes = list(summary["recipes"])
    width = 0.8 / len(recipes)
    x = np.arange(len(METRICS))
    for i, r in enumerate(recipes):
        rows = summary["recipes"][r]
        means = [100 * (rows[m]["mean"] or 0) for m, _ in METRICS]
        stds = [100 * rows[m]["std"] for m, _ in METRICS] if several else None
        ax.bar(x + i * width, means, width, yerr=stds, label=LABELS[r], capsize=2 if several else 0,
               color="0.75" if r == "demo_pretrain" else f"C{i - 1}")  # one colour per recipe in both plots
    for j, (m, _) in enumerate(METRICS):
        ax.hlines(100 * CHANCE[m], j - width / 2, j + width * (len(recipes) - 0.5), colors="k",
                  linestyles="dashed", linewidth=1, label="chance" if j == 0 else None)
    ax.set_xticks(x + width * (len(recipes) - 1) / 2, [s for _, s in METRICS], rotation=30, ha="right")
    ax.set_ylabel("accuracy (%)")
    spread = "mean ± sample std over seeds" if several else "seed"
    ax.set_title(f"Offline demo, last epoch, {spread} {summary['seeds']}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "comparison.png", dpi=120)
    comparison = fig
    if close:
        plt.close(fig)

    fig, grid = plt.subplots(2, 4, figsize=(13, 6.6))
    axes, legend_ax = list(grid.flat[:len(CURVES)]), grid.flat[-1]
    finetunes = [r for r in recipes if r != "demo_pretrain"]
    n_epochs = 1
    for ax, (metric, title) in zip(axes, CURVES):
        for r in finetunes:
            per_seed = []
            for s in seeds:
                # epoch 0: the numbers TensorBoard holds at step 0 (write_start_scalars)
                base = start_scalars(s, r).get(metric if metric.startswith("val/") else f"eval/{metric}")
                values = [ln["metrics"].get(metric) for ln in eval_lines(s, r)]
                per_seed.append([base] + values)
            n = min(len(v) for v in per_seed)
            points = [(e, 100 * statistics.fmean(v[e] for v in per_seed)) for e in range(n)
                      if all(v[e] is not None for v in per_seed)]
            if points:
                n_epochs = max(n_epochs, n - 1)
                ax.plot(*zip(*points), marker="o", label=LABELS[r], color=f"C{recipes.index(r) - 1}")
        chance = CHANCE.get(metric, CHANCE_VAL.get(metric))
        if chance is not None:
            ax.axhline(100 * chance, color="k", linestyle="dashed", linewidth=1, label="chance")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("epoch (0 = base model)")
    for ax in axes:
        ax.set_xticks(range(0, n_epochs + 1))
        ax.set_xlim(-0.3, n_epochs + 0.3)
    for row in grid:
        row[0].set_ylabel(f"accuracy (%), {'mean over seeds' if several else 'one seed'}")
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    legend_ax.axis("off")
    legend_ax.legend(list(handles.values()), list(handles), loc="center", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    if close:
        plt.close(fig)
    return comparison, fig
