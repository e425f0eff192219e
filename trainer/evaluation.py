"""The eval hook: score the model being trained on the recipe's benchmarks.

Wraps the unwrapped in-training model in `eval.scorer.OpenClipScorer` (eval transform, tokenizer)
and calls `eval.api.evaluate(scorer, benchmarks, data_root, options) -> {"<benchmark>/<metric>":
float}`. `eval.api` is imported lazily, so the trainer runs without it when no benchmark is
named; `check_available` fails early (before training) when benchmarks are named but it is
missing. The caller decides where it runs (rank 0, or every rank with `eval.distributed`).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from eval.scorer import OpenClipScorer
from trainer.recipe import EvalConfig


def check_available(cfg: EvalConfig) -> None:
    if not cfg.benchmarks:
        return
    try:
        from eval.api import evaluate  # noqa: F401
    except ImportError as err:
        raise ImportError(f"eval.benchmarks={cfg.benchmarks} but eval.api.evaluate cannot be imported ({err})") from None


def evaluate_model(model: nn.Module, preprocess: Callable, tokenizer: Callable, cfg: EvalConfig,
                   device: torch.device, name: str, progress: bool = True) -> dict[str, float]:
    from eval.api import evaluate
    scorer = OpenClipScorer(model, preprocess, tokenizer, name=name, batch_size=cfg.batch_size, device=device)
    metrics = evaluate(scorer, list(cfg.benchmarks), cfg.data_root, dict(cfg.options), progress=progress)
    return {str(k): float(v) for k, v in metrics.items()}
