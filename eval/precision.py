"""Scoring precision (`--precision fp32|fp16|bf16`): the towers' weights and the score arithmetic.

Which precision each reference scored in (read from their code):
- ARO (mertyg/vision-language-models-are-bows, `model_zoo`): OpenAI CLIP through `clip.load`,
  which on CUDA keeps the weights in fp16; features are normalised and scored with a numpy fp16
  `einsum`. Its NegCLIP and LAION models load through open_clip (fp32).
- SugarCrepe++ (Sri-Harsha/scpp, `VLMs/test_NegCLIP.py` and the other CLIP scripts):
  `clip.load` on CUDA (fp16) with the NegCLIP state dict loaded into it; cosine similarities in
  fp16. Its ULM script (`evaluate_ulms.py`) is fp32.
- SugarCrepe (`main_eval.py`) and BiVLC: open_clip, fp32. VISLA: its evaluation code is not
  released; the authors' SugarCrepe++ scripts are fp16 for CLIP models.
At fp16 many near-equal scores become exact ties, which VG-Relation / VG-Attribution (argmax over
[false, true]) and every strict `>` rule count as wrong, so fp32 numbers differ from the published
fp16 ones for those models. `fp16` here reproduces the reference's arithmetic as closely as torch
allows on any device: the model is a copy with open_clip's `convert_weights_to_lp` (the weights
`clip.load` halves: linear, conv, attention, projections; LayerNorm keeps fp32 weights and, as
CLIP's own LayerNorm does, normalises in fp32 and casts back: open_clip's `LayerNormFp32`, the
class open_clip itself builds at low precision, so CUDA's kernel gets one dtype), its
features are L2-normalised in fp16, and every score is an fp16 product summed by torch (fp32
accumulation on CPU, then rounded to fp16). What differs from the reference: numpy's fp16
`einsum` may round partial sums to fp16 and the reference normalises with numpy on fp16 arrays,
so a score can differ in its last fp16 bit; CPU fp16 kernels are slower than fp32.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def dtype_of(precision: str) -> torch.dtype:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got '{precision}'")
    return PRECISIONS[precision]


def precision_of(model: nn.Module) -> str:
    """The precision of a model's weights ("fp32" for any dtype not in `PRECISIONS`)."""
    dtype = next(model.parameters()).dtype
    return next((name for name, d in PRECISIONS.items() if d == dtype), "fp32")


def lowered_copy(model: nn.Module, precision: str) -> nn.Module:
    """A copy of an open_clip model with its weights in `precision` as `clip.load` does for fp16
    (the caller's model is left as it was)."""
    from open_clip.model import convert_weights_to_lp
    from open_clip.transformer import LayerNorm, LayerNormFp32
    low = copy.deepcopy(model)
    convert_weights_to_lp(low, dtype=dtype_of(precision))
    for module in low.modules():
        if type(module) is LayerNorm:  # parameters in fp32 (also from a model held in bf16); computes in fp32
            module.float()
            module.__class__ = LayerNormFp32
    return low
