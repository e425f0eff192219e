"""Text length per batch: encode captions at the batch's longest caption, not the padded context.

CLIP's text tower (open_clip's `CLIP`: token embedding + positional embedding -> causal
transformer -> final norm -> the feature at the end-of-text token) lets token i attend only to
tokens <= i, and pools at the end-of-text token, so the padding after it never reaches the
feature. Cutting the 77-token context to the longest caption of the batch therefore gives the
same embedding for every caption, at a fraction of the work (COCO captions are ~13 tokens, and the
hard-negative recipes encode 2-4 texts per anchor). `enable_text_trimming(model)` swaps in such
an `encode_text` on towers where this is exact and says why not on the others:

- exact: `CLIP` with a causal attention mask and `argmax` (OpenAI lineage: the end-of-text id is
  the largest), `eos` or `first` pooling;
- not trimmed (full context, as before): `last` pooling (the feature is the last position, which
  trimming moves), a tower without a causal mask, and `CustomTextCLIP` towers (Hugging Face text
  models, open_clip's `TextTransformer` with a class token), which keep their own `encode_text`.

The padding id is 0 (open_clip's tokenizer); the length kept is the last non-zero position + 1,
so a real token 0 ("!" in OpenAI's vocabulary) inside a caption is kept.
"""
from __future__ import annotations

import types
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

EXACT_POOLS = ("argmax", "eos", "first")


def why_not_trimmable(model: nn.Module) -> Optional[str]:
    """None when trimming is exact for this model, else the reason."""
    from open_clip.model import CLIP
    if not isinstance(model, CLIP):
        return f"{type(model).__name__} keeps its own text tower"
    pool = getattr(model, "text_pool_type", "argmax")
    if pool not in EXACT_POOLS:
        return f"text pooling '{pool}' reads a position that trimming moves"
    if getattr(model, "attn_mask", None) is None:
        return "the text transformer is not causal"
    return None


def text_length(text: torch.Tensor) -> int:
    """Positions up to the last non-padding token of any row."""
    positions = torch.arange(1, text.shape[1] + 1, device=text.device)
    return max(1, int(((text != 0) * positions).max()))


def _trimmed_encode_text(self, text: torch.Tensor, normalize: bool = False) -> torch.Tensor:
    from open_clip.transformer import text_global_pool
    length = text_length(text)
    text = text[:, :length]
    cast_dtype = self.transformer.get_cast_dtype()
    x = self.token_embedding(text).to(cast_dtype)
    x = x + self.positional_embedding[:length].to(cast_dtype)
    x = self.transformer(x, attn_mask=self.attn_mask[:length, :length])
    x = self.ln_final(x)
    x = text_global_pool(x, text, self.text_pool_type, eos_token_id=getattr(self, "text_eos_id", None))
    if self.text_projection is not None:
        x = self.text_projection(x) if isinstance(self.text_projection, nn.Linear) else x @ self.text_projection
    return F.normalize(x, dim=-1) if normalize else x


def enable_text_trimming(model: nn.Module) -> Optional[str]:
    """Make `model.encode_text` (and so `model(...)`) trim to the batch's length where that is
    exact; returns None when enabled, else the reason it was not."""
    reason = why_not_trimmable(model)
    if reason is None:
        model.encode_text = types.MethodType(_trimmed_encode_text, model)
    return reason
