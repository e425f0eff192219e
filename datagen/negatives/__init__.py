"""Hard-negative caption generators (swap / replace / add), one kind per function.

Modules: `base` (registry and protocol), `text` (token view, noun chunks, rendering, caption
filter), `language` (English or not), `lexicon` (the word lists of `data/lexicon.json`), `vocab`
(corpus vocabularies, synonym / hypernym guard), `swap` / `replace` / `add` (the rules),
`plausibility` (n-gram and Hugging Face scorers, the filter), `rules` (`RuleNegativeGenerator`),
`llm` (`LLMNegativeGenerator`), `pipeline` (corpus runs to shards), `__main__` (CLI). Importing `datagen.negatives.rules` registers every rule function.
"""
from compclip.datagen.negatives.base import NEGATIVE_FNS, NegativeFn, NegativeGenerator, register_negative

__all__ = ["NEGATIVE_FNS", "NegativeFn", "NegativeGenerator", "register_negative",
           "RuleNegativeGenerator", "LLMNegativeGenerator"]


def __getattr__(name: str):  # lazy: spaCy / transformers load only when a generator is asked for
    if name == "RuleNegativeGenerator":
        from compclip.datagen.negatives.rules import RuleNegativeGenerator
        return RuleNegativeGenerator
    if name == "LLMNegativeGenerator":
        from compclip.datagen.negatives.llm import LLMNegativeGenerator
        return LLMNegativeGenerator
    raise AttributeError(name)
