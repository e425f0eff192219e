"""Batched, L2-normalised image and text embeddings of a loaded open_clip model.

    encoder = OpenClipEncoder.from_loaded(models.load_model("ViT-B-32", "openai"), batch_size=256)
    encoder.encode_images([pil, ...])                 # [N, D] float32, rows of norm 1, on the CPU
    encoder.encode_image_tensors(stacked_preprocessed) # the same for images already preprocessed
    encoder.encode_texts(["a dog", ...])

The model runs in eval mode under `torch.no_grad`, `batch_size` inputs at a time; the caller's
train/eval state is restored afterwards. Data generation embeds images with it (the kNN hard
negatives); evaluation's `eval.scorer.OpenClipScorer` is this encoder plus reduced precision.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor, nn


class OpenClipEncoder:
    """Embeds images and texts with an open_clip model (`models.load_model`, or one being trained)."""

    def __init__(self, model: nn.Module, preprocess, tokenizer, name: str = "open_clip",
                 batch_size: int = 256, device: str | torch.device = "cpu",
                 out_dtype: torch.dtype = torch.float32):
        self.model, self.preprocess, self.tokenizer = model, preprocess, tokenizer
        self.name, self.batch_size, self.device = name, batch_size, torch.device(device)
        self.out_dtype = out_dtype  # the dtype of the pixels fed and of the embeddings returned

    @classmethod
    def from_loaded(cls, loaded, **kwargs):
        kwargs.setdefault("name", loaded.info.arch + (f":{loaded.info.pretrained}" if loaded.info.pretrained else ""))
        return cls(loaded.model, loaded.preprocess, loaded.tokenizer, **kwargs)

    def _model(self) -> nn.Module:
        """The module whose towers run (a wrapped model's own `module`)."""
        return getattr(self.model, "module", self.model)

    def encode_texts(self, texts: Sequence[str]) -> Tensor:
        def encode(model, chunk):
            return model.encode_text(self.tokenizer(list(chunk)).to(self.device))
        return self._encode(texts, encode)

    def encode_images(self, images: Sequence[Image.Image]) -> Tensor:
        def encode(model, chunk):
            pixels = torch.stack([self.preprocess(im) for im in chunk]).to(self.device, self.out_dtype)
            return model.encode_image(pixels)
        return self._encode(images, encode)

    def encode_image_tensors(self, pixels: Tensor) -> Tensor:
        """`encode_images` for images already through `preprocess` ([N, 3, H, W]): same batches."""
        return self._encode(pixels, lambda model, chunk: model.encode_image(chunk.to(self.device)))

    @torch.no_grad()
    def _encode(self, items: Sequence, encode) -> Tensor:
        model = self._model()
        was_training = model.training
        model.eval()
        try:
            out = [encode(model, items[i:i + self.batch_size]).to(self.out_dtype)
                   for i in range(0, len(items), self.batch_size)]
        finally:
            model.train(was_training)  # scoring leaves the caller's train/eval state as it was
        return F.normalize(torch.cat(out), dim=-1).cpu() if out else torch.empty(0, dtype=self.out_dtype)
