"""Blind (image-free) baselines: how much of a benchmark a judge that never sees the image solves.

A judge gives each caption one plausibility score (higher: more likely the true caption), as
SugarCrepe's `text_model_eval.py` scores Vera and a grammar model: `fit(corpus, groups)` on the
benchmark's positive captions, each with the key of its image, then `score(texts, groups)`,
where a text of group g is scored without the corpus entries of group g (leave-one-image-out).
Judges (`JUDGES`, one module each): `length` (`eval.blind.length`), `ngram`
(`eval.blind.ngram`), `minilm` (`eval.blind.minilm`). `eval.blind.tasks` turns the scores into
the benchmarks' own metrics, where the choice is between captions of one image.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class Judge(Protocol):
    name: str
    about: str  # one line for the report's notes

    def fit(self, corpus: Sequence[str], groups: Sequence[str]) -> None: ...

    def score(self, texts: Sequence[str], groups: Sequence[str]) -> np.ndarray: ...


def _length():
    from compclip.eval.blind.length import LengthJudge
    return LengthJudge()


def _ngram():
    from compclip.eval.blind.ngram import BigramJudge
    return BigramJudge()


def _minilm():
    from compclip.eval.blind.minilm import NearestCaptionJudge
    return NearestCaptionJudge()


JUDGES = {"length": _length, "ngram": _ngram, "minilm": _minilm}


def make_judge(name: str) -> Judge:
    """A new judge by name (one of `JUDGES`)."""
    return JUDGES[name]()
