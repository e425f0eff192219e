"""Plausibility of a negative next to its positive: a language model scores both, per token.

A negative "far less likely than its positive" (SugarCrepe's plausibility / grammar check, made
local) is one whose mean log-probability per token is more than `margin` nats below the
positive's. Two scorers meet the same interface, `score(positive, texts) -> list[float]` (mean
natural-log probability per token of each text, `positive` given so a corpus model can leave it
out):

- `NgramLM` (the offline default): an interpolated Witten-Bell trigram model over lower-cased
  words, trained on the caption corpus itself (`NgramLM.train`), stored with the vocabulary
  (`Vocabulary.to_json`). A caption that was in the training set is scored leave-one-out: its
  own n-gram counts are taken away first, so the model does not favour the positive for having
  memorised it.
- `HFCausalLMScorer`: any Hugging Face causal LM and its tokenizer (local, for users who have
  one), batched.

`PlausibilityFilter(scorer, margin)` ranks a rule's candidates: `keep(positive, candidates)`
returns them most plausible first, split into those within the margin and those below it.
"""
from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from typing import Any, Iterable, Optional, Protocol, Sequence, Union

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|'s")
BOS, EOS = "<s>", "</s>"
_CTX, _TYPES = "<ctx>", "<types>"  # keys of left-out context totals / types (never a token)
# nats per token a negative may lose against its caption, per kind (see docs/negatives.md)
DEFAULT_MARGIN = {"swap": 1.2, "replace": 0.5, "add": 0.5, "*": 0.5}


# ASCII bytes that are not [a-z0-9] -> space: for an ASCII text without an apostrophe, the
# tokens of `_TOKEN` are exactly the runs of [a-z0-9], i.e. the words after this translation.
_SEPARATE = bytes(c if chr(c) in "abcdefghijklmnopqrstuvwxyz0123456789" else 32 for c in range(256))


def tokens(text: str) -> list[str]:
    """Lower-cased words of `text` (`_TOKEN`); ASCII text without an apostrophe (nearly every
    caption) goes through a byte translation instead of the regex: the same list, ~3x faster."""
    text = text.lower()
    if text.isascii() and "'" not in text:
        return text.encode("ascii").translate(_SEPARATE).decode("ascii").split()
    return _TOKEN.findall(text)


def _key(toks: Sequence[str]) -> int:
    return zlib.crc32(" ".join(toks).encode("utf-8"))


class Scorer(Protocol):
    def score(self, positive: str, texts: Sequence[str]) -> list[float]:
        ...


class NgramLM:
    """Interpolated Witten-Bell trigram model; `score` gives mean log-prob per token (with the
    end of sentence), leaving the positive caption out when it was a training caption."""

    order = 3

    def __init__(self, counts: dict[tuple[str, ...], int], seen: set[int]):
        self.counts = counts  # n-gram (n = 1..3) -> count
        self.seen = seen  # crc32 of every training caption's token string
        self.ctx: Counter = Counter()  # context -> total count after it
        self.types: Counter = Counter()  # context -> distinct words after it
        for gram, n in counts.items():
            if len(gram) > 1:
                self.ctx[gram[:-1]] += n
                self.types[gram[:-1]] += 1
        self.total = sum(n for g, n in counts.items() if len(g) == 1)
        self.stats = {h: (n, self.types[h]) for h, n in self.ctx.items()}  # context -> (total, types)
        # `_trigram`'s look-ups by word, without building 1-tuples: unigram counts and the
        # (total, types) of one-word contexts
        self.unigrams = {g[0]: n for g, n in counts.items() if len(g) == 1}
        self.stats1 = {h[0]: st for h, st in self.stats.items() if len(h) == 1}
        self._cache: Optional[tuple] = None  # the last positive: text, padded, left-out counts, sums
        self.vocab = sum(1 for g in counts if len(g) == 1) + 1  # + unknown
        self.denominator = self.total + self.vocab

    @classmethod
    def train(cls, texts: Iterable[str]) -> "NgramLM":
        counts: Counter = Counter()
        seen = set()
        for text in texts:
            toks = tokens(text)
            if not toks:
                continue
            seen.add(_key(toks))
            counts.update(_grams(toks))
        return cls(dict(counts), seen)

    def _lp(self, padded: list[str], i: int, minus: Optional[dict]) -> float:
        """log P(padded[i] | padded[i-2], padded[i-1]), Witten-Bell interpolated."""
        counts, stats = self.counts, self.stats
        w, h1, h2 = padded[i], (padded[i - 1],), (padded[i - 2], padded[i - 1])
        if not minus:
            p = (counts.get((w,), 0) + 1) / self.denominator
            st = stats.get(h1)
            if st:
                p = (counts.get((h1[0], w), 0) + st[1] * p) / (st[0] + st[1])
                st = stats.get(h2)
                if st:
                    p = (counts.get((h2[0], h2[1], w), 0) + st[1] * p) / (st[0] + st[1])
            return math.log(p)
        less = minus.get
        p = (counts.get((w,), 0) - less((w,), 0) + 1) / (self.denominator - minus["#"])
        for h in (h1, h2):
            st = stats.get(h)
            if not st:
                continue
            hc = st[0] - less((_CTX,) + h, 0)
            if hc <= 0:
                continue
            t = st[1] - less((_TYPES,) + h, 0)
            p = (counts.get(h + (w,), 0) - less(h + (w,), 0) + t * p) / (hc + t)
        return math.log(p)

    def logprob(self, text: str, positive: Optional[str] = None) -> float:
        """Total log-probability of `text` (end of sentence included), every position scored;
        `positive` left out of the counts if it was a training caption."""
        minus = self._minus(tokens(positive)) if positive is not None else None
        padded = [BOS, BOS] + tokens(text) + [EOS]
        return sum(self._lp(padded, i, minus) for i in range(2, len(padded)))

    def _minus(self, toks: list[str]) -> Optional[dict]:
        """The counts a training caption contributed (None if it was not a training caption)."""
        own = self._own_counts(toks)
        if own is None:
            return None
        minus: Counter = Counter(own)
        minus["#"] = sum(n for g, n in own.items() if len(g) == 1)
        for gram, n in own.items():
            if len(gram) > 1:
                minus[(_CTX,) + gram[:-1]] += n
                if self.counts.get(gram, 0) - n <= 0:
                    minus[(_TYPES,) + gram[:-1]] += 1
        return dict(minus)

    def _own_counts(self, toks: list[str]) -> Optional[Counter]:
        """The n-gram counts of a training caption's tokens, None for any other: its crc32 is in
        `seen` and the model holds each of its n-grams at least as often as it has them. (A crc32
        alone is not enough: in ~500,000 captions beside 20,000 training ones a few share one
        with a training caption, and taking their counts away went below zero.)"""
        if _key(toks) not in self.seen:
            return None
        own = Counter(_grams(toks))
        counts_get = self.counts.get
        return own if all(counts_get(g, 0) >= n for g, n in own.items()) else None

    def score(self, positive: str, texts: Sequence[str]) -> list[float]:
        """Mean log-prob per token of each text. Only the positions whose trigram differs from
        the positive's are computed: a negative shares most of its words with its positive.
        The log-probabilities of one positive's trigrams are memoised, since its negatives share
        many of them (`_trigram`: the same values as `_lp`, summed in the same order)."""
        if self._cache is None or self._cache[0] != positive:
            self._cache = self._prepare(positive)
        _, pos, less, cum, memo = self._cache
        trigram, lp_len, out = self._trigram, len(pos), []
        for text in texts:
            if text == positive:  # what the loop below gives for it, without tokenising
                out.append(cum[lp_len] / (lp_len - 2))
                continue
            neg = [BOS, BOS] + tokens(text) + [EOS]
            ln = len(neg)
            short = min(ln, lp_len)
            p = 0
            while p < short - 3 and neg[p + 2] == pos[p + 2]:
                p += 1  # common prefix, in words
            c = 1
            while c < short - 2 - p and neg[ln - 1 - c] == pos[lp_len - 1 - c]:
                c += 1  # common suffix, end of sentence included
            hi = min(ln, max(p + 2, ln - c + 2))
            part = 0
            for key in zip(neg[p:hi - 2], neg[p + 1:hi - 1], neg[p + 2:hi]):  # trigrams ending at p+2 .. hi-1
                value = memo.get(key)
                if value is None:
                    value = memo[key] = trigram(key, less)
                part += value
            total = cum[p + 2] + part
            total += cum[lp_len] - cum[hi + lp_len - ln]
            out.append(total / (ln - 2))
        return out

    def _prepare(self, positive: str) -> tuple:
        """`score`'s state for one positive: (text, padded tokens, left-out counts
        (`_left_out`), cumulative log-probabilities per position, memo trigram -> log-prob),
        the memo seeded with the positive's own trigrams."""
        toks = tokens(positive)
        less = self._left_out(toks)
        padded = [BOS, BOS] + toks + [EOS]
        memo: dict[tuple, float] = {}
        cum = [0.0, 0.0, 0.0]
        total = 0.0
        for key in zip(padded, padded[1:], padded[2:]):
            value = memo.get(key)
            if value is None:
                value = memo[key] = self._trigram(key, less)
            total += value
            cum.append(total)
        return positive, padded, less, cum, memo

    def _left_out(self, toks: list[str]) -> Optional[tuple]:
        """What `_trigram` takes away for a training caption (None if it was not one): the
        `get` of its unigram (by word), bigram and trigram counts, its unigram total
        subtracted from the denominator, and the `get` of its contexts' (total, types) after
        the caption's own counts are taken away (by word / word pair; only contexts the corpus
        has). The same numbers as `_minus`, arranged for fewer look-ups."""
        if self._own_counts(toks) is None:
            return None
        counts_get = self.counts.get
        padded = [BOS, BOS] + toks + [EOS]
        uni = Counter(padded[2:])
        grams: dict[tuple, int] = {}
        adjusted: list[dict] = []  # context of 1 word (by word) / 2 words -> (total, types)
        for own, stats, head in ((Counter(zip(padded[1:], padded[2:])), self.stats1, 0),
                                 (Counter(zip(padded, padded[1:], padded[2:])), self.stats, 1)):
            grams.update(own)
            ctx: dict = {}  # context -> [left-out total, left-out types]
            for gram, n in own.items():
                less = ctx.setdefault(gram[0] if head == 0 else gram[:2], [0, 0])
                less[0] += n
                if counts_get(gram, 0) - n <= 0:
                    less[1] += 1
            found = {}
            for h, (n, types) in ctx.items():
                st = stats.get(h)
                if st:
                    found[h] = (st[0] - n, st[1] - types)
            adjusted.append(found)
        return (uni.get, self.denominator - sum(uni.values()), grams.get,
                adjusted[0].get, adjusted[1].get)

    def _trigram(self, key: tuple[str, str, str], less: Optional[tuple]) -> float:
        """`_lp` of the trigram `key`, with the left-out counts of `_left_out`: the same
        arithmetic in the same order, hence the same float. (A two-word context is looked up
        only when its last word is a context: every (a, b) context of the corpus has b as one.)"""
        a, b, w = key
        counts_get = self.counts.get
        uni, st1 = self.unigrams.get(w, 0), self.stats1.get(b)
        if less is None:
            p = (uni + 1) / self.denominator
            if st1:
                p = (counts_get((b, w), 0) + st1[1] * p) / (st1[0] + st1[1])
                st2 = self.stats.get((a, b))
                if st2:
                    p = (counts_get(key, 0) + st2[1] * p) / (st2[0] + st2[1])
            return math.log(p)
        less_uni, denominator, less_gram, context1, context2 = less
        p = (uni - less_uni(w, 0) + 1) / denominator
        if st1:
            hc, t = context1(b, st1)
            if hc > 0:
                bigram = (b, w)
                p = (counts_get(bigram, 0) - less_gram(bigram, 0) + t * p) / (hc + t)
            context = (a, b)
            st2 = self.stats.get(context)
            if st2:
                hc, t = context2(context, st2)
                if hc > 0:
                    p = (counts_get(key, 0) - less_gram(key, 0) + t * p) / (hc + t)
        return math.log(p)

    def to_json_dict(self) -> dict[str, Any]:
        return {"order": self.order, "counts": {" ".join(g): n for g, n in self.counts.items()},
                "seen": sorted(self.seen)}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> "NgramLM":
        return cls({tuple(k.split(" ")): int(n) for k, n in data["counts"].items()},
                   set(data.get("seen", ())))


def _grams(toks: list[str]):
    padded = [BOS, BOS] + toks + [EOS]
    for i in range(2, len(padded)):
        yield (padded[i],)
        yield (padded[i - 1], padded[i])
        yield (padded[i - 2], padded[i - 1], padded[i])


class HFCausalLMScorer:
    """Mean log-prob per token under a Hugging Face causal LM (`model`, `tokenizer`), batched.
    The first token is scored after the tokenizer's BOS (or EOS) token when it has one."""

    def __init__(self, model, tokenizer, batch_size: int = 32, device: Optional[str] = None):
        import torch
        self.torch = torch
        self.model, self.tokenizer, self.batch_size = model.eval(), tokenizer, batch_size
        self.device = device or next(model.parameters()).device
        self.start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id

    @classmethod
    def from_pretrained(cls, path: str, **kwargs) -> "HFCausalLMScorer":
        from transformers import AutoModelForCausalLM, AutoTokenizer
        return cls(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), **kwargs)

    def score(self, positive: str, texts: Sequence[str]) -> list[float]:
        out: list[float] = []
        for b in range(0, len(texts), self.batch_size):
            out.extend(self._batch(list(texts[b:b + self.batch_size])))
        return out

    def _batch(self, texts: list[str]) -> list[float]:
        torch = self.torch
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        if self.start is not None:
            ids = [[self.start] + x for x in ids]
        width = max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = torch.tensor([x + [pad] * (width - len(x)) for x in ids], device=self.device)
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids], device=self.device)
        with torch.no_grad():
            logits = self.model(input_ids=input_ids, attention_mask=mask).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:, None])[..., 0]
        keep = mask[:, 1:].float()
        return ((logp * keep).sum(1) / keep.sum(1).clamp(min=1)).tolist()


Margin = Union[float, dict[str, float]]


def margin_for(margin: Margin, kind: str) -> float:
    """`margin` itself, or its entry for `kind` (swap / replace / add; `*` = the others)."""
    if isinstance(margin, dict):
        return float(margin.get(kind, margin.get("*", DEFAULT_MARGIN["*"])))
    return float(margin)


def parse_margin(text: str) -> Margin:
    """"0.5" -> 0.5; "swap=1.2,replace=0.5,add=0.5" -> a per-kind dict (CLI form)."""
    if "=" not in text:
        return float(text)
    out = {}
    for part in text.split(","):
        kind, _, value = part.partition("=")
        out[kind.strip()] = float(value)
    return out


class PlausibilityFilter:
    """Keeps negatives within `margin` nats per token of their positive's log-probability
    (one number, or one per kind: swaps reorder a whole caption and always cost more)."""

    def __init__(self, scorer: Scorer, margin: Margin = None):
        self.scorer = scorer
        self.margin = DEFAULT_MARGIN if margin is None else margin

    def rank(self, positive: str, candidates: Sequence[str],
             kind: str = "*") -> tuple[list[int], list[int]]:
        """(indices within the margin, most plausible first; indices below it, likewise)."""
        if not candidates:
            return [], []
        scores = self.scorer.score(positive, [positive, *candidates])
        floor, rest = scores[0] - margin_for(self.margin, kind), scores[1:]
        order = sorted(range(len(candidates)), key=lambda i: -rest[i])
        return [i for i in order if rest[i] >= floor], [i for i in order if rest[i] < floor]
