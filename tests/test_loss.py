"""The contrastive loss equals a loop-based reference for every batch shape, and 2 gloo processes
give the same loss and the same gradients as one process on the concatenated batch."""
import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from trainer.batch import Batch
from trainer.loss import ContrastiveLoss, Layout, contrastive_loss

# name -> (B anchors, P partners, negatives per anchor, padded negative columns, partners_as_positives)
SHAPES = {
    "plain": (4, 0, 0, 0, True),               # B x B
    "negclip": (4, 4, 2, 0, True),             # 2B images x 4B texts
    "trohn_text": (4, 0, 1, 0, True),          # B x 2B
    "trohn_img": (4, 4, 0, 0, True),           # 2B x 2B
    "left_right_half": (4, 2, 0, 0, True),     # partners for half the anchors
    "partners_as_columns": (4, 4, 1, 0, False),
    "padding": (4, 2, 3, 5, True),             # 5 of the 12 negative columns are padding
}
DIM = 8


def make_batch(shape: str, seed: int) -> Batch:
    b, p, per, pad, _ = SHAPES[shape]
    g = torch.Generator().manual_seed(seed)
    h = b * per
    valid = torch.ones(b + p + h, dtype=torch.bool)
    if pad:
        valid[torch.randperm(h, generator=g)[:pad] + b + p] = False
    return Batch(images=torch.randn(b + p, 6, generator=g), texts=torch.randn(b + p + h, 5, generator=g),
                 num_anchors=b, partner_of=torch.arange(p), negative_of=torch.arange(b).repeat_interleave(per),
                 text_valid=valid, keys=[f"s{seed}-{i}" for i in range(b)]).check()


class Towers(torch.nn.Module):
    """Stand-in for a CLIP model: one linear layer per tower, normalised outputs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(123)
        self.visual, self.text = torch.nn.Linear(6, DIM), torch.nn.Linear(5, DIM)
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, batch):
        return (F.normalize(self.visual(batch.images), dim=-1), F.normalize(self.text(batch.texts), dim=-1),
                self.logit_scale.exp())


def reference_loss(img, txt, scale, layouts_and_offsets):
    """Loop over rows: image->text over valid texts, text->image over all images (matched texts)."""
    rows_i2t, rows_t2i = [], []
    text_valid = torch.cat([lay.text_valid for lay, _, _ in layouts_and_offsets])
    for lay, img_off, txt_off in layouts_and_offsets:
        for j in range(lay.text_to_image.numel()):
            i = int(lay.text_to_image[j])
            if i < 0 or not bool(lay.image_is_row[i]):
                continue
            gi, gj = img_off + i, txt_off + j
            cols = [scale * img[gi] @ txt[k] for k in range(txt.shape[0]) if text_valid[k]]
            rows_i2t.append(torch.logsumexp(torch.stack(cols), 0) - scale * img[gi] @ txt[gj])
            cols = [scale * txt[gj] @ img[k] for k in range(img.shape[0])]
            rows_t2i.append(torch.logsumexp(torch.stack(cols), 0) - scale * txt[gj] @ img[gi])
    return (torch.stack(rows_i2t).mean() + torch.stack(rows_t2i).mean()) / 2


def concatenated(batches, partners_as_positives):
    layouts = [Layout.from_batch(b, partners_as_positives) for b in batches]
    offsets, io, to = [], 0, 0
    for b, lay in zip(batches, layouts):
        offsets.append((lay, io, to))
        io, to = io + b.images.shape[0], to + b.texts.shape[0]
    return Layout.cat(layouts), offsets


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_loss_matches_loop_reference(shape):
    batches = [make_batch(shape, 0), make_batch(shape, 1)]  # also exercises Layout.cat
    model = Towers()
    img = torch.cat([model(b)[0] for b in batches])
    txt = torch.cat([model(b)[1] for b in batches])
    scale = model.logit_scale.exp()
    layout, offsets = concatenated(batches, SHAPES[shape][4])
    got = contrastive_loss(img, txt, scale, layout)
    want = reference_loss(img, txt, scale, offsets)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_padding_columns_do_not_change_the_loss():
    batch = make_batch("padding", 0)
    model = Towers()
    img, txt, scale = model(batch)
    full = contrastive_loss(img, txt, scale, Layout.from_batch(batch))
    keep = batch.text_valid
    trimmed = contrastive_loss(img, txt[keep], scale, Layout(batch.text_to_image[keep], keep[keep],
                                                             torch.ones(6, dtype=torch.bool)))
    torch.testing.assert_close(full, trimmed)


def test_logit_scale_is_clamped():
    batch = make_batch("plain", 0)
    model = Towers()
    img, txt, _ = model(batch)
    loss = ContrastiveLoss(logit_scale_max=100.0)
    lay = Layout.from_batch(batch)
    torch.testing.assert_close(loss(img, txt, torch.tensor(1e4), lay), loss(img, txt, torch.tensor(100.0), lay))


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _rank_worker(rank, out_dir):
    # file rendezvous: no TCP port to pick, so no race with ports other tests left in use
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=2)
    results = {}
    for shape in SHAPES:
        model = Towers()
        batch = make_batch(shape, rank)
        loss = ContrastiveLoss()(*model(batch), Layout.from_batch(batch, SHAPES[shape][4]))
        loss.backward()
        grads = _grads(model)
        for g in grads.values():  # what DDP does: average gradients over ranks
            dist.all_reduce(g)
            g /= 2
        results[shape] = (loss.detach(), grads)
    torch.save(results, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_equal_one_process_on_concatenated_batch(tmp_path):
    mp.spawn(_rank_worker, args=(str(tmp_path),), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for shape in SHAPES:
        model = Towers()
        batches = [make_batch(shape, 0), make_batch(shape, 1)]
        feats = [model(b) for b in batches]
        layout, _ = concatenated(batches, SHAPES[shape][4])
        loss = ContrastiveLoss()(torch.cat([f[0] for f in feats]), torch.cat([f[1] for f in feats]),
                                 feats[0][2], layout)
        loss.backward()
        want = _grads(model)
        for r in range(2):
            got_loss, got_grads = ranks[r][shape]
            torch.testing.assert_close(got_loss, loss.detach(), rtol=1e-6, atol=1e-6, msg=f"{shape} loss")
            for name in want:
                torch.testing.assert_close(got_grads[name], want[name], rtol=1e-5, atol=1e-6,
                                           msg=f"{shape} grad {name} rank {r}")
