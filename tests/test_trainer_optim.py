"""AdamW groups follow the CLIP conventions; warmup + cosine schedule."""
import pytest

from compclip.trainer.optim import build_optimizer, lr_factor
from compclip.trainer.recipe import OptimConfig, ScheduleConfig


def _groups(model, **cfg):
    opt = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.1, **cfg))
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay = {names[id(p)] for g in opt.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    decay = {names[id(p)] for g in opt.param_groups if g["weight_decay"] == 0.1 for p in g["params"]}
    assert len(no_decay) + len(decay) == sum(1 for _ in model.parameters())
    return no_decay, decay


def test_weight_decay_groups_follow_open_clip(micro_model):
    """open_clip's rule (NegCLIP and BiVLC train with it): 1-dim tensors, norms, biases and the
    logit scale are exempt; the token and positional embeddings are decayed."""
    model = micro_model.model
    no_decay, decay = _groups(model)
    exclude = lambda n, p: p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n  # noqa: E731
    assert no_decay == {n for n, p in model.named_parameters() if exclude(n, p)}
    assert {"logit_scale", "ln_final.weight", "visual.class_embedding", "visual.ln_post.bias"} <= no_decay
    assert {"positional_embedding", "token_embedding.weight", "text_projection",
            "visual.transformer.resblocks.0.attn.in_proj_weight"} <= decay


def test_embeddings_can_be_exempt_as_an_option(micro_model):
    no_decay, decay = _groups(micro_model.model, exclude_embeddings_from_decay=True)
    assert {"positional_embedding", "token_embedding.weight"} <= no_decay
    assert not any("embedding" in n for n in decay)


def test_warmup_then_cosine_to_zero():
    cfg = ScheduleConfig(epochs=1, warmup_steps=4, kind="cosine")
    assert [lr_factor(s, 14, cfg) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 14, cfg) == 1.0 and lr_factor(9, 14, cfg) == pytest.approx(0.5)
    assert lr_factor(14, 14, cfg) == pytest.approx(0.0)
    assert lr_factor(10, 14, ScheduleConfig(epochs=1, warmup_steps=4, kind="constant")) == 1.0


@pytest.mark.parametrize("implementation, fused, foreach", [("auto", True, None), ("foreach", False, True),
                                                            ("single", False, False)])
def test_optimizer_implementation_picks_the_kernel(micro_model, implementation, fused, foreach):
    """`optim.implementation`: auto = fused on CPU (today's behaviour), foreach = multi-tensor,
    single = torch's per-tensor loop (its CPU default, what open_clip_train runs)."""
    opt = build_optimizer(micro_model.model, OptimConfig(lr=1e-3, implementation=implementation))
    assert bool(opt.defaults["fused"]) is fused
    assert opt.defaults["foreach"] is foreach


def test_optimizer_implementations_take_the_same_step(micro_model):
    import copy

    import torch
    torch.manual_seed(0)
    models = {impl: copy.deepcopy(micro_model.model) for impl in ("auto", "foreach", "single")}
    grads = [torch.randn_like(p) for p in micro_model.model.parameters()]
    for impl, model in models.items():
        opt = build_optimizer(model, OptimConfig(lr=1e-2, implementation=impl))
        for _ in range(3):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            opt.step()
    ref = list(models["single"].parameters())
    for impl in ("auto", "foreach"):
        for p, q in zip(models[impl].parameters(), ref):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert not torch.equal(ref[0], next(micro_model.model.parameters()))  # the step did move them


def test_unknown_optimizer_implementation_is_refused():
    with pytest.raises(ValueError):
        OptimConfig(lr=1e-3, implementation="fast")


def test_without_text_lr_every_parameter_has_one_lr_in_two_groups(micro_model):
    opt = build_optimizer(micro_model.model, OptimConfig(lr=1e-3, weight_decay=0.1))
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 0.1]
    assert {g["lr"] for g in opt.param_groups} == {1e-3}


def test_text_lr_gives_the_text_tower_its_own_lr_and_keeps_the_decay_rule(micro_model):
    """`optim.text_lr`: every parameter outside `visual.*` but the logit scale takes it; each
    parameter keeps the weight decay open_clip's rule gives it; the schedule scales both lrs."""
    from compclip.trainer.optim import build_scheduler, in_text_tower
    model = micro_model.model
    opt = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.1, text_lr=1e-5))
    names = {id(p): n for n, p in model.named_parameters()}
    lr_of = {names[id(p)]: g["lr"] for g in opt.param_groups for p in g["params"]}
    assert len(lr_of) == sum(1 for _ in model.parameters())
    text = {n for n in lr_of if lr_of[n] == 1e-5}
    assert {"token_embedding.weight", "positional_embedding", "text_projection", "ln_final.weight"} <= text
    assert not any(n.startswith("visual.") or n == "logit_scale" for n in text)
    assert text == {n for n in lr_of if in_text_tower(n)}
    assert _groups(model, text_lr=1e-5) == _groups(model)  # the same decay split as without it
    sched = build_scheduler(opt, 10, ScheduleConfig(epochs=1, warmup_steps=2))
    assert sorted({g["lr"] for g in opt.param_groups}) == [0.5e-5, 0.5e-3]  # warmup step 0: factor 1/2
    opt.step(), sched.step()
    assert sorted({g["lr"] for g in opt.param_groups}) == [1e-5, 1e-3]


def test_text_lr_must_be_positive():
    with pytest.raises(ValueError, match="text_lr"):
        OptimConfig(lr=1e-3, text_lr=0.0)
