"""The contrastive loss equals a loop-based reference for every batch shape, same-source masking
included; 2 gloo processes give the same loss and gradients as one process on the concatenated
batch (ids colliding across ranks); the logit scale is never cut from the gradient; the in-batch
metrics equal brute-force counts."""
import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from compclip.trainer.batch import Batch
from compclip.trainer.loss import ContrastiveLoss, Layout, contrastive_loss

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


def make_batch(shape: str, seed: int, ids: bool = False) -> Batch:
    """With `ids`, source-image and text ids are drawn from small ranges, so images share a source
    and texts repeat within a batch and across the batches of different seeds (ranks)."""
    b, p, per, pad, _ = SHAPES[shape]
    g = torch.Generator().manual_seed(seed)
    h = b * per
    valid = torch.ones(b + p + h, dtype=torch.bool)
    if pad:
        valid[torch.randperm(h, generator=g)[:pad] + b + p] = False
    batch = Batch(images=torch.randn(b + p, 6, generator=g), texts=torch.randn(b + p + h, 5, generator=g),
                  num_anchors=b, partner_of=torch.arange(p), negative_of=torch.arange(b).repeat_interleave(per),
                  text_valid=valid, keys=[f"s{seed}-{i}" for i in range(b)])
    if ids:
        batch.image_ids = torch.randint(0, 3, (b + p,), generator=g)
        batch.text_ids = torch.randint(0, 5, (b + p + h,), generator=g)
    return batch.check()


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


def reference_loss(img, txt, scale, batches, partners_as_positives=True, mask=True):
    """Loop over rows: image->text over valid texts, text->image over all images (matched texts),
    skipping same-source columns (same image id, or same text id) other than the target.
    Returns (loss, number of skipped logits)."""
    texts, images = [], []  # (global image index or -1, valid, text id); (image id, global caption index)
    for n, b in enumerate(batches):
        i0, t0 = len(images), len(texts)
        m = b.num_matched
        for i in range(m):
            images.append((int(b.image_ids[i]) if b.image_ids is not None else ("img", n, i), t0 + i,
                           i < b.num_anchors or partners_as_positives))
        for j in range(b.texts.shape[0]):
            tid = int(b.text_ids[j]) if b.text_ids is not None else ("txt", n, j)
            texts.append((i0 + j if j < m else -1, bool(b.text_valid[j]), tid))
    rows_i2t, rows_t2i, skipped = [], [], 0
    for gi, (group, gj, is_row) in enumerate(images):
        if not is_row:
            continue
        cols = []
        for k, (ik, valid, tid) in enumerate(texts):
            if not valid:
                continue
            same = (ik >= 0 and images[ik][0] == group) or tid == texts[gj][2]
            if mask and k != gj and same:
                skipped += 1
                continue
            cols.append(scale * img[gi] @ txt[k])
        rows_i2t.append(torch.logsumexp(torch.stack(cols), 0) - scale * img[gi] @ txt[gj])
        cols = []
        for k, (group_k, caption_k, _) in enumerate(images):
            same = group_k == group or texts[caption_k][2] == texts[gj][2]
            if mask and k != gi and same:
                skipped += 1
                continue
            cols.append(scale * txt[gj] @ img[k])
        rows_t2i.append(torch.logsumexp(torch.stack(cols), 0) - scale * txt[gj] @ img[gi])
    return (torch.stack(rows_i2t).mean() + torch.stack(rows_t2i).mean()) / 2, skipped


def concatenated(batches, partners_as_positives):
    return Layout.cat([Layout.from_batch(b, partners_as_positives) for b in batches])


@pytest.mark.parametrize("ids", [False, True], ids=["distinct", "shared-ids"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_loss_matches_loop_reference(shape, ids):
    batches = [make_batch(shape, 0, ids), make_batch(shape, 1, ids)]  # also exercises Layout.cat
    model = Towers()
    img = torch.cat([model(b)[0] for b in batches])
    txt = torch.cat([model(b)[1] for b in batches])
    scale = model.logit_scale.exp()
    layout = concatenated(batches, SHAPES[shape][4])
    want, skipped = reference_loss(img, txt, scale, batches, SHAPES[shape][4])
    loss, info = ContrastiveLoss()(img, txt, scale, layout, details=True)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
    assert info["masked_pairs"] == skipped
    assert (skipped > 0) == ids  # the shared-id batches really exercise the mask
    plain, _ = reference_loss(img, txt, scale, batches, SHAPES[shape][4], mask=False)
    torch.testing.assert_close(ContrastiveLoss(mask_same_image=False)(img, txt, scale, layout), plain,
                               rtol=1e-5, atol=1e-6)


def test_padding_columns_do_not_change_the_loss():
    batch = make_batch("padding", 0, ids=True)
    model = Towers()
    img, txt, scale = model(batch)
    full = contrastive_loss(img, txt, scale, Layout.from_batch(batch))
    keep = batch.text_valid
    trimmed = Batch(batch.images, batch.texts[keep], batch.num_anchors, batch.partner_of,
                    batch.negative_of[keep[batch.num_matched:]], keep[keep], batch.keys, batch.image_ids,
                    batch.text_ids[keep])
    torch.testing.assert_close(full, contrastive_loss(img, txt[keep], scale, Layout.from_batch(trimmed)))


OPENAI_STORED_SCALE = 4.6055  # ln of the temperature in OpenAI's CLIP weights: exp = 100.04


def test_logit_scale_gets_a_gradient_from_the_openai_value():
    """The loss does not clamp exp(s): at OpenAI's stored s (above ln 100) the gradient is not cut,
    and after the clamp the trainer applies to the parameter (ln 100) it still is not."""
    batch = make_batch("trohn_text", 0)
    model = Towers()
    img, txt, _ = model(batch)
    lay = Layout.from_batch(batch)
    for value in (OPENAI_STORED_SCALE, math.log(100.0)):
        s = torch.tensor(value, requires_grad=True)
        ContrastiveLoss(logit_scale_max=100.0)(img.detach(), txt.detach(), s.exp(), lay).backward()
        assert s.grad is not None and abs(float(s.grad)) > 1e-6, value


def test_clamp_in_forward_caps_the_value_and_keeps_the_gradient():
    batch = make_batch("plain", 0)
    model = Towers()
    img, txt, _ = model(batch)
    lay = Layout.from_batch(batch)
    capped = ContrastiveLoss(logit_scale_max=100.0, clamp_in_forward=True)
    s = torch.tensor(math.log(1e4), requires_grad=True)
    loss = capped(img.detach(), txt.detach(), s.exp(), lay)
    torch.testing.assert_close(loss, ContrastiveLoss()(img.detach(), txt.detach(), torch.tensor(100.0), lay))
    loss.backward()
    assert abs(float(s.grad)) > 1e-6


def test_batch_metrics_equal_brute_force_counts():
    batch = make_batch("negclip", 3, ids=True)
    img, txt, scale = Towers()(batch)
    img, txt = img.detach(), txt.detach()
    _, info = ContrastiveLoss()(img, txt, scale.detach(), Layout.from_batch(batch), details=True)
    b, p = batch.num_anchors, batch.num_partners
    sims = img @ txt.T
    negs = {a: [batch.num_matched + k for k in range(batch.num_negatives)
                if int(batch.negative_of[k]) == a and batch.text_valid[batch.num_matched + k]] for a in range(b)}
    wins = [all(sims[a, a] > sims[a, j] for j in cols) for a, cols in negs.items() if cols]
    assert info["hard_negative_acc"] == pytest.approx(sum(wins) / len(wins))
    pairs = [(int(batch.partner_of[q]), b + q) for q in range(p)]
    wins = [sims[x, x] > sims[y, x] for a, q in pairs for x, y in ((a, q), (q, a))]
    assert info["partner_acc"] == pytest.approx(sum(wins) / len(wins))
    assert 0.0 <= info["i2t_acc"] <= 1.0 and 0.0 <= info["t2i_acc"] <= 1.0


def test_partner_negatives_count_for_their_image_and_shift_with_images():
    """negatives.per_partner: a negative of a partner's caption belongs to the partner image (B + p),
    in `hard_negative_acc` and when layouts are concatenated (accumulation, ranks)."""
    b = p = 4
    g = torch.Generator().manual_seed(5)
    valid = torch.ones(b + p + b + p, dtype=torch.bool)
    valid[-1] = False  # the last partner has no negative: 1 of 8 negative columns is padding
    batch = Batch(images=torch.randn(b + p, 6, generator=g), texts=torch.randn(2 * (b + p), 5, generator=g),
                  num_anchors=b, partner_of=torch.arange(p), negative_of=torch.arange(b + p), text_valid=valid).check()
    img, txt, scale = Towers()(batch)
    img, txt = img.detach(), txt.detach()
    layout = Layout.from_batch(batch)
    _, info = ContrastiveLoss()(img, txt, scale.detach(), layout, details=True)
    sims = img @ txt.T
    wins = [bool(sims[i, i] > sims[i, b + p + i]) for i in range(b + p - 1)]
    assert info["hard_negative_acc"] == pytest.approx(sum(wins) / len(wins))
    assert info["negative_padding"] == pytest.approx(1 / 8)
    both = Layout.cat([layout, layout])
    assert both.negative_owner[-(b + p):].tolist() == list(range(b + p, 2 * (b + p)))  # shifted by 8 images


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _rank_worker(rank, out_dir):
    # file rendezvous: no TCP port to pick, so no race with ports other tests left in use
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=2)
    results = {}
    for shape in SHAPES:
        model = Towers()
        batch = make_batch(shape, rank, ids=True)
        loss = ContrastiveLoss()(*model(batch), Layout.from_batch(batch, SHAPES[shape][4]))
        loss.backward()
        grads = _grads(model)
        for g in grads.values():  # what DDP does: average gradients over ranks
            dist.all_reduce(g)
            g /= 2
        results[shape] = (loss.detach(), grads)
    torch.save(results, f"{out_dir}/rank{rank}.pt")
    dist.barrier()  # neither rank tears gloo down while the other still uses it (a SIGABRT otherwise)
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_equal_one_process_on_concatenated_batch(tmp_path):
    mp.spawn(_rank_worker, args=(str(tmp_path),), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for shape in SHAPES:
        model = Towers()
        batches = [make_batch(shape, 0, ids=True), make_batch(shape, 1, ids=True)]
        feats = [model(b) for b in batches]
        layout = concatenated(batches, SHAPES[shape][4])
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
