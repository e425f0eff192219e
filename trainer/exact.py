"""Exact-pass epochs (`data.sampling: exact`): every sample once per epoch, in a global random order.

This is what the papers' PyTorch DataLoaders (`shuffle=True`) do, and what a shuffle buffer over
streamed shards cannot: a fresh permutation of the whole data set each epoch, cut into global
batches, the last incomplete global batch dropped. Global batch g of an epoch takes the entries
`perm[g*B : (g+1)*B]`; rank r's batch j is global batch `j * world + r`, and loader worker w of
W makes batches j = w, w + W, ... Samples are read by random access (`trainer.sample_index`).

Entries: a sample is one entry, or, with `data.visit_each_negative`, one entry per eligible hard
negative (that visit uses that negative: BiVLC's TROHN-Text epoch is one pass over its 2.9 M
(caption, negative) rows while the shard set keeps one sample per caption).

Mixes (`data.source_batch`): one pool of entries per source, `source_batch[i]` entries of pool i in
every batch, partner-bearing sources first. An epoch is one pass over the first source
(`data.train_shards[0]`); the other pools run on through permutation after permutation.

Everything is a pure function of (seed, epoch, batch, position), so a run resumes at any batch
without replaying anything. A bad sample (undecodable, broken schema) is counted and replaced by a
random entry of its pool, chosen by the same seeds; the stream stops with `DataError` above
`data.max_bad_fraction`, as in the resampled streams.
"""
from __future__ import annotations

import random
import tarfile
from dataclasses import dataclass, replace
from typing import Any, Iterator, Optional

import numpy as np
from torch.utils.data import IterableDataset

from compclip.trainer.compose import BadSample, Composer
from compclip.trainer.data import DataError, Source, carries_partner, check_bad, next_iteration, set_position
from compclip.trainer.sample_index import SampleIndex


@dataclass
class Pool:
    """Entries drawn `count` per batch: (source number, sample, negative ordinal or -1)."""
    source: np.ndarray
    sample: np.ndarray
    negative: np.ndarray
    count: int
    partners: bool
    number: int  # seeds the pool's permutations

    def __len__(self) -> int:
        return int(self.sample.shape[0])


def build_pools(sources: list[Source], indexes: list[SampleIndex], composer: Composer, batch_size: int,
                source_batch: Optional[list[int]], visit_each_negative: bool,
                keep: Optional[list[np.ndarray]] = None) -> list[Pool]:
    """The entries of each pool; `keep[i]` masks source i's samples (validation hold-out)."""
    per_source = []
    for i, index in enumerate(indexes):
        samples = np.arange(len(index))
        if keep is not None:
            samples = samples[keep[i]]
        negatives = np.full(samples.shape, -1, dtype=np.int64)
        if visit_each_negative:
            counts = index.eligible_negatives(composer.kinds, composer.subkinds)[samples]
            samples = np.repeat(samples, counts)
            starts = np.repeat(np.cumsum(counts) - counts, counts)
            negatives = np.arange(samples.shape[0]) - starts
        per_source.append((np.full(samples.shape, i, dtype=np.int64), samples, negatives))
    if source_batch is None:
        return [Pool(*(np.concatenate(parts) for parts in zip(*per_source)), batch_size, True, 0)]
    return [Pool(*per_source[i], count, carries_partner(sources[i], composer.partner), i)
            for i, count in enumerate(source_batch)]


class ExactStream(IterableDataset):
    """Yields `(Batch, info)` like `trainer.data.ShardStream`, for exact-pass epochs.

    `fixed_epoch` (validation) makes every epoch the same: the same batches, composed the same way."""

    def __init__(self, sources: list[Source], indexes: list[SampleIndex], composer: Composer, seed: int,
                 rank: int, world_size: int, num_streams: int, max_bad_fraction: float,
                 source_batch: Optional[list[int]] = None, visit_each_negative: bool = False,
                 keep: Optional[list[np.ndarray]] = None, fixed_epoch: Optional[int] = None, tag: str = "train"):
        if visit_each_negative and composer.negatives_per_image != 1:
            raise DataError(f"data.visit_each_negative needs negatives.per_image=1 "
                            f"(got {composer.negatives_per_image})")
        self.sources, self.indexes = sources, indexes
        self.pools = build_pools(sources, indexes, composer, composer.batch_size, source_batch,
                                 visit_each_negative, keep)
        if source_batch is not None:  # anchors of partner-bearing sources come first and get partners
            anchors = sum(p.count for p in self.pools if p.partners)
            composer = replace(composer, partner_anchors=anchors)
        self.composer, self.seed, self.tag = composer, seed, tag
        self.rank, self.world_size, self.num_streams = rank, world_size, max(1, num_streams)
        self.max_bad_fraction, self.fixed_epoch = max_bad_fraction, fixed_epoch
        for pool in self.pools:
            if len(pool) == 0:
                where = sources[pool.number].entry if source_batch is not None else "data.train_shards"
                raise DataError(f"{where}: no samples to train on ({tag})")
        first = self.pools[0]
        self.available_batches = len(first) // (first.count * world_size)  # per rank per epoch
        self.batches_per_epoch = self.available_batches
        self.set_position(0, 0, {})

    def set_position(self, epoch: int, batch_in_epoch: int, streams: dict) -> None:
        set_position(self, epoch, batch_in_epoch, streams)

    # --- which entry goes where -----------------------------------------------------------------
    def _permutation(self, pool: Pool, cycle: int) -> np.ndarray:
        key = (self.seed, pool.number, cycle, 0 if self.tag == "train" else 1)
        cache = self.__dict__.setdefault("_perms", {})
        if key not in cache:
            if len(cache) > 2 * len(self.pools):
                cache.clear()
            cache[key] = np.random.default_rng(list(key)).permutation(len(pool))
        return cache[key]

    def entry(self, pool: Pool, epoch: int, batch: int, position: int) -> int:
        """The pool entry at `position` of rank-local batch `batch` of `epoch`."""
        slot = (batch * self.world_size + self.rank) * pool.count + position
        if pool.number == self.pools[0].number:  # the primary pool: one permutation per epoch
            return int(self._permutation(pool, epoch)[slot])
        q = (epoch * self.batches_per_epoch * self.world_size) * pool.count + slot
        return int(self._permutation(pool, q // len(pool))[q % len(pool)])

    def batch_entries(self, epoch: int, batch: int) -> list[tuple[Pool, int]]:
        ordered = sorted(self.pools, key=lambda p: not p.partners)  # partner-bearing pools first
        return [(pool, self.entry(pool, epoch, batch, t)) for pool in ordered for t in range(pool.count)]

    # --- iteration ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[Any, dict]]:
        stream, batches = next_iteration(self)
        epoch = self.epoch if self.fixed_epoch is None else self.fixed_epoch
        state = {"consumed": 0, "bad": 0, "last_error": ""}
        state.update(self.streams.get(stream, {}))
        handles: dict = {}
        try:
            for n, batch in enumerate(batches):
                items = self._compose(epoch, batch, state, stream, handles)
                if n == len(batches) - 1:
                    check_bad(self.rank, stream, state, self.max_bad_fraction, force=True)
                yield self.composer.collate(items), {"stream": stream, **state}
        finally:
            for handle in handles.values():
                handle.close()

    def _compose(self, epoch: int, batch: int, state: dict, stream: int, handles: dict) -> list:
        items = []
        for position, (pool, entry) in enumerate(self.batch_entries(epoch, batch)):
            with_partner = pool.partners and len(items) < self.composer.num_partners
            for attempt in range(1000):
                rng = random.Random(f"{self.tag}/{self.seed}/{epoch}/{self.rank}/{batch}/{position}/{attempt}")
                source, sample = int(pool.source[entry]), int(pool.sample[entry])
                negative = int(pool.negative[entry])
                index = self.indexes[source]
                state["consumed"] += 1
                try:
                    raw = index.read(sample, handles)
                    items.append(self.composer.item(raw, rng, str(index.directory), with_partner,
                                                    negative if negative >= 0 else None))
                    break
                except (BadSample, OSError, tarfile.TarError) as err:
                    state["bad"] += 1
                    state["last_error"] = f"{index.url(sample)}: {err}"
                    check_bad(self.rank, stream, state, self.max_bad_fraction, force=False)
                    entry = rng.randrange(len(pool))  # a replacement from the same pool
            else:
                raise DataError(f"data: no usable sample found for batch {batch}; last: {state['last_error']}")
        return items
