"""`ngram` blind judge: an add-k smoothed word bigram language model of the positive captions.

Fitted on the benchmark's own positive captions (`[a-z0-9']+` words after lower-casing, with
start and end marks); a caption's score is its mean log-probability per bigram (end mark
included), so length does not enter (that is the `length` judge's job). Leave-one-image-out: a
caption of image g is scored with the counts of every other image's captions (the counts of
group g are subtracted), so neither the caption itself nor another caption of its image is seen.
P(w | v) = (c(v, w) + k) / (c(v) + k V), V = the corpus vocabulary plus one unknown-word type;
k = 0.1, set before any benchmark was scored and not tuned.
"""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from compclip.eval.blind.length import words

K = 0.1


def bigrams(text: str) -> list[tuple[str, str]]:
    tokens = ["<s>"] + words(text) + ["</s>"]
    return list(zip(tokens, tokens[1:]))


class BigramJudge:
    name = "ngram"
    about = ("add-k bigram language model of this benchmark's positive captions, each caption "
             "scored without its own image's captions")

    def __init__(self, k: float = K):
        self.k = k

    def fit(self, corpus, groups) -> None:
        self.pairs, self.contexts = Counter(), Counter()  # c(v, w), c(v): all images
        self.own: dict[str, tuple[Counter, Counter]] = defaultdict(lambda: (Counter(), Counter()))  # per image
        vocab = set()
        for text, g in zip(corpus, groups):
            grams = bigrams(text)
            for counts in (self.pairs, self.contexts), self.own[g]:
                counts[0].update(grams)
                counts[1].update(v for v, _ in grams)
            vocab.update(w for _, w in grams)
        self.vocab_size = len(vocab) + 1

    def score(self, texts, groups) -> np.ndarray:
        out = np.empty(len(texts))
        for i, (text, g) in enumerate(zip(texts, groups)):
            own, own_ctx = self.own.get(g, (Counter(), Counter()))
            logp = [np.log((self.pairs[b] - own[b] + self.k)
                           / (self.contexts[b[0]] - own_ctx[b[0]] + self.k * self.vocab_size))
                    for b in bigrams(text)]
            out[i] = float(np.mean(logp))
        return out
