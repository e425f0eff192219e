"""The name (and keyword arguments) under which plain open_clip builds a model as it was trained.

open_clip >= 2.29 builds `ViT-B-32` with GELU whatever weights it is given; OpenAI-lineage
weights need QuickGELU, which open_clip builds for the `-quickgelu` variant of a name
(`ViT-B-32-quickgelu`) or when asked (`force_quick_gelu=True`). `plain_open_clip_name(arch,
activation)` gives `(name, kwargs)` such that

    open_clip.create_model_and_transforms(name, pretrained=CHECKPOINT, **kwargs)

builds the architecture with the activation the weights were trained with: the architecture
itself when its config already has that activation; else its `-quickgelu` variant (or, for GELU
weights on a `-quickgelu` name, the name without the suffix) when open_clip knows one whose
config differs only in `quick_gelu`; else the architecture with `force_quick_gelu=True` or
`quick_gelu=False`. The checkpoint sidecar records the result (`open_clip_arch`,
`open_clip_kwargs`; models/checkpoint.py). Our own small architectures are open_clip names only
once `compclip.models.registry` has registered them.
"""
from __future__ import annotations

from typing import Any

import open_clip

from compclip.models import registry  # noqa: F401  (registers our architectures)

SUFFIX = "-quickgelu"


def _config(name: str) -> dict[str, Any] | None:
    return open_clip.get_model_config(name) if name in open_clip.list_models() else None


def _same_but_activation(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k != "quick_gelu"} == {k: v for k, v in b.items() if k != "quick_gelu"}


def plain_open_clip_name(arch: str, activation: str) -> tuple[str, dict[str, Any]]:
    """(open_clip model name, extra keyword arguments) that build `arch` with `activation`
    ("gelu", "quickgelu"; anything else: the architecture as configured)."""
    config = _config(arch)
    if config is None or activation not in ("gelu", "quickgelu"):
        return arch, {}
    quick = activation == "quickgelu"
    if bool(config.get("quick_gelu", False)) == quick:
        return arch, {}
    other = f"{arch}{SUFFIX}" if quick else arch.removesuffix(SUFFIX)
    other_config = _config(other) if other != arch else None
    if other_config is not None and bool(other_config.get("quick_gelu", False)) == quick \
            and _same_but_activation(config, other_config):
        return other, {}
    return arch, ({"force_quick_gelu": True} if quick else {"quick_gelu": False})
