"""Contrastive loss with hard-negative text columns and partner pairs, exact across ranks.

In the spirit of open_clip's `ClipLoss`, for the batch layout of `trainer.batch`:

    image -> text: every image row against every *valid* text column of the global batch
                   (anchor captions, partner captions, hard negatives); target = its own caption.
    text -> image: only matched texts (anchor and partner captions) against every image;
                   hard negatives have no image, so they are columns only, never rows.
    loss = (mean image->text CE + mean text->image CE) / 2

Partner pairs (a neighbour, generated or mirrored image with its caption) are extra positive
pairs: their rows count like anchors, and they sit as hard columns next to their anchor.
With `partners_as_positives=False` they are columns only (no rows of their own).

Across ranks, features are gathered *with gradients* (`torch.distributed.nn.functional.
all_gather`), and every rank computes the loss of the whole global batch. The all-gather backward
sums the gradient of each rank's copy, so each rank holds `world * dL/d(local features)`, and the
gradient averaging of DDP / DeepSpeed turns that into exactly the single-process gradient of the
global batch. The logit scale enters as `exp(s)` clamped at `logit_scale_max`, as CLIP.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.batch import Batch


@dataclass
class Layout:
    """Per-rank bookkeeping the loss needs, in local indices (one or several batches concatenated)."""
    text_to_image: Tensor  # [T] long: image index of each text, -1 for a hard negative
    text_valid: Tensor  # [T] bool: False for padding columns
    image_is_row: Tensor  # [I] bool: image contributes an image->text row (and its text a row)

    @classmethod
    def from_batch(cls, batch: Batch, partners_as_positives: bool = True) -> "Layout":
        rows = torch.ones(batch.num_matched, dtype=torch.bool, device=batch.texts.device)
        if not partners_as_positives:
            rows[batch.num_anchors:] = False
        return cls(batch.text_to_image, batch.text_valid, rows)

    @staticmethod
    def cat(layouts: list["Layout"]) -> "Layout":
        """Concatenate layouts of batches whose features are concatenated in the same order."""
        t2i, offset = [], 0
        for lay in layouts:
            t2i.append(torch.where(lay.text_to_image >= 0, lay.text_to_image + offset, lay.text_to_image))
            offset += lay.image_is_row.numel()
        return Layout(torch.cat(t2i), torch.cat([l.text_valid for l in layouts]),
                      torch.cat([l.image_is_row for l in layouts]))


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_features(x: Tensor, with_grad: bool = True) -> Tensor:
    """Concatenate `x` from every rank in rank order; differentiable when `with_grad`."""
    rank, world = _world()
    if world == 1:
        return x
    if with_grad:
        import torch.distributed.nn.functional as dist_fn
        with warnings.catch_warnings():  # deprecated in favour of a private API; still correct
            warnings.simplefilter("ignore", FutureWarning)
            return torch.cat(dist_fn.all_gather(x), dim=0)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.detach().contiguous())
    parts[rank] = x  # gradient flows through the local part only (open_clip's no-grad gather)
    return torch.cat(parts, dim=0)


def global_layout(layout: Layout, num_images: int) -> Layout:
    """Gather the layout from every rank, shifting image indices by each rank's offset."""
    rank, world = _world()
    if world == 1:
        return layout
    gathered = []
    for name in ("text_to_image", "text_valid", "image_is_row"):
        t = getattr(layout, name)
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.contiguous())
        gathered.append(parts)
    per_rank = [Layout(*parts) for parts in zip(*gathered)]
    assert all(l.image_is_row.numel() == num_images for l in per_rank), "ranks disagree on shapes"
    return Layout.cat(per_rank)


def contrastive_loss(image_features: Tensor, text_features: Tensor, logit_scale: Tensor,
                     layout: Layout) -> Tensor:
    """The loss of one (already global) batch; features L2-normalised, `logit_scale` = exp(s)."""
    num_images = image_features.shape[0]
    matched = layout.text_to_image >= 0
    # the caption column of each image (every image has exactly one matched text)
    caption_of = torch.full((num_images,), -1, dtype=torch.long, device=image_features.device)
    caption_of[layout.text_to_image[matched]] = torch.nonzero(matched).squeeze(1)

    logits_i2t = logit_scale * image_features @ text_features.T  # [I, T]
    logits_i2t = logits_i2t.masked_fill(~layout.text_valid, float("-inf"))
    rows = layout.image_is_row
    loss_i2t = F.cross_entropy(logits_i2t[rows], caption_of[rows])

    text_rows = matched & layout.image_is_row[layout.text_to_image.clamp(min=0)]
    logits_t2i = logit_scale * text_features[text_rows] @ image_features.T  # [rows, I]
    loss_t2i = F.cross_entropy(logits_t2i, layout.text_to_image[text_rows])
    return (loss_i2t + loss_t2i) / 2


class ContrastiveLoss(nn.Module):
    """Gather across ranks, clamp the logit scale, and compute `contrastive_loss` globally."""

    def __init__(self, logit_scale_max: float = 100.0, gather_with_grad: bool = True):
        super().__init__()
        self.logit_scale_max, self.gather_with_grad = logit_scale_max, gather_with_grad

    def forward(self, image_features: Tensor, text_features: Tensor, logit_scale: Tensor,
                layout: Layout) -> Tensor:
        num_local_images = image_features.shape[0]
        # the loss runs in fp32 even when the towers ran under bf16/fp16 autocast
        images = gather_features(image_features.float(), self.gather_with_grad)
        texts = gather_features(text_features.float(), self.gather_with_grad)
        logit_scale = logit_scale.float()
        lay = global_layout(layout, num_local_images)
        scale = logit_scale.clamp(max=self.logit_scale_max)
        return contrastive_loss(images, texts, scale, lay)
