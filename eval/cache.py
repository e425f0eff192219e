"""Encode every unique text and image once per run, in batches, with a progress bar.

`EmbeddingCache` wraps a scorer; benchmarks ask it for the embeddings of lists that repeat
items freely (the same caption in several triplets, the same COCO image in SugarCrepe and
SugarCrepe++). Items not seen before are encoded in batches of `batch_size`; texts are keyed by
the string, images by `ref.key` (file and crop box, dataset row, ...). Identical inputs thus get
bit-identical embeddings, which makes the benchmarks' exact-tie rules meaningful. Embeddings are
kept in the scorer's precision (`scorer.precision`, fp32 unless set), so the benchmarks' score
arithmetic runs in it too.

Progress: one bar per batch of new items, on stderr, naming the benchmark (and part) being
scored (`with cache.labelled("visla/generic"): ...`, which `Benchmark.score` and the benchmarks'
loops over their parts set) and what is encoded, with the number of items as its total.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Sequence

from compclip.cli import progress as progress_bar

if TYPE_CHECKING:  # torch is imported where embeddings are stacked: reading cached scores does not need it
    import torch
    from torch import Tensor

    from compclip.eval.scorer import TextScorer


class EmbeddingCache:
    def __init__(self, scorer: TextScorer, batch_size: int = 256, progress: bool = True, workers: int = 4):
        self.scorer, self.batch_size, self.progress = scorer, batch_size, progress
        self.workers = workers  # threads opening (decoding, cropping) images; PIL releases the GIL
        self._texts: dict[str, Tensor] = {}
        self._images: dict[object, Tensor] = {}
        self.label = ""  # the benchmark (and part) being scored, named by the progress bars

    @contextmanager
    def labelled(self, label: str):
        """Name `label` on the bars of the encodes inside the block (restored after)."""
        before, self.label = self.label, label
        try:
            yield self
        finally:
            self.label = before

    @property
    def precision(self) -> str:
        return getattr(self.scorer, "precision", "fp32")

    @property
    def dtype(self) -> torch.dtype:
        from compclip.eval.precision import dtype_of
        return dtype_of(self.precision)

    @property
    def supports_images(self) -> bool:
        return self.scorer.supports_images

    @property
    def name(self) -> str:
        return self.scorer.name

    def texts(self, texts: Sequence[str]) -> Tensor:
        """[len(texts), D]; new strings are encoded, the rest come from the cache."""
        new = list(dict.fromkeys(t for t in texts if t not in self._texts))
        self._fill(self._texts, new, new, self.scorer.encode_texts, "texts")
        return self._stack(self._texts, list(texts))

    def images(self, refs: Sequence) -> Tensor:
        """[len(refs), D] for image references (see eval.images); each key is encoded once."""
        if not self.scorer.supports_images:
            raise TypeError(f"scorer '{self.scorer.name}' is text-only and cannot encode images")
        new = list({r.key: r for r in refs if r.key not in self._images}.values())
        with ThreadPoolExecutor(max(1, self.workers)) as pool:
            self._fill(self._images, [r.key for r in new], new,
                       lambda chunk: self.scorer.encode_images(list(pool.map(lambda r: r.open(), chunk))), "images")
        return self._stack(self._images, [r.key for r in refs])

    def _fill(self, store: dict, keys: list, items: list, encode, what: str) -> None:
        if not items:
            return
        desc = f"{self.label}: encode {what}" if self.label else f"encode {what}"
        bar = progress_bar(total=len(items), desc=desc, unit=what[:-1], quiet=not self.progress, leave=False)
        for i in range(0, len(items), self.batch_size):
            emb = encode(items[i:i + self.batch_size]).to(self.dtype).cpu()
            store.update(zip(keys[i:i + self.batch_size], emb))
            bar.update(len(emb))
        bar.close()

    def _stack(self, store: dict, keys: list) -> Tensor:
        import torch
        return torch.stack([store[k] for k in keys]) if keys else torch.empty(0, dtype=self.dtype)


def as_cache(scorer_or_cache, progress: bool = True) -> EmbeddingCache:
    return scorer_or_cache if isinstance(scorer_or_cache, EmbeddingCache) else \
        EmbeddingCache(scorer_or_cache, progress=progress)
