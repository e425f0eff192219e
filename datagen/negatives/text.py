"""A caption as the rules see it: a compact token view of a spaCy Doc, and how to write it back.

`view(doc)` reads every token once into plain Python lists (cached on the Doc), and finds noun
chunks and verb phrases from the tagger's fine tags alone, so the pipeline needs no dependency
parser (it would cost ~30% of the parse time and put the rules under 1,000 captions per CPU
second). A noun chunk is, over one letter per tag (see `_CHUNK_CODE`):

    D{0,2} (PRE* [NP] S)? PRE* [NP]

up to two determiners ("all the people"), an optional possessor ending in 's ("a person's
hand"), pre-modifiers PRE and a noun. PRE is a number, adjective, noun (compounds: "teddy
bear"), hyphen ("man-made"), an adverb before an adjective after a determiner or conjunction
("a very large elephant"), a participle after a determiner / adjective / number / adverb ("a
parked car", "two smiling women"), or a coordinator or comma between two adjectives ("a black
and white cat", "a large, fluffy dog"). Verb phrases are NegCLIP's `VERB? ADV* AUX* VERB+` over
coarse tags, leaving out participles that modify a noun inside a chunk.

`render(seq, cap)` turns a list of `(word, trailing_space)` pieces back into a caption: the
sentence-initial capital goes to whatever word is first now, `a`/`an` agree with the next word
(numbers included: "an 8"), and an all-capitals caption stays in capitals.
`skip_reason(caption)` is the cheap pre-parse filter (empty, too long, not English; see
`datagen.negatives.language`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from compclip.compat.spacy import stop_words
from compclip.datagen.negatives.base import normalise
from compclip.datagen.negatives.language import is_english

STOP_WORDS = frozenset(stop_words("en"))  # read as a plain module: importing spaCy costs ~0.7 s

_CHUNK_CODE = {"DT": "D", "PDT": "D", "PRP$": "D", "WP$": "D", "CD": "C", "JJ": "J", "JJR": "J",
               "JJS": "J", "HYPH": "H", "NN": "N", "NNS": "N", "NNP": "P", "NNPS": "P",
               "RB": "R", "RBR": "R", "RBS": "R", "VBN": "V", "VBG": "V", "CC": "A", ",": ",",
               "POS": "S"}
_VERB_CODE = {"VERB": "V", "ADV": "R", "AUX": "X"}
_PRE = r"(?:[CJHNP]|(?<=[DA,])R+(?=J)|(?<=[DJRC])V|(?<=J)[A,](?=R*J))"
_CHUNK_RE = re.compile(rf"D{{0,2}}(?:{_PRE}*[NP]S)?{_PRE}*[NP]")
_VP_RE = re.compile(r"V?R*X*V+")
_VOWEL_SOUND_EXCEPTIONS = ("hour", "honest", "honor", "honour", "heir")
_CONSONANT_SOUND_EXCEPTIONS = ("uni", "use", "usu", "one", "once", "eu", "ura", "ure", "uto")


@lru_cache(maxsize=1 << 16)
def crude_lemma(word: str) -> str:
    w = word.lower()
    for suffix, repl in (("ies", "y"), ("ches", "ch"), ("shes", "sh"), ("sses", "ss"), ("xes", "x")):
        if w.endswith(suffix) and len(w) > len(suffix) + 2:
            return w[: -len(suffix)] + repl
    if w.endswith("s") and not w.endswith("ss") and len(w) > 3:
        return w[:-1]
    return w


@dataclass
class Chunk:
    """A noun chunk `[start, end)`; its noun run (compounds + head) is `[noun_start, end)`."""
    start: int
    end: int
    noun_start: int
    adjectives: list[int]

    @property
    def head(self) -> int:
        return self.end - 1


@dataclass
class View:
    words: list[str]  # sentence-initial capital removed (unless a proper noun or "I")
    lower: list[str]
    tags: list[str]
    pos: list[str]
    ws: list[str]
    cap: bool | str  # the caption started with a capital letter ("upper": all in capitals)
    chunks: list[Chunk] = field(default_factory=list)
    verb_phrases: list[tuple[int, int]] = field(default_factory=list)
    hyphenated: set[int] = field(default_factory=set)  # tokens glued to a hyphen
    modifiers: set[int] = field(default_factory=set)  # adverbs / participles / "and" inside chunks
    chunk_at: list[int] = field(default_factory=list)  # token -> index of its chunk, -1 if none
    _norm: Optional[str] = None
    _lemmas: Optional[set[str]] = None

    def __len__(self) -> int:
        return len(self.words)

    def pieces(self) -> list[tuple[str, str]]:
        return list(zip(self.words, self.ws))

    @property
    def text(self) -> str:
        return render(self.pieces(), self.cap)

    @property
    def lemmas(self) -> set[str]:
        """Crude lemmas of the caption's words: replacements and additions avoid them."""
        if self._lemmas is None:
            self._lemmas = {crude_lemma(w) for w in self.lower}
        return self._lemmas

    @property
    def norm(self) -> str:
        """The caption after `normalise`: a negative must differ from it."""
        if self._norm is None:
            self._norm = normalise(self.text)
        return self._norm


# Coarse tags from fine tags, read from the pipeline's attribute_ruler (`compclip.compat.spacy.
# PosTable`, set by `load_nlp`): running the ruler itself makes the parse take ~1.7x the CPU time
# of the tagger-only one, and only its POS mapping is needed.
_POS_TABLE = None


def set_pos_table(table) -> None:
    """Read coarse POS from `table` (a `compclip.compat.spacy.PosTable`, or a spaCy
    AttributeRuler to read one from) for Docs without POS annotation."""
    global _POS_TABLE
    from compclip.compat.spacy import PosTable
    _POS_TABLE = table if isinstance(table, PosTable) else PosTable.from_ruler(table)


def view(doc) -> View:
    """The compact view of a parsed caption, computed once per Doc."""
    cached = doc.user_data.get("compclip.view")
    if cached is not None:
        return cached
    words, tags, pos, ws = [], [], [], []
    if doc.has_annotation("POS"):
        for tok in doc:
            words.append(tok.text)
            tags.append(tok.tag_)
            pos.append(tok.pos_)
            ws.append(tok.whitespace_)
    else:
        if _POS_TABLE is None:
            raise RuntimeError("the Doc has no POS tags and no POS table is set: parse with "
                               "datagen.negatives.rules.load_nlp() or keep the attribute_ruler")
        by_tag, by_word = _POS_TABLE.by_tag, _POS_TABLE.by_word
        for tok in doc:
            text, tag = tok.text, tok.tag_
            words.append(text)
            tags.append(tag)
            pos.append(by_word.get((tag, text.lower())) or by_tag.get(tag, "X"))
            ws.append(tok.whitespace_)
    cap: bool | str = bool(words) and words[0][:1].isupper()
    letters = "".join(w for w in words if w.isalpha())
    if len(letters) > 3 and letters.isupper():
        cap = "upper"
    if cap and tags[0] not in ("NNP", "NNPS") and words[0] != "I":
        first = words[0]
        words[0] = first.lower() if first.isupper() else first[:1].lower() + first[1:]
    v = View(words, [w.lower() for w in words], tags, pos, ws, cap)
    codes = "".join(_CHUNK_CODE.get(t, "x") for t in tags)
    for m in _CHUNK_RE.finditer(codes):
        s, e = m.span()
        ns = e - 1
        while ns > s and codes[ns - 1] in "NP":
            ns -= 1
        v.chunks.append(Chunk(s, e, ns, [i for i in range(s, ns) if codes[i] == "J"]))
        v.modifiers.update(i for i in range(s, ns) if codes[i] in "RVA,")
    v.chunk_at = [-1] * len(words)
    for k, c in enumerate(v.chunks):
        v.chunk_at[c.start:c.end] = [k] * (c.end - c.start)
    vcodes = "".join("x" if i in v.modifiers else _VERB_CODE.get(p, "x") for i, p in enumerate(pos))
    v.verb_phrases = [m.span() for m in _VP_RE.finditer(vcodes)]
    v.hyphenated = {j for i, (w, t) in enumerate(zip(words, tags)) if (t == "HYPH" or w == "-")
                    and not ws[i] and i > 0 and not ws[i - 1] for j in (i - 1, i, i + 1)}
    doc.user_data["compclip.view"] = v
    return v


class Parsed:
    """A parsed caption without its spaCy Doc: the caption's text and the cached `View`, all the
    compclip rules read from a Doc (`negatives_for` reads `.text`, `view` the view). A kept
    parse (the vocabulary sample of `datagen.negatives.pipeline`) costs a few KB this way,
    where the Doc (token structs, tok2vec tensor) costs several times that."""
    __slots__ = ("text", "user_data")

    def __init__(self, doc):
        self.text = doc.text
        self.user_data = {"compclip.view": view(doc)}


_AN_NUMBERS = re.compile(r"^(8|1[18](\D|$|\d\d(\D|$)))")


def article_for(word: str) -> str:
    """`a` or `an` before `word` (by sound: "an hour", "a unicorn", "an 8")."""
    found = _ARTICLE_OF.get(word)
    if found is None:
        if len(_ARTICLE_OF) >= 1 << 16:
            _ARTICLE_OF.clear()
        found = _ARTICLE_OF[word] = _article_for(word)
    return found


_ARTICLE_OF: dict[str, str] = {}  # word -> its article, remembered (`render` asks ~40 times a caption)


def _article_for(word: str) -> str:
    w = word.lower()
    if w[:1].isdigit():
        return "an" if _AN_NUMBERS.match(w) else "a"
    if w.startswith(_VOWEL_SOUND_EXCEPTIONS):
        return "an"
    if w.startswith(_CONSONANT_SOUND_EXCEPTIONS):
        return "a"
    return "an" if w[:1] in "aeiou" else "a"


_ARTICLES = frozenset(("a", "an", "A", "An", "AN", "aN"))  # w.lower() in ("a", "an")


def render(seq: list[tuple[str, str]], cap: bool) -> str:
    """Join `(word, trailing_space)` pieces; fix `a`/`an` and the leading capital."""
    words = [w for w, _ in seq]
    if not _ARTICLES.isdisjoint(words):
        last = len(words) - 1
        for i, w in enumerate(words):
            if w in _ARTICLES and i < last and words[i + 1][:1].isalnum():
                want = article_for(words[i + 1])
                words[i] = want if w == "a" or w == "an" else (  # match_case(want, w) for these
                    want.upper() if w.isupper() and len(w) > 1 else match_case(want, w))
    text = "".join([w + s for w, (_, s) in zip(words, seq)]).strip()
    if cap == "upper":
        text = text.upper()
    elif cap and text:
        text = text[:1].upper() + text[1:]
    return text


def swap_spans(v: View, a: tuple[int, int], b: tuple[int, int]) -> list[tuple[str, str]]:
    """Pieces with span `a` and span `b` exchanged (a before b, not overlapping)."""
    (a0, a1), (b0, b1) = sorted([a, b])
    p = v.pieces()
    span_a, span_b = p[a0:a1], p[b0:b1]
    new_a = span_b[:-1] + [(span_b[-1][0], span_a[-1][1])]
    new_b = span_a[:-1] + [(span_a[-1][0], span_b[-1][1])]
    return p[:a0] + new_a + p[a1:b0] + new_b + p[b1:]


def replace_at(v: View, i: int, word: str) -> list[tuple[str, str]]:
    p = v.pieces()
    p[i] = (word, p[i][1])
    return p


def insert_at(v: View, i: int, words: list[str]) -> list[tuple[str, str]]:
    """Pieces with `words` inserted before token `i` (or appended after the previous token)."""
    p = v.pieces()
    if i > 0 and not p[i - 1][1]:  # keep "word," tight: insert after the previous token's space
        p[i - 1] = (p[i - 1][0], " ")
        new = [(w, " ") for w in words[:-1]] + [(words[-1], "")]
    else:
        new = [(w, " ") for w in words]
    return p[:i] + new + p[i:]


def match_case(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


_LETTERS = re.compile(r"[^\W\d_]")


def skip_reason(caption: str, max_words: int = 100) -> Optional[str]:
    """Why a caption is not worth parsing (`empty`, `too_long`, `non_english`), or None."""
    if not isinstance(caption, str) or not caption.strip():
        return "empty"
    tokens = caption.split()
    if len(tokens) > max_words:
        return "too_long"
    if not _LETTERS.search(caption):
        return "empty"
    if not is_english(caption):
        return "non_english"
    if len(tokens) >= 4 and not any(t.lower().strip(".,!?;:") in STOP_WORDS for t in tokens):
        return "non_english"
    return None
