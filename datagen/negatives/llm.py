"""LLM backend: SugarCrepe-style prompts per sub-kind through `transformers` text generation.

    gen = LLMNegativeGenerator.from_pretrained("/models/some-instruct-model", kinds=["replace"])
    gen.generate(captions, seed=0)   # one list of Negative per caption, source "llm:<name>"

One few-shot prompt per `(kind, subkind)` (written in the style of SugarCrepe's generation
prompts: locate the object / attribute / relation, change it, keep the sentence fluent and
plausible). Prompts are batched with left padding; decoding is greedy by default, so output is
deterministic; with `do_sample=True` the torch seed is `seed` + the batch's first caption index.
The first line of each completion is the negative; empty answers, answers equal to the caption
(after `normalise`) and answers the caption filter would skip are dropped. Needs local weights:
nothing is downloaded (tests use a tiny random GPT-2 built from a config).
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from compclip.datagen.negatives.base import is_new_negative
from compclip.datagen.negatives.text import skip_reason
from compclip.shardset.schema import SUBKINDS, Negative

_TASK = {
    ("replace", "obj"): ("locate the objects in the sentence, then replace one object with a "
                         "different object, so that the sentence describes a different scene",
                         "A man is riding a horse on the beach.", "A man is riding a bicycle on the beach."),
    ("replace", "att"): ("locate the attributes (colour, size, material, state) in the sentence, "
                         "then replace one with a different attribute",
                         "A red car parked next to a tree.", "A blue car parked next to a tree."),
    ("replace", "rel"): ("locate the relation (a verb or a preposition) between two things in the "
                         "sentence, then replace it with a different relation",
                         "A cat sitting on a laptop.", "A cat sleeping next to a laptop."),
    ("swap", "obj"): ("swap the positions of two objects in the sentence, changing nothing else "
                      "but grammar", "A dog chasing a cat.", "A cat chasing a dog."),
    ("swap", "att"): ("swap the attributes of two objects in the sentence",
                      "A white cup on a black table.", "A black cup on a white table."),
    ("add", "obj"): ("add one plausible new object to the scene the sentence describes",
                     "A woman holding an umbrella.", "A woman holding an umbrella and a bag."),
    ("add", "att"): ("add one plausible new attribute to one object of the sentence",
                     "A dog lying on a couch.", "A dog lying on a leather couch."),
}
PROMPT = ("Given an input sentence describing a scene, your task is to {task}. The new sentence "
          "must be fluent, grammatical and plausible, and must describe a different scene.\n"
          "Input: {example_in}\nOutput: {example_out}\nInput: {caption}\nOutput:")


def prompt_for(kind: str, subkind: str, caption: str) -> str:
    task, example_in, example_out = _TASK[(kind, subkind)]
    return PROMPT.format(task=task, example_in=example_in, example_out=example_out,
                         caption=caption.strip())


class LLMNegativeGenerator:
    """A `NegativeGenerator` over any causal LM and tokenizer from `transformers`."""

    def __init__(self, model, tokenizer, kinds: Optional[Iterable[str]] = None,
                 batch_size: int = 8, max_new_tokens: int = 40, do_sample: bool = False,
                 name: Optional[str] = None, max_words: int = 100):
        self.model, self.tokenizer = model, tokenizer
        self.kinds = _select(kinds)
        self.batch_size, self.max_new_tokens, self.do_sample = batch_size, max_new_tokens, do_sample
        self.max_words = max_words
        self.source = f"llm:{name or getattr(model.config, 'name_or_path', '') or model.config.model_type}"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"

    @classmethod
    def from_pretrained(cls, path: str, device: str = "cpu", **kwargs) -> "LLMNegativeGenerator":
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).to(device).eval()
        return cls(model, tokenizer, name=kwargs.pop("name", str(path).rstrip("/").split("/")[-1]), **kwargs)

    def generate(self, captions: Sequence[str], seed: int = 0,
                 start_index: int = 0) -> list[list[Negative]]:
        import torch
        out: list[list[Negative]] = [[] for _ in captions]
        keep = [i for i, c in enumerate(captions) if skip_reason(c, self.max_words) is None]
        for kind, subkind in self.kinds:
            for b in range(0, len(keep), self.batch_size):
                idx = keep[b:b + self.batch_size]
                prompts = [prompt_for(kind, subkind, captions[i]) for i in idx]
                enc = self.tokenizer(prompts, return_tensors="pt", padding=True)
                enc = {k: v.to(self.model.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                if self.do_sample:
                    torch.manual_seed(seed + start_index + idx[0])
                with torch.no_grad():
                    gen = self.model.generate(**enc, max_new_tokens=self.max_new_tokens,
                                              do_sample=self.do_sample,
                                              pad_token_id=self.tokenizer.pad_token_id)
                texts = self.tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:],
                                                    skip_special_tokens=True)
                for i, text in zip(idx, texts):
                    answer = text.strip().split("\n")[0].strip()
                    if answer and skip_reason(answer, self.max_words) is None and \
                            is_new_negative(captions[i], answer):
                        out[i].append(Negative(answer, kind, subkind, self.source))
        return out


def _select(kinds: Optional[Iterable[str]]) -> list[tuple[str, str]]:
    if kinds is None:
        return list(_TASK)
    chosen = []
    for name in kinds:
        kind, _, sub = str(name).partition(":")
        subs = [sub] if sub else list(SUBKINDS.get(kind, ()))
        for s in subs:
            if (kind, s) in _TASK:
                chosen.append((kind, s))
            elif sub:
                raise ValueError(f"no LLM prompt for '{kind}:{s}' (have: "
                                 f"{', '.join(f'{k}:{x}' for k, x in _TASK)})")
    if not chosen:
        raise ValueError(f"no LLM prompt for any of {list(kinds)}")
    return [k for k in _TASK if k in chosen]
