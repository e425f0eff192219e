"""Replacement vocabularies mined from the corpus itself, by part of speech and role.

Buckets (each a frequency-sorted word list, `*` = all roles):
- `noun/<tag>/<role>`: nouns (NN, NNS) by the word that governs their chunk: the preposition or
  verb right before it, or for a subject the verb after it (`subj:drinking`, then `_subj`).
  "on a [bench]" draws from nouns seen after "on", "[cat] drinking" from subjects of "drinking".
- `adj/<head>`: adjectives by the head noun they modify ("open [refrigerator]").
- `verb/<tag>/<role>`: verbs by tag (VBG, VBZ, ...) and their direct object (`obj:horse`) or the
  preposition after them (`prep:on`).
- `prep/*`: prepositions (IN) that express a relation (not `of`, `that`, `while`, ...).
- `with/<noun lemma>`: singular nouns seen in one caption with that noun (top `with_k`): the
  company an added or replacing object is drawn from ("a zebra and a giraffe", not "a zebra
  and a cake").

Words come from the corpus first; a small built-in list is the fallback when a tiny corpus
has no usable word. Synonyms are never offered for each other: same word, same crude lemma
(plural `s`/`es`), one synonym group, or a hypernym / hyponym (car / vehicle), all from
`data/lexicon.json` (WordNet is not available offline: nltk's data is a separate download).
Positional and partitive nouns (front, top, piece, bunch ...) are never mined. Attributes in a known group (colour, size, material, ...) are replaced
within their group, so "a red car" becomes "a blue car", not "a hungry car".
`mine` also trains the corpus n-gram model of the plausibility filter (`lm`) and the scene model
(`scene`: which nouns and verbs come together in one caption, `scene_items`). The whole
vocabulary is JSON (`to_json` / `from_json`), so resumed and parallel runs share it.
"""
from __future__ import annotations

import json
import random
from bisect import bisect_right
from functools import lru_cache
from itertools import accumulate
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Iterable, Optional

import compclip.datagen.negatives.lexicon as lexicon
from compclip.datagen.negatives.plausibility import NgramLM
from compclip.datagen.negatives.scene import SceneModel
from compclip.datagen.negatives.text import Chunk, View, crude_lemma

# The word lists live in data/lexicon.json (see `datagen.negatives.lexicon`).
SYNONYM_GROUPS = lexicon.synonym_groups()
ATTRIBUTE_GROUPS = lexicon.attribute_groups()
# Adjectives that quantify or relate rather than describe: never replaced, swapped or added.
ADJ_STOP = lexicon.words("adj_stop")
# Adjectives an image cannot refute ("a beautiful woman", "a delicious pizza"): never mined, so
# never added nor drawn as a replacement.
OPINION_ADJECTIVES = lexicon.words("opinion_adjectives")
# IN-tagged words that are not relations between two things.
PREP_STOP = lexicon.words("prep_stop")
# Positional, partitive, quantity and framing nouns ("in front of", "a piece of", "a close up"):
# never swapped or replaced as objects, never drawn as a replacement.
POSITION_NOUNS = lexicon.words("position_nouns")
# Nouns that take no a/an ("some food", not "a food"; "crossing water", not "crossing a water").
MASS_NOUNS = frozenset(lexicon.words("mass_nouns"))
_HYPERNYMS = lexicon.hypernyms()

_GROUP_OF: dict[str, int] = {}
for _i, _g in enumerate(SYNONYM_GROUPS):
    for _w in _g.split():
        _GROUP_OF.setdefault(_w, _i)
ATTRIBUTE_OF = {w: name for name, words in ATTRIBUTE_GROUPS.items() for w in words.split()}


@lru_cache(maxsize=1 << 16)  # asked for the same pairs again and again by `Vocabulary.sample`; ~150 B an entry
def is_synonym(a: str, b: str) -> bool:
    """True when `b` must not replace `a`: same word, same crude lemma, one synonym group, or
    one a hypernym of the other (car / vehicle: "a vehicle" is still true of a car)."""
    a, b = a.lower(), b.lower()
    if a == b or crude_lemma(a) == crude_lemma(b):
        return True
    ga, gb = _GROUP_OF.get(a), _GROUP_OF.get(b)
    if ga is not None and ga == gb:
        return True
    return is_hypernym(a, b) or is_hypernym(b, a)


_MEMBERS: dict[int, list[str]] = {}
for _w, _i in _GROUP_OF.items():
    _MEMBERS.setdefault(_i, []).append(_w)


def synonyms_among(noun: str, words: frozenset[str], by_lemma: dict[str, list[str]],
                   generals: Optional[dict[str, set[str]]] = None) -> frozenset[str]:
    """The words `w` of `words` with `is_synonym(noun, w)`, without testing every word: only the
    few that can be (same crude lemma, one synonym group, a hypernym list naming one or the
    other) are tested. `by_lemma`: `words` by their `crude_lemma`; `generals`:
    `general_terms(words, by_lemma)`, computed here when not given."""
    n = noun.lower()
    names = {crude_lemma(n), *_MEMBERS.get(_GROUP_OF.get(n, -1), ())}
    names.update(_HYPERNYMS.get(n) or _HYPERNYMS.get(crude_lemma(n)) or ())
    candidates = {name for name in names if name in words}
    candidates.update(w for name in names for w in by_lemma.get(name, ()))
    if generals is None:
        generals = general_terms(words, by_lemma)
    candidates.update(generals.get(n, ()), generals.get(crude_lemma(n), ()))
    return frozenset(w for w in candidates if is_synonym(n, w))


def general_terms(words: frozenset[str], by_lemma: dict[str, list[str]]) -> dict[str, set[str]]:
    """The words of `words` that are themselves a general term ("animal", "animals": a hypernym
    list's name, or a word of its crude lemma), by each word their list covers."""
    found = {name for name in _HYPERNYMS if name in words}
    found.update(w for name in _HYPERNYMS for w in by_lemma.get(name, ()))
    index: dict[str, set[str]] = {}
    for general in found:
        for word in _HYPERNYMS.get(general) or _HYPERNYMS.get(crude_lemma(general)) or ():
            index.setdefault(word, set()).add(general)
    return index


def is_hypernym(general: str, word: str) -> bool:
    """`general` covers `word` in the lexicon's hypernym lists (plurals by crude lemma)."""
    covered = _HYPERNYMS.get(general) or _HYPERNYMS.get(crude_lemma(general))
    return bool(covered) and (word in covered or crude_lemma(word) in covered)


def is_position_noun(word: str) -> bool:
    return word.lower() in POSITION_NOUNS


def noun_roles(v: View, chunk: Chunk) -> list[str]:
    """Roles of a chunk, specific first: the preposition/verb governing it ("on"), or for a
    subject the verb that follows it ("subj:drinking", then "_subj"); always ending in `*`."""
    for i in range(chunk.start - 1, max(chunk.start - 3, -1), -1):
        if v.tags[i] == "IN" or v.pos[i] == "VERB":
            return [v.lower[i], "*"]
        if v.pos[i] not in ("ADV", "PART", "ADP"):
            break
    if any(p == "VERB" or p == "AUX" for p in v.pos[:chunk.start]):
        return ["*"]
    for i in range(chunk.end, min(chunk.end + 3, len(v))):
        if v.pos[i] == "VERB":
            return [f"subj:{v.lower[i]}", "_subj", "*"]
    return ["_subj", "*"]


def verb_roles(v: View, i: int) -> list[str]:
    """Roles of a verb: its direct object's head ("obj:horse") or the preposition after it
    ("prep:on"); always ending in `*`."""
    nxt = i + 1
    if nxt < len(v):
        for c in v.chunks:
            if c.start == nxt:
                return [f"obj:{v.lower[c.head]}", "*"]
        if v.tags[nxt] == "IN":
            return [f"prep:{v.lower[nxt]}", "*"]
    return ["*"]


def is_part_noun(v: View, chunk: Chunk) -> bool:
    """A chunk followed by `of` names a part or amount ("the middle of", "a piece of"), and a
    positional / partitive / framing head ("on top", "a close up") is no object either: object
    rules leave these alone."""
    return ((chunk.end < len(v) and v.lower[chunk.end] == "of")
            or v.lower[chunk.head] in POSITION_NOUNS)


def scene_items(v: View) -> set[str]:
    """The caption's items for the `SceneModel`: the crude lemma of every object chunk's head
    noun (not a part or position: "the side of"), and every verb as `v:<word>`."""
    items = {crude_lemma(v.lower[c.head]) for c in v.chunks
             if v.tags[c.head] in ("NN", "NNS") and v.lower[c.head].isalpha() and not is_part_noun(v, c)}
    items.update(f"v:{w}" for w, t, p in zip(v.lower, v.tags, v.pos)
                 if p == "VERB" and t.startswith("VB") and w.isalpha())
    return items


# Entries each cache of derived word sets on a `Vocabulary` holds before it is emptied (one shared
# vocabulary answers every caption; frozensets of up to hundreds of words, ~1-7 KB an entry).
CACHE_ENTRIES = {"unions": 1 << 12, "kept": 1 << 12, "add_synonyms": 1 << 13,
                 "add_without_synonyms": 1 << 12, "replace_class_sets": 1 << 11,
                 "replace_verbs_for_subject": 1 << 12}


def remember(cache: dict, key, value, kind: str):
    """`value` stored under `key` in `cache`, emptied first when it holds `CACHE_ENTRIES[kind]`
    entries; returns `value`."""
    if len(cache) >= CACHE_ENTRIES[kind]:
        cache.clear()
    cache[key] = value
    return value


class Vocabulary:
    """Frequency-sorted word lists per bucket; `sample` draws a non-synonym replacement."""

    def __init__(self, buckets: Optional[dict[str, list[tuple[str, int]]]] = None,
                 fallback: Optional["Vocabulary"] = None, lm: Optional[NgramLM] = None,
                 scene: Optional[SceneModel] = None):
        self.buckets: dict[str, list[tuple[str, int]]] = buckets or {}
        self.lm = lm  # the corpus n-gram model of the plausibility filter (None: not trained)
        self.scene = scene  # which items come together in a caption (None: not trained, no check)
        self.fallback = fallback  # asked when no bucket of this one has a usable word
        self._cum: dict[str, tuple[list[str], list[int]]] = {}
        self._positions: dict[str, dict[str, int]] = {}
        self._kept_cache: dict[tuple, tuple[list[str], list[int]]] = {}  # see `_kept`
        self._with_sets: dict[str, frozenset[str]] = {}  # see `_with_words`
        self._unions: dict[tuple[str, ...], frozenset[str]] = {}  # object lemmas -> `company`
        self._company: tuple = (None, {})  # the last View asked about, its sets by skipped chunk
        self._scene_items: tuple = (None, set())  # the last View `scene_check` was asked about, its items

    @classmethod
    def mine(cls, views: Iterable[View], min_count: int = 2, top_k: int = 300,
             with_k: int = 40) -> "Vocabulary":
        counts: dict[str, Counter] = defaultdict(Counter)
        texts: list[str] = []
        scenes: list[set[str]] = []
        with_counts: dict[str, Counter] = defaultdict(Counter)
        for v in views:
            texts.append(" ".join(v.lower))
            scenes.append(scene_items(v))
            heads = set()
            for c in v.chunks:
                head, tag = v.lower[c.head], v.tags[c.head]
                if tag in ("NN", "NNS") and head.isalpha() and not is_part_noun(v, c):
                    heads.add((crude_lemma(head), head if tag == "NN" else None))
                    for role in noun_roles(v, c):
                        counts[f"noun/{tag}/{role}"][head] += 1
                for a in c.adjectives:
                    adj = v.lower[a]
                    if adj.isalpha() and adj not in ADJ_STOP and adj not in OPINION_ADJECTIVES:
                        counts[f"adj/{head}"][adj] += 1
                        counts["adj/*"][adj] += 1
            for i, (word, tag, pos) in enumerate(zip(v.lower, v.tags, v.pos)):
                if pos == "VERB" and tag.startswith("VB") and word.isalpha():
                    for role in verb_roles(v, i):
                        counts[f"verb/{tag}/{role}"][word] += 1
                elif tag == "IN" and pos == "ADP" and word.isalpha() and word not in PREP_STOP:
                    counts["prep/*"][word] += 1
            for lemma, _ in heads:  # nouns seen in one caption together: plausible company
                for other_lemma, singular in heads:
                    if singular and other_lemma != lemma:
                        with_counts[f"with/{lemma}"][singular] += 1
        buckets = {}
        for name, counter in [*counts.items(), *with_counts.items()]:
            keep = sorted(((w, n) for w, n in counter.items() if n >= min_count),
                          key=lambda wn: (-wn[1], wn[0]))[:top_k if name[:5] != "with/" else with_k]
            if keep:
                buckets[name] = keep
        return cls(buckets, fallback=builtin_vocabulary(), lm=NgramLM.train(texts),
                   scene=SceneModel.train(scenes))

    def scene_check(self, v: View, without: str = "") -> Optional[Callable[[str], bool]]:
        """An `accept` for `sample`: takes a noun that fits the caption's scene (`SceneModel.fits`
        with the caption's `scene_items`, less the lemma `without`: the replaced noun); None
        when there is no scene model (a vocabulary file from before it, the built-in one)."""
        if self.scene is None:
            return None
        if self._scene_items[0] is not v:  # the caption's rules ask again and again
            self._scene_items = (v, scene_items(v))
        scene, known = self.scene, {}
        # one order, so `fit` sums the same floats in the same order in every process
        context = tuple(sorted(self._scene_items[1] - {without}))

        def accept(word: str) -> bool:
            ok = known.get(word)
            if ok is None:
                ok = known[word] = scene.fits(crude_lemma(word), context)
            return ok
        return accept

    def company(self, v: View, skip: int = -1) -> frozenset[str]:
        """Nouns seen in the corpus with the caption's object nouns (chunk `skip` left out);
        remembered for the last caption asked about (its rules ask again and again)."""
        if self._company[0] is not v:
            self._company = (v, {})
        known = self._company[1]
        if skip in known:
            return known[skip]
        lemmas = tuple(crude_lemma(v.lower[c.head]) for k, c in enumerate(v.chunks)
                       if k != skip and v.tags[c.head] in ("NN", "NNS"))
        found = self._unions.get(lemmas)  # the same objects come together in many captions
        if found is None:
            found = remember(self._unions, lemmas, frozenset().union(*map(self._with_words, lemmas)), "unions")
        known[skip] = found
        return found

    def _with_words(self, lemma: str) -> frozenset[str]:
        """The words of bucket `with/<lemma>` (remembered: `company` unions them per caption)."""
        found = self._with_sets.get(lemma)
        if found is None:
            found = self._with_sets[lemma] = frozenset(w for w, _ in self.buckets.get(f"with/{lemma}", ()))
        return found

    def words(self, bucket: str) -> list[str]:
        return [w for w, _ in self.buckets.get(bucket, ())]

    def sample(self, rng: random.Random, buckets: list[str], replaced: str,
               avoid: frozenset[str] | set[str] = frozenset(), keep: Optional[set[str]] = None,
               tries: int = 8, accept: Optional[Callable[[str], bool]] = None) -> Optional[str]:
        """A frequency-weighted word from the first bucket with enough words, else None.

        Never a synonym of `replaced`, never a word whose `crude_lemma` is in `avoid` (pass the
        caption's lemmas, `View.lemmas`); only words in `keep` if given, and only words
        `accept` takes if given (a scene check, `SceneModel.fits`).
        """
        for bucket in buckets:
            entries = self.buckets.get(bucket)
            if not entries or len(entries) < 2:
                continue
            if keep is not None:
                words, cum = self._kept(bucket, keep)
                if not words:
                    continue
            else:
                words, cum = self._cumulative(bucket)
            total, hi = cum[-1] + 0.0, len(cum) - 1
            for _ in range(tries):  # rng.choices(words, cum_weights=cum)[0], without its checks
                word = words[bisect_right(cum, rng.random() * total, 0, hi)]
                if (crude_lemma(word) not in avoid and not is_synonym(replaced, word)
                        and (accept is None or accept(word))):
                    return word
        if self.fallback is not None:
            return self.fallback.sample(rng, buckets, replaced, avoid, keep, tries, accept)
        return None

    def _index(self, bucket: str) -> dict[str, int]:
        """Word -> its position in the bucket (to filter a bucket by a word set in its order)."""
        if bucket not in self._positions:
            self._positions[bucket] = {w: i for i, (w, _) in enumerate(self.buckets[bucket])}
        return self._positions[bucket]

    def _kept(self, bucket: str, keep: frozenset[str] | set[str]) -> tuple[list[str], list[int]]:
        """The words of `bucket` that are in `keep`, in the bucket's order, and their cumulative
        counts; remembered for a frozenset `keep` (a caption's `company` or an attribute
        group, asked about again and again), recomputed for any other."""
        cache_key = (bucket, keep) if isinstance(keep, frozenset) else None
        found = self._kept_cache.get(cache_key) if cache_key else None
        if found is None:
            index, entries = self._index(bucket), self.buckets[bucket]
            entries = [entries[i] for i in sorted(map(index.__getitem__, index.keys() & keep))]
            found = [w for w, _ in entries], list(accumulate(n for _, n in entries))
            if cache_key:
                remember(self._kept_cache, cache_key, found, "kept")
        return found

    def _cumulative(self, bucket: str) -> tuple[list[str], list[int]]:
        if bucket not in self._cum:
            words, total, cum = [], 0, []
            for w, n in self.buckets[bucket]:
                total += n
                words.append(w)
                cum.append(total)
            self._cum[bucket] = (words, cum)
        return self._cum[bucket]

    def to_json(self, path: str | Path) -> None:
        data: dict = {"buckets": self.buckets}
        if self.lm is not None:
            data["ngram"] = self.lm.to_json_dict()
        if self.scene is not None:
            data["scene"] = self.scene.to_json_dict()
        Path(path).write_text(json.dumps(data, sort_keys=True))

    @classmethod
    def from_json(cls, path: str | Path) -> "Vocabulary":
        try:
            data = json.loads(Path(path).read_text())
            buckets = {k: [tuple(e) for e in v] for k, v in data["buckets"].items()}
            lm = NgramLM.from_json_dict(data["ngram"]) if "ngram" in data else None
            scene = SceneModel.from_json_dict(data["scene"]) if "scene" in data else None
            return cls(buckets, fallback=builtin_vocabulary(), lm=lm, scene=scene)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: not a vocabulary file ({err})") from None

    def __len__(self) -> int:
        return sum(len(v) for v in self.buckets.values())


_BUILTIN = {
    "noun/NN/*": "man woman dog cat table car horse bench tree boy girl plate street bed kitchen "
                 "bus train pizza clock field beach",
    "noun/NNS/*": "people men women dogs cats cars horses trees boys girls plates birds sheep cows "
                  "flowers chairs books signs bananas",
    "verb/VBG/*": "sitting standing holding riding walking looking eating playing flying "
                  "lying running carrying watching",
    "verb/VBZ/*": "sits stands holds rides walks looks eats plays flies lies runs carries watches",
    "prep/*": "on in with near under behind above beside at inside against across",
}


def builtin_vocabulary() -> Vocabulary:
    """A small fallback vocabulary for rule functions called without a mined one."""
    buckets = {k: [(w, 1) for w in words.split()] for k, words in _BUILTIN.items()}
    buckets["adj/*"] = [(w, 1) for w in sorted(ATTRIBUTE_OF)]
    return Vocabulary(buckets)
