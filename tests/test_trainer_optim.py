"""AdamW groups follow the CLIP conventions; warmup + cosine schedule."""
import pytest

from trainer.optim import build_optimizer, lr_factor
from trainer.recipe import OptimConfig, ScheduleConfig


def test_no_weight_decay_on_gains_biases_logit_scale_and_embeddings(micro_model):
    model = micro_model.model
    opt = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.1))
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay = {names[id(p)] for g in opt.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    decay = {names[id(p)] for g in opt.param_groups if g["weight_decay"] == 0.1 for p in g["params"]}
    assert {"logit_scale", "positional_embedding", "token_embedding.weight", "ln_final.weight",
            "visual.class_embedding", "visual.ln_post.bias"} <= no_decay
    assert "visual.transformer.resblocks.0.attn.in_proj_weight" in decay and "text_projection" in decay
    assert not any("bias" in n or ".ln_" in n for n in decay)
    assert len(no_decay) + len(decay) == sum(1 for _ in model.parameters())


def test_warmup_then_cosine_to_zero():
    cfg = ScheduleConfig(epochs=1, warmup_steps=4, kind="cosine")
    assert [lr_factor(s, 14, cfg) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 14, cfg) == 1.0 and lr_factor(9, 14, cfg) == pytest.approx(0.5)
    assert lr_factor(14, 14, cfg) == pytest.approx(0.0)
    assert lr_factor(10, 14, ScheduleConfig(epochs=1, warmup_steps=4, kind="constant")) == 1.0
