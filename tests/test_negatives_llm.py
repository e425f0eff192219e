"""The LLM backend's code path, on a tiny random GPT-2 and a word-level tokenizer built here."""
import pytest

from compclip.datagen.negatives.base import NegativeGenerator, normalise
from compclip.datagen.negatives.llm import LLMNegativeGenerator, prompt_for

CAPTIONS = ["A man is riding a horse on the beach.", "", "Two cats sleeping on a red couch."]


@pytest.fixture(scope="module")
def tiny_lm():
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = set()
    for kind, sub in [("replace", "obj"), ("add", "att"), ("swap", "obj")]:
        for c in CAPTIONS:
            words.update(prompt_for(kind, sub, c or "x").split())
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[EOS]"] + sorted(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                        eos_token="[EOS]")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(vocab), n_positions=256, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=2, eos_token_id=2, pad_token_id=0)
    return GPT2LMHeadModel(config).eval(), tokenizer


def test_llm_backend_runs_batched_and_labels(tiny_lm):
    model, tokenizer = tiny_lm
    gen = LLMNegativeGenerator(model, tokenizer, kinds=["replace:obj", "add:att", "swap:obj"],
                               batch_size=2, max_new_tokens=10, do_sample=True, name="tiny-gpt2")
    assert isinstance(gen, NegativeGenerator)
    out = gen.generate(CAPTIONS, seed=0)
    assert len(out) == 3 and out[1] == []  # the empty caption is skipped
    produced = [n for negs in out for n in negs]
    assert produced, "a random model still emits words; none survived the filters"
    for caption, negs in zip(CAPTIONS, out):
        for n in negs:
            assert (n.kind, n.subkind) in {("replace", "obj"), ("add", "att"), ("swap", "obj")}
            assert n.source == "llm:tiny-gpt2" and "\n" not in n.text
            assert normalise(n.text) != normalise(caption)
    assert gen.generate(CAPTIONS, seed=0) == out  # seeded sampling: deterministic
    greedy = LLMNegativeGenerator(model, tokenizer, kinds=["add:att"], max_new_tokens=4)
    assert len(greedy.generate(CAPTIONS)) == 3  # greedy garbage ("Output: Output: ...") is filtered


def test_llm_unknown_subkind_is_an_error(tiny_lm):
    with pytest.raises(ValueError, match="swap:noun"):
        LLMNegativeGenerator(*tiny_lm, kinds=["swap:noun"])
