"""Text length per batch: trimming the padded context to the batch's longest caption gives the
same text embeddings as the full context (fp32) on the text towers the recipes use, keeps a real
token 0 inside a caption, and is refused where it would not be exact."""
import open_clip
import pytest
import torch
from torch import nn

from compclip.models import load_model
from compclip.models.text_length import enable_text_trimming, text_length, why_not_trimmable

CAPTIONS = ["a dog", "two men riding horses on a beach at sunset while a kite flies above them!",
            "a red square left of a blue square", "wow! a cat ! sitting on a mat"]


def full_and_trimmed(model, tokens):
    full = open_clip.model.CLIP.encode_text(model, tokens)  # the library's own, full context
    return full, model.encode_text(tokens)


@pytest.mark.parametrize("arch", ["micro-vit-32", "ViT-B-32"])
def test_trimmed_embeddings_equal_the_full_context(arch):
    torch.manual_seed(0)
    loaded = load_model(arch)
    assert loaded.text_length == "per batch"
    model = loaded.model.eval()
    tokens = loaded.tokenizer(CAPTIONS)
    with torch.no_grad():
        full, trimmed = full_and_trimmed(model, tokens)
    assert text_length(tokens) < tokens.shape[1]
    assert (full - trimmed).abs().max() < 1e-5


def test_a_token_zero_inside_a_caption_is_kept():
    tokens = torch.tensor([[49406, 320, 0, 1929, 49407, 0, 0, 0], [49406, 0, 49407, 0, 0, 0, 0, 0]])
    assert text_length(tokens) == 5


def test_gradients_through_the_trimmed_tower_equal_the_full_ones():
    torch.manual_seed(0)
    loaded = load_model("micro-vit-32")
    model, tokens = loaded.model, loaded.tokenizer(CAPTIONS)
    grads = []
    for encode in (lambda t: open_clip.model.CLIP.encode_text(model, t), model.encode_text):
        model.zero_grad()
        encode(tokens).pow(2).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, atol=1e-5, rtol=1e-4, msg=name)


def test_towers_where_trimming_is_not_exact_keep_the_full_context():
    torch.manual_seed(0)
    model = load_model("micro-vit-32", trim_text=False).model
    model.text_pool_type = "last"
    assert "last" in why_not_trimmable(model)
    assert enable_text_trimming(model) is not None and "encode_text" not in vars(model)
    assert "keeps its own text tower" in why_not_trimmable(nn.Linear(2, 2))
