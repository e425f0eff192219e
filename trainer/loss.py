"""Contrastive loss with hard-negative text columns, partner pairs and a same-source mask, exact
across ranks; plus the in-batch accuracies that explain it.

In the spirit of open_clip's `ClipLoss`, for the batch layout of `trainer.batch`:

    image -> text: every image row against every *valid* text column of the global batch
                   (anchor captions, partner captions, hard negatives); target = its own caption.
    text -> image: only matched texts (anchor and partner captions) against every image;
                   hard negatives have no image, so they are columns only, never rows.
    loss = (mean image->text CE + mean text->image CE) / 2

Partner pairs (a neighbour, generated or mirrored image with its caption) are extra positive
pairs: their rows count like anchors, and they sit as hard columns next to their anchor.
With `partners_as_positives=False` they are columns only (no rows of their own).

False negatives (`mask_same_image`, default on): COCO has 5 captions per image, so a batch can
hold two captions of one image; plain InfoNCE then pushes a true pair apart. A logit is masked
out (-inf) when, in image->text, the column describes the row's source image or has the same text
as the row's caption, and in text->image, the column image is the row text's source image or its
caption has the same text. The targets themselves are never masked; hard negatives are masked by
text only (a negative of one caption of an image is false for every caption of it). Ids come from
the batch (`image_ids`, `text_ids`); the number of masked logits is reported per step.

Across ranks, features are gathered *with gradients* (`torch.distributed.nn.functional.
all_gather`), and every rank computes the loss of the whole global batch. The all-gather backward
sums the gradient of each rank's copy, so each rank holds `world * dL/d(local features)`, and the
gradient averaging of DDP / DeepSpeed turns that into exactly the single-process gradient of the
global batch.

The logit scale enters as `exp(s)` unclamped, as open_clip and NegCLIP: the trainer clamps the
parameter `s` after each optimiser step, so its gradient is never cut. Under DeepSpeed, where the
optimiser holds the master weights and a parameter clamp would be undone, `clamp_in_forward` caps
the value at `logit_scale_max` with a straight-through gradient instead.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from compclip.trainer.batch import Batch

LAYOUT_FIELDS = ("text_to_image", "text_valid", "image_is_row", "negative_owner", "image_pair",
                 "image_ids", "text_hash")


@dataclass
class Layout:
    """Per-rank bookkeeping the loss needs, in local indices (one or several batches concatenated).

    Ids in `image_ids` / `text_hash` are >= 0 when they come from the data; a batch without ids
    gets distinct negative ones (-1 - index), which are shifted like indices when layouts are
    concatenated, so they never collide across batches or ranks."""
    text_to_image: Tensor  # [T] long: image index of each text, -1 for a hard negative
    text_valid: Tensor  # [T] bool: False for padding columns
    image_is_row: Tensor  # [I] bool: image contributes an image->text row (and its text a row)
    negative_owner: Tensor  # [T] long: the image (anchor or partner) whose caption a hard negative was made from, -1 otherwise
    image_pair: Tensor  # [I] long: the other image of an anchor/partner pair, -1 otherwise
    image_ids: Tensor  # [I] int64: source-image id (same id: same source image)
    text_hash: Tensor  # [T] int64: text id (same id: same text)

    @classmethod
    def from_batch(cls, batch: Batch, partners_as_positives: bool = True) -> "Layout":
        device = batch.texts.device
        b, p, h = batch.num_anchors, batch.num_partners, batch.num_negatives
        rows = torch.ones(b + p, dtype=torch.bool, device=device)
        if not partners_as_positives:
            rows[b:] = False
        owner = torch.cat([torch.full((b + p,), -1, dtype=torch.long, device=device), batch.negative_of.long()])
        pair = torch.full((b + p,), -1, dtype=torch.long, device=device)
        partners = torch.arange(b, b + p, device=device)
        pair[batch.partner_of.long()] = partners
        pair[partners] = batch.partner_of.long()
        image_ids = batch.image_ids if batch.image_ids is not None else -1 - torch.arange(b + p, device=device)
        hashes = batch.text_ids if batch.text_ids is not None else -1 - torch.arange(b + p + h, device=device)
        return cls(batch.text_to_image, batch.text_valid, rows, owner, pair, image_ids.long(), hashes.long())

    @staticmethod
    def cat(layouts: list["Layout"]) -> "Layout":
        """Concatenate layouts of batches whose features are concatenated in the same order."""
        def shift(t: Tensor, offset: int) -> Tensor:  # indices >= 0 and placeholder ids < 0 move
            return torch.where(t >= 0, t + offset, t)

        parts: dict[str, list[Tensor]] = {name: [] for name in LAYOUT_FIELDS}
        images = texts = 0
        for lay in layouts:
            parts["text_to_image"].append(shift(lay.text_to_image, images))
            parts["negative_owner"].append(shift(lay.negative_owner, images))
            parts["image_pair"].append(shift(lay.image_pair, images))
            parts["image_ids"].append(torch.where(lay.image_ids < 0, lay.image_ids - images, lay.image_ids))
            parts["text_hash"].append(torch.where(lay.text_hash < 0, lay.text_hash - texts, lay.text_hash))
            parts["text_valid"].append(lay.text_valid)
            parts["image_is_row"].append(lay.image_is_row)
            images += lay.image_is_row.numel()
            texts += lay.text_valid.numel()
        return Layout(**{name: torch.cat(ts) for name, ts in parts.items()})


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
    for name in LAYOUT_FIELDS:
        t = getattr(layout, name)
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.contiguous())
        gathered.append(parts)
    per_rank = [Layout(*parts) for parts in zip(*gathered)]
    assert all(l.image_is_row.numel() == num_images for l in per_rank), "ranks disagree on shapes"
    return Layout.cat(per_rank)


@dataclass
class Logits:
    """The two directions of one global batch, already masked, with their targets."""
    i2t: Tensor  # [rows, T]
    i2t_target: Tensor  # [rows]
    t2i: Tensor  # [text rows, I]
    t2i_target: Tensor  # [text rows]
    masked: int  # logits masked as same-source false negatives


def caption_columns(layout: Layout) -> Tensor:
    """The caption column of each image (every image has exactly one matched text)."""
    matched = layout.text_to_image >= 0
    caption_of = torch.full((layout.image_is_row.numel(),), -1, dtype=torch.long, device=matched.device)
    caption_of[layout.text_to_image[matched]] = torch.nonzero(matched).squeeze(1)
    return caption_of


def same_image(layout: Layout) -> tuple[Tensor, Tensor]:
    """Boolean masks of false negatives: [I, T] for image->text and [T, I] for text->image
    (only entries of matched texts / valid columns matter); targets are never marked."""
    t2i, matched = layout.text_to_image, layout.text_to_image >= 0
    caption_of = caption_columns(layout)
    image_of_text = layout.image_ids[t2i.clamp(min=0)]  # meaningful where matched
    hash_of_caption = layout.text_hash[caption_of]
    i2t = ((layout.image_ids[:, None] == image_of_text[None, :]) & matched[None, :]) \
        | (hash_of_caption[:, None] == layout.text_hash[None, :])
    i2t[torch.arange(caption_of.numel(), device=i2t.device), caption_of] = False
    t2i_mask = (image_of_text[:, None] == layout.image_ids[None, :]) \
        | (layout.text_hash[:, None] == hash_of_caption[None, :])
    t2i_mask &= matched[:, None]
    t2i_mask[matched.nonzero().squeeze(1), t2i[matched]] = False
    return i2t, t2i_mask


def contrastive_logits(image_features: Tensor, text_features: Tensor, logit_scale: Tensor,
                       layout: Layout, mask_same_image: bool = True) -> Logits:
    """Scaled, masked logits of one (already global) batch; features L2-normalised."""
    caption_of = caption_columns(layout)
    rows = layout.image_is_row
    matched = layout.text_to_image >= 0
    text_rows = matched & layout.image_is_row[layout.text_to_image.clamp(min=0)]

    logits_i2t = logit_scale * image_features @ text_features.T  # [I, T]
    drop_i2t = ~layout.text_valid[None, :].expand_as(logits_i2t)
    logits_t2i = logit_scale * text_features[text_rows] @ image_features.T  # [rows, I]
    masked = 0
    if mask_same_image:
        same_i2t, same_t2i = same_image(layout)
        same_i2t &= layout.text_valid[None, :]
        drop_i2t = drop_i2t | same_i2t
        same_t2i = same_t2i[text_rows]
        logits_t2i = logits_t2i.masked_fill(same_t2i, float("-inf"))
        masked = int(same_i2t[rows].sum()) + int(same_t2i.sum())
    logits_i2t = logits_i2t.masked_fill(drop_i2t, float("-inf"))
    return Logits(logits_i2t[rows], caption_of[rows], logits_t2i, layout.text_to_image[text_rows], masked)


def contrastive_loss(image_features: Tensor, text_features: Tensor, logit_scale: Tensor,
                     layout: Layout, mask_same_image: bool = True) -> Tensor:
    """The loss of one (already global) batch; `logit_scale` = exp(s)."""
    logits = contrastive_logits(image_features, text_features, logit_scale, layout, mask_same_image)
    return (F.cross_entropy(logits.i2t, logits.i2t_target) + F.cross_entropy(logits.t2i, logits.t2i_target)) / 2


@torch.no_grad()
def batch_metrics(image_features: Tensor, text_features: Tensor, layout: Layout, logits: Logits) -> dict[str, float]:
    """In-batch numbers that explain training (global batch, detached):

    - `i2t_acc` / `t2i_acc`: rows whose top (masked) logit is their target;
    - `hard_negative_acc`: images with hard negatives of their own caption (anchors, and partners
      with `negatives.per_partner`) whose image scores its caption above every one of them;
    - `partner_acc`: over both members of every anchor/partner pair, the share whose caption
      scores its own image above the other image of the pair;
    - `negative_padding`: the share of the hard-negative columns that are padding.
    Metrics without a case in the batch (no negatives, no partners) are left out."""
    out = {"i2t_acc": float((logits.i2t.argmax(1) == logits.i2t_target).float().mean()),
           "t2i_acc": float((logits.t2i.argmax(1) == logits.t2i_target).float().mean())}
    caption_of = caption_columns(layout)
    sims = image_features.float() @ text_features.float().T  # [I, T]
    images = torch.arange(caption_of.numel(), device=sims.device)
    positive = sims[images, caption_of]
    negative = layout.text_to_image < 0
    if bool(negative.any()):
        out["negative_padding"] = float((~layout.text_valid[negative]).float().mean())
    owned = (layout.negative_owner[None, :] == images[:, None]) & layout.text_valid[None, :]
    has_negative = owned.any(1)
    if bool(has_negative.any()):
        hardest = sims.masked_fill(~owned, float("-inf")).max(1).values
        out["hard_negative_acc"] = float((positive > hardest)[has_negative].float().mean())
    paired = layout.image_pair >= 0
    if bool(paired.any()):
        other = layout.image_pair[paired]
        captions = caption_of[paired]
        out["partner_acc"] = float((positive[paired] > sims[other, captions]).float().mean())
    return out


class ContrastiveLoss(nn.Module):
    """Gather across ranks and compute the masked loss of the global batch.

    `forward(..., details=True)` also returns a dict with `loss_i2t`, `loss_t2i`,
    `masked_pairs` and the `batch_metrics`."""

    def __init__(self, logit_scale_max: Optional[float] = 100.0, gather_with_grad: bool = True,
                 mask_same_image: bool = True, clamp_in_forward: bool = False):
        super().__init__()
        self.logit_scale_max, self.gather_with_grad = logit_scale_max, gather_with_grad
        self.mask_same_image, self.clamp_in_forward = mask_same_image, clamp_in_forward

    def forward(self, image_features: Tensor, text_features: Tensor, logit_scale: Tensor,
                layout: Layout, details: bool = False):
        num_local_images = image_features.shape[0]
        # the loss runs in fp32 even when the towers ran under bf16/fp16 autocast
        images = gather_features(image_features.float(), self.gather_with_grad)
        texts = gather_features(text_features.float(), self.gather_with_grad)
        scale = logit_scale.float()
        if self.clamp_in_forward and self.logit_scale_max is not None:  # value capped, gradient kept
            scale = scale - (scale - scale.clamp(max=self.logit_scale_max)).detach()
        lay = global_layout(layout, num_local_images)
        logits = contrastive_logits(images, texts, scale, lay, self.mask_same_image)
        loss_i2t = F.cross_entropy(logits.i2t, logits.i2t_target)
        loss_t2i = F.cross_entropy(logits.t2i, logits.t2i_target)
        loss = (loss_i2t + loss_t2i) / 2
        if not details:
            return loss
        info = {"loss_i2t": float(loss_i2t.detach()), "loss_t2i": float(loss_t2i.detach()),
                "masked_pairs": float(logits.masked)}
        info.update(batch_metrics(images, texts, lay, logits))
        return loss, info
