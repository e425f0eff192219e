"""The rule negatives' word lists, read from `datagen/negatives/data/lexicon.json` (shipped as
package data): synonym groups, hypernyms, positional / partitive nouns, attribute groups and
stop lists. Code asks through the functions here; the lists themselves live only in the file.

WordNet is not usable offline here (nltk's corpus is a separate download and no installed
package ships it), so synonyms and hypernyms are a hand-written list of caption vocabulary.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def lexicon() -> dict:
    text = resources.files("compclip.datagen.negatives").joinpath("data/lexicon.json").read_text("utf-8")
    return json.loads(text)


def words(name: str) -> set[str]:
    """A space-separated list of the file as a set (`position_nouns`, `adj_stop`, ...)."""
    return set(lexicon()[name].split())


def synonym_groups() -> list[str]:
    return list(lexicon()["synonyms"])


def attribute_groups() -> dict[str, str]:
    return dict(lexicon()["attribute_groups"])


def hypernyms() -> dict[str, set[str]]:
    """`{general word: {words it covers}}`, closed over one level of nesting (animal covers
    the birds because bird is one of the animals)."""
    raw = {k: set(v.split()) for k, v in lexicon()["hypernyms"].items()}
    closed = {}
    for general, covered in raw.items():
        more = set(covered)
        for word in covered:
            more |= raw.get(word, set())
        closed[general] = more
    return closed


@lru_cache(maxsize=1)
def categories() -> dict[str, str]:
    """`{word: kind of thing}` from `swap_categories` over the closed hypernym lists (the
    general words themselves included): "woman" -> animate, "bowl" -> object."""
    hyper = hypernyms()
    out: dict[str, str] = {}
    for category, generals in lexicon()["swap_categories"].items():
        for general in generals.split():
            for word in {general} | hyper.get(general, set()):
                out.setdefault(word, category)
    return out
