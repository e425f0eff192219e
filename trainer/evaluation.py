"""The eval hook: score the model being trained on the recipe's benchmarks.

Wraps the unwrapped in-training model in `eval.scorer.OpenClipScorer` (eval transform, tokenizer)
and calls `eval.api.evaluate(scorer, benchmarks, data_root, options) -> {"<benchmark>/<metric>":
float}`. `eval.api` is imported lazily, so the trainer runs without it when no benchmark is
named; `check_available` fails early (before training) when benchmarks are named but it is
missing, or when a benchmark that tags captions with spaCy (`SPACY_BENCHMARKS`) is named and
spaCy is not installed (the `datagen` extra). The caller decides where it runs (rank 0, or every rank with `eval.distributed`).

Before training: `check_data` asks `eval.api.check_data` whether every benchmark's files are
there (every missing file listed on stderr, then one error line with the command that fetches
them), and
`overlap_with_benchmarks` compares the COCO ids a shard set trained on (its manifest's
`image_ids` file) with the COCO ids of the recipe's benchmarks (`compclip.shardset.benchmark_ids`).

Each evaluation's per-item values (`eval.stats.ItemTable` per benchmark) are kept in
`<run_dir>/eval_items/step-<step>.items.npz` (`save_items`, rank 0).

After each evaluation: `within_noise` reads `eval.jsonl` and lists the evaluations whose 95 %
interval of the best metric overlaps the best one's ("within noise": overlapping intervals are a
cautious reading; `python -m eval compare` on the two checkpoints is the paired test), which the
trainer prints (`noise_line`) and writes to `<run_dir>/best.json`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from compclip.eval.precision import precision_of
from compclip.eval.scorer import OpenClipScorer
from compclip.trainer.recipe import EvalConfig


SPACY_BENCHMARKS = ("aro", "left_right")  # tag captions with spaCy (compclip.eval.text_perturb.tag)


def check_available(cfg: EvalConfig) -> None:
    if not cfg.benchmarks:
        return
    try:
        from compclip.eval.api import evaluate  # noqa: F401
    except ImportError as err:
        raise ImportError(f"eval.benchmarks={cfg.benchmarks} but eval.api.evaluate cannot be imported ({err})") from None
    tagged = [b for b in cfg.benchmarks if b in SPACY_BENCHMARKS]
    if tagged:
        from compclip.eval.text_perturb import spacy_missing
        if spacy_missing():
            raise ImportError(f"eval.benchmarks has {', '.join(tagged)}, which tag captions with spaCy, and spaCy "
                              f"is not installed: pip install 'compclip[datagen]', or leave them out of eval.benchmarks")


def check_data(cfg: EvalConfig) -> None:
    """Raise DataError listing every missing benchmark file (no model is loaded)."""
    if not cfg.benchmarks:
        return
    from compclip.trainer.data import DataError
    try:
        from compclip.eval.api import MissingData, check_data
    except ImportError:
        return  # an eval package without the check: benchmarks fail when they are scored
    if not cfg.data_root:
        raise DataError(f"eval.benchmarks={cfg.benchmarks} needs eval.data_root (the folder holding the "
                        f"benchmarks, docs/benchmark_data.md)")
    try:
        check_data(list(cfg.benchmarks), cfg.data_root, dict(cfg.options))
    except MissingData as err:
        raise DataError(f"evaluation data: {summarise_missing(str(err))}") from None


def summarise_missing(text: str) -> str:
    """eval's listing of missing benchmark files -> its detail lines on stderr, and one line (what
    is missing, how many problems, the command that fetches everything) for the error."""
    import os
    import sys
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) == 1:
        return lines[0]
    if os.environ.get("RANK", "0") == "0":  # every rank runs the pre-flight: list it once
        for line in lines[1:]:
            print(f"  {line.strip()}", file=sys.stderr)
    fetch = next((lines[i + 1].strip() for i, line in enumerate(lines[:-1]) if line.startswith("fetch ")), None)
    return lines[0].rstrip(":") + (f"; fetch it with: {fetch}" if fetch else " (listed above)")


def training_coco_ids(sources) -> set[int]:
    """The COCO image ids the training shard sets were built from (manifest key `image_ids`)."""
    from compclip.shardset.schema import SchemaError
    from compclip.shardset.shards import read_image_ids
    from compclip.trainer.data import DataError
    ids: set[int] = set()
    for src in sources:
        if src.directory:
            try:
                ids |= read_image_ids(src.directory) or set()
            except SchemaError as err:
                raise DataError(str(err)) from None
    return ids


def overlap_with_benchmarks(cfg: EvalConfig, sources) -> dict[str, int]:
    """{benchmark: number of its COCO images the training data holds}, for the recipe's benchmarks."""
    if not cfg.benchmarks or not cfg.data_root:
        return {}
    ids = training_coco_ids(sources)
    if not ids:
        return {}
    try:
        from compclip.shardset.benchmark_ids import benchmark_coco_ids
    except ImportError:
        return {}
    found = benchmark_coco_ids(list(cfg.benchmarks), cfg.data_root)
    return {name: len(ids & bench) for name, bench in found.items() if bench and ids & bench}


def evaluate_model(model: nn.Module, preprocess: Callable, tokenizer: Callable, cfg: EvalConfig,
                   device: torch.device, name: str,
                   progress: bool = True) -> tuple[dict[str, float], dict[str, tuple[float, float]], dict]:
    """({"<benchmark>/<metric>": value}, {name: 95 % (low, high)} for the metrics that have one,
    {benchmark: eval.stats.ItemTable}: the per-item values behind the intervals)."""
    from compclip.eval.api import evaluate
    # weights DeepSpeed holds in bf16 / fp16 are scored in that precision (their inputs cast to it)
    scorer = OpenClipScorer(model, preprocess, tokenizer, name=name, batch_size=cfg.batch_size, device=device,
                            precision=precision_of(model))
    metrics = evaluate(scorer, list(cfg.benchmarks), cfg.data_root, dict(cfg.options), progress=progress)
    intervals = getattr(metrics, "intervals", {})
    return ({str(k): float(v) for k, v in metrics.items()},
            {str(k): (float(lo), float(hi)) for k, (lo, hi) in intervals.items()}, getattr(metrics, "tables", {}))


ITEMS_DIR = "eval_items"


def items_path(run_dir: Path, step: int) -> Path:
    """Where the evaluation at `step` keeps its per-item values (`eval.stats.save_tables`)."""
    return Path(run_dir) / ITEMS_DIR / f"step-{step:07d}.items.npz"


def save_items(run_dir: Path, step: int, tables: dict) -> Optional[Path]:
    """Write one evaluation's item tables (what `eval.stats.load_tables` and `eval compare` read)."""
    if not tables:
        return None
    from compclip.eval.stats import save_tables
    path = items_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    save_tables(tables, tmp)
    os.replace(tmp, path)
    return path


def within_noise(eval_log: Path, metric: str, best_step: int) -> Optional[dict]:
    """The best evaluation's `metric` and interval, and the other evaluations in `eval_log`
    (`eval.jsonl`) whose 95 % interval of it overlaps the best's: {"step", "epoch", "metric",
    "value", "interval", "within_noise_of": [{"step", "epoch", "value", "interval"}, ...]}; None
    when the best's line or its interval is not there (a metric without one, `val/...`)."""
    lines = []
    if eval_log.is_file():
        for text in eval_log.read_text(encoding="utf-8").splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue  # a torn last line
            interval = line.get("intervals", {}).get(metric)
            if interval is not None and metric in line.get("metrics", {}):
                lines.append({"step": line["step"], "epoch": line["epoch"], "value": line["metrics"][metric],
                              "interval": list(interval)})
    best = next((line for line in reversed(lines) if line["step"] == best_step), None)
    if best is None:
        return None
    lo, hi = best["interval"]
    others = [line for line in lines if line["step"] != best_step and line["interval"][0] <= hi
              and line["interval"][1] >= lo]
    return {**best, "metric": metric, "within_noise_of": others}


def noise_line(choice: dict) -> str:
    """`best checkpoint so far: step 8 (epoch 2), sugarcrepe/macro 0.7310 [0.7012, 0.7598]; within
    noise of step 4 (epoch 1): their 95 % intervals overlap`."""
    lo, hi = choice["interval"]
    text = (f"best checkpoint so far: step {choice['step']} (epoch {choice['epoch']}), {choice['metric']} "
            f"{choice['value']:.4f} [{lo:.4f}, {hi:.4f}]")
    others = choice["within_noise_of"]
    if not others:
        return text + "; its 95 % interval overlaps no other evaluation's"
    listed = ", ".join(f"step {o['step']} (epoch {o['epoch']})" for o in others)
    return text + f"; within noise of {listed}: their 95 % intervals overlap (python -m eval compare tests it)"
