"""Optimiser and learning-rate schedule with the CLIP conventions.

AdamW with two parameter groups, by open_clip's training-script rule (which NegCLIP and BiVLC
also use): no weight decay on a parameter with fewer than 2 dims or whose name contains "bn",
"ln", "bias" or "logit_scale"; decay on everything else, the token and positional embeddings
included. `optim.exclude_embeddings_from_decay` also exempts every parameter whose name contains
"embedding" (25.4 M parameters of ViT-B/32; not what the papers did). Frozen parameters are left
out. `optim.text_lr` gives the text tower (every parameter outside `visual.*` but the logit scale
and bias) its own peak learning rate, as four groups; unset, the two groups above. The schedule
is per optimiser step and scales every group's peak alike: linear warmup to the peak over
`warmup_steps`, then cosine decay to 0 at the last step (or constant).

`optim.implementation` picks torch's AdamW kernel: `auto` the fused one where possible (see
`use_fused`), else torch's choice; `foreach` the multi-tensor one (torch's default on CUDA);
`single` the per-tensor loop (torch's default on CPU, what open_clip_train runs there). Same
arithmetic up to float rounding; only the speed differs.
"""
from __future__ import annotations

import math
import os

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from compclip.trainer.recipe import OptimConfig, ScheduleConfig

def no_weight_decay(name: str, param: nn.Parameter, exclude_embeddings: bool = False) -> bool:
    """open_clip's rule: gains, biases, norms and the logit scale are not decayed."""
    exempt = param.ndim < 2 or any(part in name for part in ("bn", "ln", "bias", "logit_scale"))
    return exempt or (exclude_embeddings and "embedding" in name)


def in_text_tower(name: str) -> bool:
    """A parameter of the text tower: neither the image tower's (`visual.*`) nor the logit scale / bias."""
    return not name.startswith("visual.") and name not in ("logit_scale", "logit_bias")


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    towers = ("all",) if cfg.text_lr is None else ("rest", "text")
    groups = {(tower, exempt): [] for tower in towers for exempt in (True, False)}
    for name, param in model.named_parameters():
        if param.requires_grad:
            tower = "all" if cfg.text_lr is None else ("text" if in_text_tower(name) else "rest")
            groups[tower, no_weight_decay(name, param, cfg.exclude_embeddings_from_decay)].append(param)
    built = [{"params": params, "weight_decay": 0.0 if exempt else cfg.weight_decay,
              **({"lr": cfg.text_lr} if tower == "text" else {})}
             for (tower, exempt), params in groups.items() if params]
    every = [p for params in groups.values() for p in params]
    return torch.optim.AdamW(built, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
                             **kernel_choice(cfg.implementation, every))


def kernel_choice(implementation: str, params: list[nn.Parameter]) -> dict:
    """AdamW's `fused` / `foreach` arguments for `optim.implementation`."""
    if implementation == "single":
        return {"fused": False, "foreach": False}
    if implementation == "foreach":
        return {"fused": False, "foreach": True}
    return {"fused": True} if use_fused(params) else {}


def use_fused(params: list[nn.Parameter]) -> bool:
    """torch's fused AdamW (one kernel over all tensors; on CPU ~5x faster than the default
    per-tensor loop, which took ~20% of a tiny-model step) for floating-point parameters on CPU
    or CUDA; not under DeepSpeed, whose ZeRO stages wrap the optimizer themselves."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return False
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


def lr_factor(step: int, total_steps: int, cfg: ScheduleConfig) -> float:
    """Multiplier of the base lr for optimiser step `step` (0-based)."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.kind == "constant":
        return 1.0
    decay_steps = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, cfg: ScheduleConfig) -> LambdaLR:
    return LambdaLR(optimizer, lambda step: lr_factor(step, total_steps, cfg))
