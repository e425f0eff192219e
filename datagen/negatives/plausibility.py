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


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


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
        self._cache: Optional[tuple] = None  # the last positive: text, padded, left-out counts, sums
        self._counts_of: dict[tuple, tuple] = {}  # trigram -> the corpus counts `_trigram` reads
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
        if _key(toks) not in self.seen:
            return None
        own = Counter(_grams(toks))
        minus: Counter = Counter(own)
        minus["#"] = sum(n for g, n in own.items() if len(g) == 1)
        for gram, n in own.items():
            if len(gram) > 1:
                minus[(_CTX,) + gram[:-1]] += n
                if self.counts.get(gram, 0) - n <= 0:
                    minus[(_TYPES,) + gram[:-1]] += 1
        return dict(minus)

    def score(self, positive: str, texts: Sequence[str]) -> list[float]:
        """Mean log-prob per token of each text. Only the positions whose trigram differs from
        the positive's are computed: a negative shares most of its words with its positive.
        The log-probabilities of one positive's trigrams are memoised, since its negatives share
        many of them (`_trigram`: the same values as `_lp`, summed in the same order)."""
        if self._cache is None or self._cache[0] != positive:
            toks = tokens(positive)
            minus = self._minus(toks)
            padded = [BOS, BOS] + toks + [EOS]
            cum = [0.0, 0.0, 0.0]
            for i in range(2, len(padded)):
                cum.append(cum[-1] + self._lp(padded, i, minus))
            self._cache = (positive, padded, _split(minus), cum, {})
        _, pos, split, cum, memo = self._cache
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
            for i in range(p + 2, hi):
                key = (neg[i - 2], neg[i - 1], neg[i])
                value = memo.get(key)
                if value is None:
                    value = memo[key] = trigram(key, split)
                part += value
            total = cum[p + 2] + part
            total += cum[lp_len] - cum[hi + lp_len - ln]
            out.append(total / (ln - 2))
        return out

    def _trigram(self, key: tuple[str, str, str], split: Optional[tuple]) -> float:
        """`_lp` of the trigram `key`, with the left-out counts split by `_split` and the
        corpus counts of the trigram's n-grams and contexts memoised across captions: the same
        arithmetic in the same order, hence the same float."""
        a, b, w = key
        found = self._counts_of.get(key)
        if found is None:
            if len(self._counts_of) >= 1 << 20:  # bounded: a long run meets new trigrams forever
                self._counts_of.clear()
            counts_get, stats_get = self.counts.get, self.stats.get
            found = self._counts_of[key] = (counts_get((w,), 0), stats_get((b,)), counts_get((b, w), 0),
                                            stats_get((a, b)), counts_get(key, 0))
        uni, st1, bi, st2, tri = found
        if split is None:
            p = (uni + 1) / self.denominator
            if st1:
                p = (bi + st1[1] * p) / (st1[0] + st1[1])
                if st2:
                    p = (tri + st2[1] * p) / (st2[0] + st2[1])
            return math.log(p)
        less_uni, less_bi, less_tri, less_ctx1, less_ctx2, less_types1, less_types2, less_total = split
        p = (uni - less_uni(w, 0) + 1) / (self.denominator - less_total)
        if st1:
            hc = st1[0] - less_ctx1(b, 0)
            if hc > 0:
                t = st1[1] - less_types1(b, 0)
                p = (bi - less_bi((b, w), 0) + t * p) / (hc + t)
        if st2:
            hc = st2[0] - less_ctx2((a, b), 0)
            if hc > 0:
                t = st2[1] - less_types2((a, b), 0)
                p = (tri - less_tri(key, 0) + t * p) / (hc + t)
        return math.log(p)

    def to_json_dict(self) -> dict[str, Any]:
        return {"order": self.order, "counts": {" ".join(g): n for g, n in self.counts.items()},
                "seen": sorted(self.seen)}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> "NgramLM":
        return cls({tuple(k.split(" ")): int(n) for k, n in data["counts"].items()},
                   set(data.get("seen", ())))


def _split(minus: Optional[dict]) -> Optional[tuple]:
    """`NgramLM._minus`'s dict as the `get` of its unigram (by word), bigram, trigram, context
    total (by word / word pair) and context type counts, and its unigram total."""
    if not minus:
        return None
    parts: list[dict] = [{} for _ in range(7)]
    for key, n in minus.items():
        if key == "#":
            continue
        if key[0] in (_CTX, _TYPES):
            h = key[1:]
            parts[(3 if key[0] == _CTX else 5) + (len(h) - 1)][h[0] if len(h) == 1 else h] = n
        else:
            parts[len(key) - 1][key[0] if len(key) == 1 else key] = n
    return (*(part.get for part in parts), minus["#"])


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
