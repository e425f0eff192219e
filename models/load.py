"""Build any CLIP model the toolkit uses, with the QuickGELU lineage guard.

`load_model(arch, pretrained, activation, lineage)` builds an open_clip architecture (ours from
`models.registry` included) with weights from an open_clip pretrained tag, a checkpoint file
(open_clip's or ours with its metadata sidecar), or none. OpenAI-lineage weights were trained
with QuickGELU; open_clip >= 2.29 no longer forces it, so building them with GELU silently gives
wrong numbers. Here the weights' activation is worked out first (the tag's pretrained config, the
checkpoint's sidecar, or `lineage="openai"`), the model is built with it, and any disagreement
with what was asked for or what was built raises `ActivationMismatch`.
"""
from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal, Optional

import open_clip
import torch
from torch import nn

import models.registry  # noqa: F401  (registers the tiny architectures)
from models.checkpoint import read_meta
from models.text_length import enable_text_trimming

log = logging.getLogger(__name__)

Activation = Literal["gelu", "quickgelu"]


class ActivationMismatch(ValueError):
    """The weights' activation differs from the one asked for or built."""


@dataclass(frozen=True)
class ModelInfo:
    arch: str
    pretrained: Optional[str]
    activation: str  # what was built: "gelu", "quickgelu" or "n/a" (towers without either)
    lineage: str  # "openai", "other", "unknown" (a bare file) or "none" (random init)
    weights_activation: Optional[str]  # what the weights were trained with, when known

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadedModel:
    model: nn.Module
    preprocess: Callable  # eval transform (PIL -> tensor)
    preprocess_train: Callable
    tokenizer: Callable  # list[str] -> LongTensor [N, context_length]
    info: ModelInfo
    text_length: str = "full context"  # "per batch" when `models.text_length` trims the context


def built_activation(model: nn.Module) -> str:
    """The MLP activation a model was built with, read off its modules."""
    kinds = {type(m) for m in model.modules()}
    if open_clip.transformer.QuickGELU in kinds:
        return "quickgelu"
    if nn.GELU in kinds:
        return "gelu"
    return "n/a"


def _weights_origin(arch: str, pretrained: Optional[str], lineage: str) -> tuple[str, Optional[str]]:
    """(lineage, activation the weights were trained with or None if unknown)."""
    if not pretrained:
        return "none", None
    if os.path.isfile(pretrained):
        meta = read_meta(pretrained)
        if lineage == "openai" or (meta and meta.lineage == "openai"):
            return "openai", "quickgelu"
        if meta is not None:
            return meta.lineage, meta.activation if meta.activation != "n/a" else None
        return ("other" if lineage == "other" else "unknown"), None
    tag_cfg = open_clip.get_pretrained_cfg(arch, pretrained)
    if not tag_cfg:
        tags = open_clip.list_pretrained_tags_by_model(arch)
        raise FileNotFoundError(
            f"pretrained '{pretrained}' is neither a file nor an open_clip tag of '{arch}' "
            f"(tags: {', '.join(tags) or 'none'})")
    if pretrained == "openai" or lineage == "openai":
        return "openai", "quickgelu"
    return "other", "quickgelu" if tag_cfg.get("quick_gelu", False) else "gelu"


def load_model(
    arch: Optional[str] = None,
    pretrained: Optional[str] = None,
    activation: Literal["auto", "gelu", "quickgelu"] = "auto",
    lineage: Literal["auto", "openai", "other"] = "auto",
    device: str | torch.device = "cpu",
    precision: str = "fp32",
    cache_dir: Optional[str] = None,
    trim_text: bool = True,
) -> LoadedModel:
    """Build a model; `arch` may be omitted for a compclip checkpoint (its sidecar names it).
    `trim_text`: encode texts at the batch's longest caption where that is exact
    (`models.text_length`); `LoadedModel.text_length` says what was done and why."""
    if arch is None:
        meta = read_meta(pretrained) if pretrained and os.path.isfile(pretrained) else None
        if meta is None:
            raise ValueError("load_model: arch is required unless pretrained is a compclip checkpoint")
        arch = meta.arch
    if arch not in open_clip.list_models():
        raise ValueError(f"unknown architecture '{arch}' (see open_clip.list_models())")

    origin, weights_act = _weights_origin(arch, pretrained, lineage)
    if activation != "auto" and weights_act is not None and activation != weights_act:
        raise ActivationMismatch(
            f"{arch} with weights '{pretrained}' ({origin} lineage) was trained with {weights_act}, "
            f"but model.activation={activation} was asked for; use activation=auto or {weights_act}")
    want = weights_act if activation == "auto" else activation

    arch_quick = bool(open_clip.get_model_config(arch).get("quick_gelu", False))
    kwargs: dict[str, Any] = {}
    if want == "quickgelu" and not arch_quick:
        kwargs["force_quick_gelu"] = True
    elif want == "gelu" and arch_quick:
        kwargs["quick_gelu"] = False
    if origin == "unknown":
        log.warning("%s: no metadata says which activation these weights were trained with; "
                    "building %s as configured. Set model.lineage=openai for OpenAI-derived weights.",
                    pretrained, arch)

    model, preprocess_train, preprocess = open_clip.create_model_and_transforms(
        arch, pretrained=pretrained, device=device, precision=precision, cache_dir=cache_dir, **kwargs)
    built = built_activation(model)
    if weights_act is not None and built not in (weights_act, "n/a"):
        raise ActivationMismatch(
            f"{arch} was built with {built} but weights '{pretrained}' need {weights_act}")
    info = ModelInfo(arch=arch, pretrained=pretrained, activation=built, lineage=origin,
                     weights_activation=weights_act)
    length = "full context (trim_text=False)"
    if trim_text:
        reason = enable_text_trimming(model)
        length = "per batch" if reason is None else f"full context ({reason})"
    return LoadedModel(model=model, preprocess=preprocess, preprocess_train=preprocess_train,
                       tokenizer=open_clip.get_tokenizer(arch), info=info, text_length=length)
