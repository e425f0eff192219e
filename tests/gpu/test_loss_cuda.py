"""The contrastive loss on CUDA: a NegCLIP-shaped batch (B anchors, B neighbour partners, two hard
negatives per anchor, some padding columns, repeated image and text ids) through two linear
towers. fp32 on CUDA equals fp32 on CPU to rounding; the towers under bf16 autocast on CUDA (the
trainer's `precision: bf16`; the loss itself upcasts to fp32) match fp32 on CPU within bf16's
resolution, loss and gradients alike."""
import math

import pytest
import torch
import torch.nn.functional as F

from compclip.trainer.batch import Batch
from compclip.trainer.loss import LAYOUT_FIELDS, ContrastiveLoss, Layout

B, NEGS, PAD, IN_IMG, IN_TXT, DIM = 64, 2, 20, 96, 80, 256


def negclip_batch(seed: int) -> Batch:
    g = torch.Generator().manual_seed(seed)
    texts = 2 * B + NEGS * B
    valid = torch.ones(texts, dtype=torch.bool)
    valid[torch.randperm(NEGS * B, generator=g)[:PAD] + 2 * B] = False
    batch = Batch(images=torch.randn(2 * B, IN_IMG, generator=g), texts=torch.randn(texts, IN_TXT, generator=g),
                  num_anchors=B, partner_of=torch.arange(B), negative_of=torch.arange(B).repeat_interleave(NEGS),
                  text_valid=valid, keys=[f"k{i}" for i in range(B)])
    batch.image_ids = torch.randint(0, 3 * B // 2, (2 * B,), generator=g)  # some images share a source
    batch.text_ids = torch.randint(0, 3 * B, (texts,), generator=g)  # and some texts repeat
    return batch.check()


class Towers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.visual = torch.nn.Linear(IN_IMG, DIM)
        self.text = torch.nn.Linear(IN_TXT, DIM)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, images, texts):
        return F.normalize(self.visual(images), dim=-1), F.normalize(self.text(texts), dim=-1), self.logit_scale.exp()


def loss_and_grads(device: str, seed: int, bf16: bool):
    batch = negclip_batch(seed)
    model = Towers().to(device)
    layout = Layout.from_batch(batch)
    layout = Layout(**{k: getattr(layout, k).to(device) for k in LAYOUT_FIELDS})
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        img, txt, scale = model(batch.images.to(device), batch.texts.to(device))
        loss, info = ContrastiveLoss()(img, txt, scale, layout, details=True)
    loss.backward()
    assert loss.dtype == torch.float32
    grads = {n: p.grad.detach().double().cpu() for n, p in model.named_parameters()}
    return loss.detach().double().cpu(), grads, info


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fp32_cuda_equals_cpu(seed):
    ref_loss, ref_grads, ref_info = loss_and_grads("cpu", seed, bf16=False)
    loss, grads, info = loss_and_grads("cuda", seed, bf16=False)
    assert info["masked_pairs"] == ref_info["masked_pairs"] > 0  # the same-source mask acted alike
    assert abs(float(loss - ref_loss)) <= 1e-5 * abs(float(ref_loss))
    for name, g in ref_grads.items():
        assert rel(grads[name], g) <= 1e-4, name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bf16_autocast_cuda_matches_fp32_cpu(seed):
    """bf16 keeps 8 significant bits (relative rounding 2^-9 ~ 0.2 %); features pass one bf16
    matmul of width ~100, so they carry ~0.5 % relative error and the logits (scale ~14) a few
    hundredths. Tolerances: loss within 1 %, each parameter's gradient within 5 % (relative L2
    norm). A loss computed from bf16-rounded logits, or a mask that differs, misses them."""
    ref_loss, ref_grads, ref_info = loss_and_grads("cpu", seed, bf16=False)
    loss, grads, info = loss_and_grads("cuda", seed, bf16=True)
    assert torch.isfinite(loss)
    assert info["masked_pairs"] == ref_info["masked_pairs"]
    assert abs(float(loss - ref_loss)) <= 1e-2 * abs(float(ref_loss))
    for name, g in ref_grads.items():
        assert torch.isfinite(grads[name]).all(), name
        assert rel(grads[name], g) <= 5e-2, name


def test_bf16_autocast_really_runs_in_bf16():
    """The comparison above is not vacuous: the towers' outputs under autocast are bf16 and differ
    from fp32's."""
    model = Towers().cuda()
    x = negclip_batch(0).images.cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        low = model.visual(x)
    high = model.visual(x)
    assert low.dtype == torch.bfloat16 and high.dtype == torch.float32
    assert 0 < rel(low.double().cpu(), high.double().cpu()) < 2e-2
