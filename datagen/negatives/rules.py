"""`RuleNegativeGenerator`: every registered rule of one rule set over one spaCy parse per caption.

    gen = RuleNegativeGenerator()                      # compclip rules, one negative per sub-kind
    gen.generate(["A man riding a horse on a beach."], seed=0)
    RuleNegativeGenerator(rules="negclip", mode="all", cap=None)   # NegCLIP's script, every swap

Two rule sets (`rules`): `compclip` (the default: the guarded swap / replace / add rules and the
plausibility filter, below) and `negclip` (NegCLIP's swaps exactly as its authors' script made
them, `datagen/negatives/negclip.py`: a full spaCy parse, no vocabulary, no filter, no caption
skipped but empty ones, the caption parsed exactly as given). Everything below the next
paragraph is about `compclip`.

Captions are parsed once with `nlp.pipe` (tagger only: ner, lemmatizer and the parser are
disabled, since chunks are found from tags), then each registered `(kind, subkind)` function runs
on the shared Doc. Caption `i` of a call draws from `random.Random(f"{seed}:{start_index + i}")`
alone, shared by the selected functions in registry order, so a caption's negatives depend only
on the seed, its index, the selected kinds and the vocabulary: chunked, parallel and resumed runs
agree. Without a given vocabulary, one is mined from the captions of the call (parse reused).
`mode="sample"` keeps one negative per sub-kind; `mode="all"` keeps up to `cap` distinct ones
(`cap=None` or 0: all of them).

Plausibility filter (`plausibility="ngram"`, the default; see `plausibility.py`): each rule
offers up to `candidates` negatives, the corpus n-gram model stored with the vocabulary scores
them against the caption, and candidates more than `margin` nats per token below the caption
are dropped; sample mode keeps the most plausible of the rest, all mode keeps every candidate
with the implausible ones ranked last. The swap sub-kinds named after NegCLIP's types
(`swap.NEGCLIP_TYPES`) are never left empty by the filter: sample mode keeps their most
plausible candidate even below the margin. `plausibility=None` turns
the filter off; any object with `score(positive, texts)` (e.g. `HFCausalLMScorer`), or
`"hf:<local model folder>"`, replaces the n-gram model. Without a model in the vocabulary (an old `vocab.json`) the filter is off.
"""
from __future__ import annotations

import random
import sys
from collections import Counter
from typing import Iterable, Optional, Sequence

import compclip.datagen.negatives.add as add  # noqa: F401  (add, negclip, replace, swap: register the rule functions)
import compclip.datagen.negatives.negclip as negclip
import compclip.datagen.negatives.replace as replace  # noqa: F401
import compclip.datagen.negatives.swap as swap
from compclip.compat.spacy import import_spacy, load_tagger  # noqa: F401  (import_spacy: imported from here too)
from compclip.datagen.negatives.base import RULE_SETS, SPACY_MODEL
from compclip.datagen.negatives.plausibility import DEFAULT_MARGIN, PlausibilityFilter
from compclip.datagen.negatives.text import set_pos_table, skip_reason, view
from compclip.datagen.negatives.vocab import Vocabulary
from compclip.shardset.schema import SUBKINDS, Negative

_NEGCLIP = frozenset(("swap", t) for t in swap.NEGCLIP_TYPES)
_NLP_CACHE: dict[tuple[str, bool], object] = {}


def load_nlp(model: str = SPACY_MODEL, parser: bool = False):
    """The spaCy pipeline with only what the rules use (cached per process): tokenizer, tok2vec
    and tagger (`compclip.compat.spacy.load_tagger`: numpy BLAS, a bare tokenizer that gets the
    package's rules, components never run excluded). The attribute_ruler's POS mapping is
    applied by `view` instead of by the ruler (`compclip.compat.spacy.PosTable`); outside the
    spaCy versions that was checked on, the ruler runs and `view` reads spaCy's own POS."""
    key = (model, parser)
    if key not in _NLP_CACHE:
        nlp, table = load_tagger(model, parser)
        if table is not None:
            set_pos_table(table)
        _NLP_CACHE[key] = nlp
    return _NLP_CACHE[key]


def check_spacy_model(model: str) -> None:
    """Refuse (InputError, exit 2) a spaCy pipeline that is neither an installed package nor a
    folder, before any work: spaCy itself would say so only once the first captions are parsed."""
    import importlib.util
    from pathlib import Path
    from compclip.datagen.negatives.captions_io import InputError
    if Path(model).is_dir():
        return
    try:
        found = model.isidentifier() and importlib.util.find_spec(model) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise InputError(f"--spacy-model {model}: no installed spaCy pipeline of that name and no such "
                         f"folder (the default is {SPACY_MODEL}; install the pipeline's package, or give its folder)")


def rule_set(rules: str) -> dict:
    if rules not in RULE_SETS:
        raise ValueError(f"unknown rule set '{rules}' (rule sets: {', '.join(RULE_SETS)})")
    return RULE_SETS[rules]


def select_kinds(kinds: Optional[Iterable[str]] = None, rules: str = "compclip") -> list[tuple[str, str]]:
    """`None` = all registered in the rule set; else names like `swap`, `replace:obj`,
    `swap:noun_chunk`."""
    fns = rule_set(rules)
    if kinds is None:
        return list(fns)
    out: list[tuple[str, str]] = []
    for name in kinds:
        kind, _, sub = str(name).partition(":")
        if kind not in SUBKINDS:
            raise ValueError(f"unknown negative kind '{name}' (kinds: {', '.join(SUBKINDS)})")
        subs = [sub] if sub else [s for k, s in fns if k == kind]
        if not subs:
            raise ValueError(f"the {rules} rules have no '{kind}' negatives (have: "
                             f"{', '.join(f'{k}:{x}' for k, x in fns)})")
        for s in subs:
            if (kind, s) not in fns:
                raise ValueError(f"no rule for '{kind}:{s}' in the {rules} rules (have: "
                                 f"{', '.join(f'{k}:{x}' for k, x in fns)})")
            if (kind, s) not in out:
                out.append((kind, s))
    return [k for k in fns if k in out]  # registry order, whatever order was asked


class RuleNegativeGenerator:
    """Rule-based negatives meeting the `NegativeGenerator` protocol."""

    def __init__(self, kinds: Optional[Iterable[str]] = None, mode: str = "sample", cap: Optional[int] = 8,
                 vocab: Optional[Vocabulary] = None, batch_size: int = 256, max_words: int = 100,
                 nlp=None, source: str = "rules", plausibility="auto",
                 margin=DEFAULT_MARGIN, candidates: int = 3, rules: str = "compclip",
                 spacy_model: str = SPACY_MODEL):
        if mode not in ("sample", "all"):
            raise ValueError(f"mode must be 'sample' or 'all', not '{mode}'")
        self.fns = rule_set(rules)
        if plausibility == "auto":  # the n-gram filter for compclip; NegCLIP's script had none
            plausibility = "ngram" if rules == "compclip" else None
        if rules == "negclip" and plausibility is not None:
            raise ValueError("the negclip rules take no plausibility filter (NegCLIP's script had none)")
        self.rules, self.spacy_model = rules, spacy_model
        self.plausibility, self.margin, self.candidates = plausibility, margin, candidates
        self.filtered: Counter[str] = Counter()  # candidates below the margin, per kind:subkind
        self.kinds = select_kinds(kinds, rules)
        self.mode, self.cap, self.vocab = mode, cap, vocab
        self.batch_size, self.max_words, self.source = batch_size, max_words, source
        self.nlp = nlp
        self.skipped: Counter[str] = Counter()

    def plausibility_filter(self, vocab: Optional[Vocabulary]) -> Optional[PlausibilityFilter]:
        """The filter in use: None when off, or "ngram" with a vocabulary that has no model."""
        if self.plausibility is None:
            return None
        if self.plausibility == "ngram":
            lm = getattr(vocab, "lm", None)
            if lm is None:
                return None
            if getattr(self, "_filter", None) is None or self._filter.scorer is not lm:
                self._filter = PlausibilityFilter(lm, self.margin)
            return self._filter
        if getattr(self, "_filter", None) is None:
            scorer = self.plausibility
            if isinstance(scorer, str):
                if not scorer.startswith("hf:"):
                    raise ValueError(f"plausibility must be 'ngram', 'hf:<model folder>', a scorer "
                                     f"or None, not '{scorer}'")
                from compclip.datagen.negatives.plausibility import HFCausalLMScorer
                scorer = HFCausalLMScorer.from_pretrained(scorer[3:])
            self._filter = PlausibilityFilter(scorer, self.margin)
        return self._filter

    def parse(self, captions: Sequence[str]) -> list:
        """One Doc per caption, None where the caption is skipped (reason counted). The negclip
        rules parse every caption as given and skip only empty ones."""
        if self.nlp is None:
            self.nlp = negclip.load_nlp(self.spacy_model) if self.rules == "negclip" else load_nlp(self.spacy_model)
        if self.rules == "negclip":
            reasons = [None if c.strip() else "empty" for c in captions]
        else:
            reasons = [skip_reason(c, self.max_words) for c in captions]
        for r in reasons:
            if r:
                self.skipped[r] += 1
        keep = [c if self.rules == "negclip" else c.strip() for c, r in zip(captions, reasons) if r is None]
        docs = iter(self.nlp.pipe(keep, batch_size=self.batch_size))
        return [None if r else next(docs) for r in reasons]

    def generate(self, captions: Sequence[str], seed: int = 0,
                 start_index: int = 0) -> list[list[Negative]]:
        docs = self.parse(captions)
        vocab = self.vocab
        if vocab is None and self.rules == "compclip":
            vocab = Vocabulary.mine(view(d) for d in docs if d is not None)
        return [self.negatives_for(doc, seed, start_index + i, vocab) if doc is not None else []
                for i, doc in enumerate(docs)]

    def negatives_for(self, doc, seed: int, index: int,
                      vocab: Optional[Vocabulary] = None) -> list[Negative]:
        """The negatives of one parsed caption, the `index`-th of the corpus."""
        rng = random.Random(f"{seed}:{index}")
        limit = 1 if self.mode == "sample" else (self.cap or sys.maxsize)
        vocab = vocab if vocab is not None else self.vocab
        filt = self.plausibility_filter(vocab)
        ask = max(limit, self.candidates) if filt is not None and self.mode == "sample" else limit
        positive = doc.text if filt is not None else ""
        out = []
        for key in self.kinds:  # each rule already drops candidates equal to the caption
            negs = self.fns[key](doc, rng, vocab=vocab, limit=ask)
            if filt is not None and negs:
                keep, drop = filt.rank(positive, [n.text for n in negs], key[0])
                self.filtered[f"{key[0]}:{key[1]}"] += len(drop)
                if self.mode == "all":
                    negs = [negs[i] for i in keep + drop]
                else:  # NegCLIP's swap types are never dropped, only ranked
                    negs = [negs[i] for i in (keep or (drop if key in _NEGCLIP else []))[:1]]
            out.extend(negs)
        if self.source != "rules":
            out = [Negative(n.text, n.kind, n.subkind, self.source) for n in out]
        return out
