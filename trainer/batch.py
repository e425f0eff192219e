"""The training batch layout: which image each text column matches, and which are negatives only.

    images = [ B anchor images | P partner images ]
    texts  = [ B anchor captions | P partner captions | H hard-negative captions ]

`text_to_image[j]` is the image index text j describes, or -1 for a hard negative (a text with no
image). Anchors and partners are both positive pairs: text i matches image i for i < B + P.
`partner_of[p]` is the anchor a partner image belongs to (the pair shares the batch and the rank);
`negative_of[h]` is the image (an index into images) whose caption hard negative h was made from:
an anchor (0..B-1), or a partner (B + p) for the negatives of a neighbour partner's own caption
(`negatives.per_partner`; the composer puts the anchors' negatives first). `text_valid[j]` is
False for padding columns (an anchor or partner with fewer negatives than the recipe asks for),
which the loss masks out.
`image_ids[i]` (int64) names the source image of image i (two captions of one COCO image share it)
and `text_ids[j]` (int64) the normalised text of text j; the loss never treats two columns with
the same source image, or with the same text, as negatives of each other (`trainer.loss`). Both
are optional: without them every image and text counts as distinct.
Shapes are fixed per recipe (B, P, H), so every rank contributes the same shapes to the gather.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor


@dataclass
class Batch:
    images: Tensor  # [B + P, C, H, W]: float, or uint8 before `trainer.transforms.DeviceNormalize`
    texts: Tensor  # [B + P + H, context_length] token ids
    num_anchors: int  # B
    partner_of: Tensor  # [P] long, anchor index of each partner image
    negative_of: Tensor  # [H] long, image (anchor or partner) whose caption each hard negative was made from
    text_valid: Tensor  # [B + P + H] bool
    keys: list[str] = field(default_factory=list)  # anchor sample keys, for error messages
    image_ids: Optional[Tensor] = None  # [B + P] int64 source-image ids (same-image mask)
    text_ids: Optional[Tensor] = None  # [B + P + H] int64 text hashes (same-text mask)

    @property
    def num_partners(self) -> int:
        return int(self.partner_of.numel())

    @property
    def num_negatives(self) -> int:
        return int(self.negative_of.numel())

    @property
    def num_matched(self) -> int:
        return self.num_anchors + self.num_partners

    @property
    def text_to_image(self) -> Tensor:
        matched = torch.arange(self.num_matched, device=self.texts.device)
        negatives = torch.full((self.num_negatives,), -1, dtype=torch.long, device=self.texts.device)
        return torch.cat([matched, negatives])

    def check(self) -> "Batch":
        """Raise ValueError if the tensors do not follow the layout; returns self."""
        b, p, h = self.num_anchors, self.num_partners, self.num_negatives
        problems = []
        if self.images.shape[0] != b + p:
            problems.append(f"images has {self.images.shape[0]} rows, expected B+P={b + p}")
        if self.texts.shape[0] != b + p + h:
            problems.append(f"texts has {self.texts.shape[0]} rows, expected B+P+H={b + p + h}")
        if self.text_valid.shape != (b + p + h,) or self.text_valid.dtype != torch.bool:
            problems.append("text_valid must be a bool vector of length B+P+H")
        elif not bool(self.text_valid[: b + p].all()):
            problems.append("anchor and partner captions must all be valid")
        for name, ref, n, what in (("partner_of", self.partner_of, b, "anchors"),
                                   ("negative_of", self.negative_of, b + p, "images")):
            if ref.numel() and (int(ref.min()) < 0 or int(ref.max()) >= n):
                problems.append(f"{name} must index {what} 0..{n - 1}")
        for name, ref, n in (("image_ids", self.image_ids, b + p), ("text_ids", self.text_ids, b + p + h)):
            if ref is not None and tuple(ref.shape) != (n,):
                problems.append(f"{name} must have {n} entries")
        if self.keys and len(self.keys) != b:
            problems.append(f"keys has {len(self.keys)} entries, expected B={b}")
        if problems:
            raise ValueError("batch layout: " + "; ".join(problems))
        return self

    def pin_memory(self) -> "Batch":
        """Page-locked copies (DataLoader `pin_memory`), so `to(cuda, non_blocking=True)` overlaps."""
        def pin(t: Optional[Tensor]) -> Optional[Tensor]:
            return None if t is None else t.pin_memory()
        return Batch(pin(self.images), pin(self.texts), self.num_anchors, pin(self.partner_of),
                     pin(self.negative_of), pin(self.text_valid), self.keys, pin(self.image_ids), pin(self.text_ids))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        def move(t: Optional[Tensor]) -> Optional[Tensor]:
            return None if t is None else t.to(device, non_blocking=non_blocking)
        return Batch(move(self.images), move(self.texts), self.num_anchors, move(self.partner_of),
                     move(self.negative_of), move(self.text_valid), self.keys, move(self.image_ids),
                     move(self.text_ids))
