"""Scorer interface: normalised fp32 embeddings, one row per input, caller's mode preserved."""
import torch
from PIL import Image

from compclip.datagen.negatives.base import is_new_negative, normalise, register_negative
from compclip.eval.scorer import OpenClipScorer, Scorer, TextScorer
import pytest


def test_open_clip_scorer_embeds_texts_and_images(micro_model):
    scorer = OpenClipScorer.from_loaded(micro_model, batch_size=2)
    assert isinstance(scorer, Scorer) and scorer.supports_images
    micro_model.model.train()
    texts = scorer.encode_texts(["a", "b c", "d e f"])
    images = scorer.encode_images([Image.new("RGB", (40, 30), c) for c in ("red", "blue")])
    assert micro_model.model.training  # left as the caller had it
    assert texts.shape == (3, 32) and images.shape == (2, 32) and texts.dtype == torch.float32
    assert torch.allclose(texts.norm(dim=-1), torch.ones(3), atol=1e-5)
    again = scorer.encode_texts(["d e f"])  # batching does not change an embedding
    assert torch.allclose(again[0], texts[2], atol=1e-6)


def test_text_only_scorer_contract():
    class Bag(TextScorer):
        def encode_texts(self, texts):
            return torch.nn.functional.normalize(torch.tensor([[len(t), 1.0] for t in texts]), dim=-1)
    bag = Bag()
    assert not bag.supports_images and bag.encode_texts(["ab"]).shape == (1, 2)


def test_negative_registry_rejects_unknown_kinds_and_normalise_ignores_punctuation():
    with pytest.raises(ValueError, match="not a negative kind"):
        register_negative("add", "rel")
    assert normalise("A  dog, on the mat.") == "a dog on the mat"
    assert not is_new_negative("A dog on the mat.", "a dog on the  mat")
    assert is_new_negative("a dog on the mat", "a mat on the dog")
