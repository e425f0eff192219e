"""models/token_cache.py: the cached tokenizer returns exactly the wrapped tokenizer's rows and
tokenizes each text once; the trainer's evaluations go through one per run."""
import torch

from compclip.models import load_model
from compclip.models.token_cache import CachedTokenizer


class Counting:
    def __init__(self, tokenizer):
        self.tokenizer, self.seen = tokenizer, []
        self.context_length = tokenizer.context_length

    def __call__(self, texts):
        self.seen.extend(texts)
        return self.tokenizer(texts)


def test_rows_equal_the_tokenizers_and_each_text_is_tokenized_once():
    tok = load_model("micro-vit-32").tokenizer
    counting = Counting(tok)
    cached = CachedTokenizer(counting)
    first = ["a red cube left of a blue ball", "a dog", "a red cube left of a blue ball"]
    second = ["a dog", "two cats on a long sofa beside a lamp", "a red cube left of a blue ball"]
    assert torch.equal(cached(first), tok(first))
    assert torch.equal(cached(second), tok(second))
    assert torch.equal(cached(second), tok(second))
    assert counting.seen == ["a red cube left of a blue ball", "a dog", "two cats on a long sofa beside a lamp"]
    assert cached.context_length == tok.context_length
    assert cached([]).shape == tok([]).shape


def test_past_max_texts_new_texts_are_tokenized_each_time_and_still_exact():
    tok = load_model("micro-vit-32").tokenizer
    counting = Counting(tok)
    cached = CachedTokenizer(counting, max_texts=2)
    cached(["one", "two"])
    texts = ["two", "three", "one"]
    assert torch.equal(cached(texts), tok(texts)) and torch.equal(cached(texts), tok(texts))
    assert counting.seen == ["one", "two", "three", "three"] and len(cached.rows) == 2


def test_a_tokenizer_that_does_not_return_one_row_per_text_is_passed_through():
    cached = CachedTokenizer(lambda texts: {"ids": texts})
    assert cached(["a", "b"]) == {"ids": ["a", "b"]} and not cached.rows
