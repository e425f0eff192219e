"""Is a caption English? A cheap word-list test, run on every caption before parsing.

Evidence is counted over lower-cased words: English-only function words (spaCy's English stop
words that are no stop word of German, Italian, Spanish, French, Dutch or Portuguese: "the",
"with", "of" ...) against foreign function words (those languages' stop words that are neither
English stop words nor common English caption words, `english_homographs` in
data/lexicon.json: "man", "door", "car" ...). Short words both sides share ("a", "in", "am")
count for neither, so "Un uomo in sella a un cavallo" is foreign ("un" twice against no
English-only word) while "A man in a suit" stays English. A caption is not English when
it has at least two foreign function words and more of them than English ones, or one and no
English one; or when most of its letters are not ASCII. The lists come from spaCy's
`spacy/lang/<xx>/stop_words.py` files, read as plain modules (`compclip.compat.spacy.stop_words`:
importing the language packages would load their tokenizer exceptions, ~4 s of a 5,000-caption
command), so no language model or language package is loaded.
"""
from __future__ import annotations

import re
from functools import lru_cache

import compclip.datagen.negatives.lexicon as lexicon
from compclip.compat.spacy import stop_words  # noqa: F401  (imported from here too)

OTHER_LANGUAGES = ("de", "it", "es", "fr", "nl", "pt")
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
_LETTERS = re.compile(r"[^\W\d_]")


@lru_cache(maxsize=1)
def word_lists() -> tuple[frozenset[str], frozenset[str]]:
    """(English-only function words, foreign function words)."""
    english = stop_words("en")
    foreign: set[str] = set()
    for lang in OTHER_LANGUAGES:
        foreign |= stop_words(lang)
    english_only = frozenset(w for w in english if w not in foreign and "'" not in w)
    foreign_only = frozenset(foreign - set(english) - lexicon.words("english_homographs"))
    return english_only, foreign_only


def is_english(caption: str) -> bool:
    letters = _LETTERS.findall(caption)
    if letters and sum(c.isascii() for c in letters) < 0.8 * len(letters):
        return False
    english, foreign = word_lists()
    words = _WORD.findall(caption.lower())
    f = sum(w in foreign for w in words)
    if not f:
        return True
    e = sum(w in english for w in words)
    return not ((f >= 2 and f > e) or e == 0)
