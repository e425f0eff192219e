"""`length` blind judge: the caption with fewer words is the more plausible one.

Score = minus the number of words (`[a-z0-9']+` after lower-casing); nothing is fitted. A
negative made by adding words (SugarCrepe's add_*) is longer than its positive; one made by
swapping words has the same length, so the two tie (a tie counts as the benchmark's rule says).
"""
from __future__ import annotations

import re

import numpy as np


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


class LengthJudge:
    name = "length"
    about = "the caption with fewer words wins; nothing fitted"

    def fit(self, corpus, groups) -> None:
        pass

    def score(self, texts, groups) -> np.ndarray:
        return -np.array([len(words(t)) for t in texts], dtype=np.float64)
