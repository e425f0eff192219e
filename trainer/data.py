"""Streaming training data: shard sets -> deterministic, resumable streams of `Batch`es.

Sources (`data.train_shards` entries) are shard-set folders (with `manifest.json`), brace
patterns or tar paths. Each rank runs `data.workers` independent *streams* (one per DataLoader
worker, or one in-process when workers=0). A stream is a pure function of
(seed, epoch, rank, stream id):

    shards resampled with replacement (source picked by `source_weights`, then a shard of it)
    -> tar samples (webdataset `tarfile_samples`) -> shuffle buffer -> compose -> B items -> Batch

so data is split across ranks and workers by seeding, as open_clip's resampled mode does, and an
epoch is a fixed number of batches (`samples_per_epoch` over the global batch). The randomness of
one sample's composition (augmentation, neighbour, negatives) is seeded by its position in its
stream, so the data a run sees depends only on the seed and the position: resuming skips the
raw samples each stream had consumed (no decoding) and continues bit-for-bit.

Exact mixes (`data.source_batch`): a stream then keeps one such reader (shards -> samples ->
shuffle buffer, with its own RNGs) per source and fills every batch with `source_batch[i]` items
from source i. Anchors of sources whose manifest carries the recipe's partner come first and get
partners (the layout gives partners to the first P anchors); the others get none. The position is
then counted per source (`consumed_by_source`), and resuming skips each reader's share.

Batches come round-robin from the streams (DataLoader order), so batch i of an epoch is from
stream i % workers; on resume the streams are rotated so the next batch comes from the right one.

Bad input: a sample that fails to decode (`BadSample`) is skipped and counted; a shard that
cannot be opened or read counts as its manifest sample count. A stream stops with `DataError`
once its bad share exceeds `data.max_bad_fraction` (checked after 100 samples and at the end of
each epoch's quota).

Pre-flight (`trainer.train.preflight`): `check_features` fails when a manifest lacks what the
recipe asks for (partners, negatives, `negatives.rules`); `padding_warning` estimates from a
source's first samples the share of negative columns that will be padding.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

import braceexpand
import torch
import webdataset as wds
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from compclip.shardset.shards import KEY_INDEX, MANIFEST, iter_raw_samples, read_manifest, shard_urls
from compclip.errors import DataError
from compclip.trainer.compose import BadSample, Composer, image_key, negative_allowed, stable_id

MIN_SEEN_FOR_BAD_CHECK = 100
PADDING_SAMPLES = 1000  # samples of each source read to estimate its share of padding columns
PADDING_WARN = 0.01  # pre-flight warns above this share
HOLD_OUT_MODULUS = 1_000_000


def held_out(groups, fraction: float) -> np.ndarray:
    """The images held out of training for validation (`data.val_fraction`), chosen by image id
    (`trainer.compose.image_key`), so every caption of a held-out image is held out and the choice
    is the same for every seed and sampling mode."""
    return (np.asarray(groups, dtype=np.int64) % HOLD_OUT_MODULUS) < round(fraction * HOLD_OUT_MODULUS)


def raw_image_id(raw: dict) -> int:
    """The image id of a raw sample, from its `json` member (as the sample index computes it)."""
    try:
        meta = json.loads(raw.get("json") or b"{}")
    except ValueError:
        meta = {}
    return stable_id(image_key(meta if isinstance(meta, dict) else {}, raw.get("__key__", "")))


# unusable training data raises `DataError` (compclip.errors); the message is one line naming
# the source, key or sample


@dataclass
class Source:
    entry: str  # as written in the recipe
    urls: list[str]
    directory: Optional[str]  # the shard-set folder, when known (manifest, keys.tsv)
    manifest: Optional[dict]


# where docs/data_prep.md tells how to build a shard set, by a word of its folder name
BUILD_HINTS = (
    ("trohn", "docs/data_prep.md section 2 (`python -m datagen prepare trohn ...`)"),
    ("leftright", "docs/data_prep.md section 3 (`python -m datagen prepare cocobank` + `python -m datagen stitch ...`)"),
    ("coco", "docs/data_prep.md section 1 (`python -m datagen prepare coco ...`)"),
    ("world", "docs/world.md (`python -m datagen world build --out DIR`)"),
)


def build_hint(entry: str) -> str:
    name = Path(entry).name.lower()
    return next((hint for word, hint in BUILD_HINTS if word in name), "docs/data_prep.md")


def check_complete(where: str, directory: str, manifest: dict, allow_incomplete: bool) -> None:
    """A shard set whose writer has not finished (manifest `complete: false`) is refused unless allowed."""
    if manifest.get("complete", True) or allow_incomplete:
        return
    shards = manifest.get("shards") or []
    samples = sum(s.get("samples", 0) for s in shards)
    raise DataError(f"{where}: shard set {directory} is unfinished ({MANIFEST} says complete: false; "
                    f"{len(shards)} shard(s), {samples} samples so far); rerun the command that wrote it to "
                    f"finish it (it resumes), or set data.allow_incomplete=true to train on what is there")


def resolve_sources(entries: list[str], key: str = "data.train_shards",
                    allow_incomplete: bool = False) -> list[Source]:
    sources = []
    for i, entry in enumerate(entries):
        where = f"{key}[{i}] '{entry}'"
        path = Path(entry)
        if not path.exists() and not any(c in entry for c in "{*") and not entry.endswith(".tar"):
            raise DataError(f"{where}: shard set not found; build it as {build_hint(entry)} says")
        if path.is_dir():
            if not (path / MANIFEST).is_file():
                raise DataError(f"{where}: folder has no {MANIFEST}; is it a shard set?")
            manifest = read_manifest(path)
            check_complete(where, str(path), manifest, allow_incomplete)
            urls = shard_urls(path)
            directory = str(path)
        else:
            urls = list(braceexpand.braceexpand(entry))
            missing = [u for u in urls if not Path(u).is_file()]
            if missing:
                raise DataError(f"{where}: shard {missing[0]} not found ({len(missing)} of {len(urls)} missing)")
            parent = Path(urls[0]).parent
            directory = str(parent) if (parent / MANIFEST).is_file() else None
            manifest = read_manifest(parent) if directory else None
            if manifest is not None:
                check_complete(where, directory, manifest, allow_incomplete)
        if not urls:
            raise DataError(f"{where}: no shards")
        sources.append(Source(entry, urls, directory, manifest))
    return sources


def _features(src: Source) -> dict:
    return (src.manifest or {}).get("features") or {}


def carries_partner(src: Source, partner: str) -> bool:
    """Whether a source's manifest says its samples have the recipe's kind of partner."""
    if partner == "neighbour":
        return bool(_features(src).get("neighbours"))
    return partner != "none" and _features(src).get("partner") == partner


def check_features(sources: list[Source], partner: str, negatives_per_image: int, mixed: bool = False,
                   negatives_per_partner: int = 0, rules: Optional[str] = None) -> None:
    """Fail before training when the recipe asks for something a shard set does not carry.

    `mixed` (`data.source_batch`): a feature is asked only of the sources whose manifest has it
    (the other sources' anchors go without partner / with padding negatives), but one must have it.
    `rules` (`negatives.rules`): every source with negatives must have been made by these rules.
    """
    asked = _negatives_key(negatives_per_image, negatives_per_partner)
    if mixed:
        if partner != "none" and not any(carries_partner(s, partner) for s in sources):
            feature = "features.neighbours" if partner == "neighbour" else f"features.partner={partner!r}"
            raise DataError(f"data.partner={partner} but no data.train_shards source's {MANIFEST} has "
                            f"{feature}")
        if asked and not any(_features(s).get("negatives") for s in sources):
            raise DataError(f"{asked} but no data.train_shards source's "
                            f"{MANIFEST} has hard negatives (features.negatives)")
    for i, src in enumerate(sources):
        if mixed:
            _check_source(i, src, partner if carries_partner(src, partner) else "none", "")
        else:
            _check_source(i, src, partner, asked)
        if rules is not None:
            _check_rules(i, src, rules)


def _negatives_key(per_image: int, per_partner: int) -> str:
    """The recipe key that asks for hard negatives, as messages name it ("" when none does)."""
    if per_image:
        return f"negatives.per_image={per_image}"
    return f"negatives.per_partner={per_partner}" if per_partner else ""


def _check_rules(i: int, src: Source, rules: str) -> None:
    feats = _features(src)
    if not feats.get("negatives"):
        return
    made_by = feats.get("rules", "compclip")
    if made_by != rules:
        absent = "" if "rules" in feats else " (absent: sets written before the key were made by the compclip rules)"
        raise DataError(f"data.train_shards[{i}] '{src.entry}': negatives.rules={rules} but the shard set's "
                        f"{MANIFEST} has features.rules={made_by}{absent}; rebuild its negatives with "
                        f"`python -m datagen negatives generate --rules {rules}` (docs/data_prep.md)")


def _check_source(i: int, src: Source, partner: str, asked: str) -> None:
    """`asked`: the recipe key asking for negatives (`_negatives_key`), "" when none is asked of it."""
    where = f"data.train_shards[{i}] '{src.entry}'"
    if src.manifest is None:
        if partner == "neighbour":
            raise DataError(f"{where}: data.partner=neighbour needs a shard set folder with "
                            f"{MANIFEST} and {KEY_INDEX}; none found beside the shards")
        return
    feats = _features(src)
    if asked and not feats.get("negatives"):
        raise DataError(f"{where}: {asked} but the shard set's "
                        f"{MANIFEST} says it has no hard negatives (features.negatives)")
    if partner == "neighbour":
        if not feats.get("neighbours"):
            raise DataError(f"{where}: data.partner=neighbour but the shard set's {MANIFEST} "
                            f"says it has no neighbours (features.neighbours)")
        if not (Path(src.directory) / KEY_INDEX).is_file():
            raise DataError(f"{where}: data.partner=neighbour needs {src.directory}/{KEY_INDEX} "
                            f"(build it with compclip.shardset.shards.KeyIndex.build)")
    elif partner in ("generated", "mirrored") and feats.get("partner") != partner:
        raise DataError(f"{where}: data.partner={partner} but the shard set's {MANIFEST} says "
                        f"features.partner={feats.get('partner')!r}")


def eligible_negative_counts(urls: list[str], kinds, subkinds, limit: int = PADDING_SAMPLES) -> list[int]:
    """How many negatives of the given kinds / sub-kinds each of the first `limit` samples of the
    shards `urls` has (read in order; images are read past, never decoded; a `neg.json` that is not
    valid JSON counts as none)."""
    counts: list[int] = []
    for url in urls:
        for raw in iter_raw_samples(url):
            try:
                negatives = json.loads(raw.get("neg.json") or b"[]")
            except ValueError:
                negatives = []
            counts.append(sum(negative_allowed(n.get("kind"), n.get("subkind"), kinds, subkinds)
                              for n in negatives if isinstance(n, dict)))
            if len(counts) == limit:
                return counts
    return counts


def padding_fraction(counts: list[int], per_image: int, per_partner: int = 0, partners: float = 1.0) -> float:
    """The expected share of padding among a batch's negative columns when anchors have `counts`
    eligible negatives each (`eligible_negative_counts`) and neighbour partners, `partners` per
    anchor (P / B), are drawn from the same samples."""
    columns = len(counts) * (per_image + partners * per_partner)
    if not columns:
        return 0.0
    missing = sum(max(per_image - c, 0) + partners * max(per_partner - c, 0) for c in counts)
    return missing / columns


def padding_warning(i: int, src: Source, kinds, subkinds, per_image: int, per_partner: int = 0,
                    partners: float = 1.0) -> Optional[str]:
    """Pre-flight's warning line when more than `PADDING_WARN` of the negative columns a source
    gives would be padding, estimated on its first samples; None otherwise."""
    if not _features(src).get("negatives"):
        return None
    counts = eligible_negative_counts(src.urls, kinds, subkinds)
    fraction = padding_fraction(counts, per_image, per_partner, partners)
    if fraction <= PADDING_WARN:
        return None
    short = [f"{sum(c < per for c in counts):,} have fewer than negatives.{key}={per}"
             for key, per in (("per_image", per_image), ("per_partner", per_partner if partners else 0)) if per]
    chosen = f"kinds=[{', '.join(kinds)}] subkinds=[{', '.join(subkinds) if subkinds else 'all'}]"
    return (f"warning: data.train_shards[{i}] '{src.entry}': {100 * fraction:.1f} % of the negative columns will "
            f"be padding ({len(counts):,} samples read: {', '.join(short)} eligible negatives under {chosen}); "
            f"rebuild with --mode all, see docs/data_prep.md")


def shuffled(samples: Iterator, bufsize: int, rng: random.Random) -> Iterator:
    """A shuffle buffer driven by an explicit RNG (webdataset's draws from a global one)."""
    buf: list = []
    for sample in samples:
        buf.append(sample)
        if len(buf) <= bufsize:
            continue
        i = rng.randrange(len(buf))
        buf[i], buf[-1] = buf[-1], buf[i]
        yield buf.pop()
    rng.shuffle(buf)
    yield from buf


class ShardStream(IterableDataset):
    """Yields `(Batch, info)`; info = the stream's position and bad-sample counts.

    `source_batch` (one count per source, summing to the composer's B) makes every batch an exact
    mix; the stream then gives the composer `partner_anchors` = the anchors of partner-bearing
    sources, so its `num_partners` matches the batch.
    """

    def __init__(self, sources: list[Source], weights: Optional[list[float]], composer: Composer,
                 seed: int, rank: int, world_size: int, batches_per_epoch: int, num_streams: int,
                 shuffle_buffer: int, max_bad_fraction: float, source_batch: Optional[list[int]] = None,
                 hold_out: float = 0.0):
        self.sources, self.weights, self.composer = sources, weights or [1.0] * len(sources), composer
        self.source_batch = source_batch
        if source_batch is not None:
            n, b = len(sources), composer.batch_size
            if len(source_batch) != n or min(source_batch) < 1 or sum(source_batch) != b:
                raise DataError(f"data.source_batch {source_batch}: needs one count >= 1 per source ({n}) "
                                f"summing to batch_size {b}")
            self.bears_partner = [carries_partner(s, composer.partner) for s in sources]
            partner_anchors = sum(count for count, bears in zip(source_batch, self.bears_partner) if bears)
            self.composer = replace(composer, partner_anchors=partner_anchors)
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.batches_per_epoch, self.num_streams = batches_per_epoch, max(1, num_streams)
        self.shuffle_buffer, self.max_bad_fraction = shuffle_buffer, max_bad_fraction
        self.hold_out = hold_out  # data.val_fraction: these images are skipped (they validate)
        self._dir_of = {u: s.directory for s in sources for u in s.urls}
        self._samples_of = {}
        for s in sources:
            for shard in (s.manifest or {}).get("shards", []):
                self._samples_of[str(Path(s.directory) / shard["name"])] = shard["samples"]
        self.set_position(0, 0, {})

    def set_position(self, epoch: int, batch_in_epoch: int, streams: dict) -> None:
        """Where the next iteration starts: epoch, batches done in it, and each stream's counters."""
        set_position(self, epoch, batch_in_epoch, streams)

    def _tag(self, what: str, stream: int) -> str:
        return f"{what}/{self.seed}/{self.epoch}/{self.rank}/{stream}"

    def __iter__(self) -> Iterator[tuple[Any, dict]]:
        stream, batches = next_iteration(self)
        if batches:
            yield from self._stream(stream, len(batches))

    def _reader(self, stream: int, state: dict, sources: list[Source], weights: Optional[list[float]],
                tag: str, skip: int) -> Iterator[tuple[int, dict, random.Random]]:
        """Raw samples of a stream: shards of `sources` resampled by `weights` -> tar samples ->
        shuffle buffer, RNGs tagged by `tag`. Skips the first `skip` (consumed before a resume);
        yields (position, raw sample, the RNG of its composition)."""
        seen = 0  # raw samples read, skipped ones included

        def on_shard_error(err: Exception) -> bool:
            if seen >= skip:  # errors in the replayed prefix were counted the first time
                url = next((a for a in err.args if isinstance(a, str) and a in self._dir_of), "?")
                state["bad"] += self._samples_of.get(url, 1)
                state["shard_bad"] += self._samples_of.get(url, 1)
                state["last_error"] = f"shard {url}: {type(err).__name__}: {err.args[0] if err.args else ''}"
                self._check_bad(stream, state, force=False)
            return True

        def shard_urls(rng: random.Random) -> Iterator[dict]:
            while True:
                source = rng.choices(sources, weights=weights)[0]
                yield {"url": rng.choice(source.urls)}

        raw_samples = wds.tarfile_samples(shard_urls(random.Random(self._tag("shards", stream) + tag)),
                                          handler=on_shard_error)
        for raw in shuffled(raw_samples, self.shuffle_buffer, random.Random(self._tag("shuffle", stream) + tag)):
            seen += 1
            if self.hold_out and held_out([raw_image_id(raw)], self.hold_out)[0]:
                continue
            if seen > skip:
                yield seen, raw, random.Random(self._tag("item", stream) + f"{tag}/{seen}")

    def _stream(self, stream: int, quota: int) -> Iterator[tuple[Any, dict]]:
        state = {"consumed": 0, "bad": 0, "shard_bad": 0, "last_error": ""}
        state.update(self.streams.get(stream, {}))
        mixed = self.source_batch is not None
        if mixed:  # a reader per source, each skipping its own share on resume
            consumed = list(state.get("consumed_by_source") or [0] * len(self.sources))
            readers = [self._reader(stream, state, [src], None, f"/src{i}", consumed[i])
                       for i, src in enumerate(self.sources)]
            takes = list(zip(range(len(readers)), self.source_batch, self.bears_partner))
            takes.sort(key=lambda take: not take[2])  # partner-bearing sources fill the front of the batch
        else:  # one reader over all sources, each shard's source drawn by weight
            consumed = [state["consumed"]]
            readers = [self._reader(stream, state, self.sources, self.weights, "", consumed[0])]
            takes = [(0, self.composer.batch_size, True)]
        while True:
            items = []
            for k, count, partners in takes:  # (reader, items it gives each batch, with partners)
                want = len(items) + count
                for seen, raw, rng in readers[k]:
                    consumed[k] = seen
                    state["consumed"] = sum(consumed)
                    if mixed:
                        state["consumed_by_source"] = list(consumed)
                    with_partner = partners and len(items) < self.composer.num_partners
                    try:
                        items.append(self.composer.item(raw, rng, self._dir_of.get(raw.get("__url__")),
                                                        with_partner))
                    except BadSample as err:
                        state["bad"] += 1
                        state["last_error"] = str(err)
                        self._check_bad(stream, state, force=False)
                        continue
                    if len(items) == want:
                        break
            batch = self.composer.collate(items)
            quota -= 1
            if quota == 0:
                self._check_bad(stream, state, force=True)
            yield batch, {"stream": stream, **state}
            if quota == 0:
                return

    def _check_bad(self, stream: int, state: dict, force: bool) -> None:
        check_bad(self.rank, stream, state, self.max_bad_fraction, force)


def check_bad(rank: int, stream: int, state: dict, max_bad_fraction: float, force: bool) -> None:
    """Raise DataError when a stream's share of bad samples is above `data.max_bad_fraction`."""
    seen = state["consumed"] + state.get("shard_bad", 0)  # consumed counts bad samples too
    if not seen or (seen < MIN_SEEN_FOR_BAD_CHECK and not force):
        return
    share = state["bad"] / seen
    if share > max_bad_fraction:
        raise DataError(f"data: rank {rank} stream {stream}: {state['bad']} of {seen} samples bad "
                        f"({share:.1%}), above data.max_bad_fraction={max_bad_fraction}; "
                        f"last: {state['last_error']}")


def set_position(stream, epoch: int, batch_in_epoch: int, streams: dict) -> None:
    """Where a stream's next iteration starts (both stream classes)."""
    stream.epoch, stream.start_batch, stream.iterations = epoch, batch_in_epoch, 0
    stream.streams = {int(k): dict(v) for k, v in streams.items()}


def next_iteration(stream) -> tuple[int, range]:
    """Called at the start of every iteration (both stream classes); returns this worker's stream
    id and the epoch's batches it makes. The first iteration after `set_position` starts there;
    each later one is the next epoch from its start (persistent loader workers keep the copy of
    the stream they got at their first iteration and never see `set_position` again, so this is
    how they move from epoch to epoch in step with the main process). Batch i of an epoch comes
    from worker i mod W, and after a resume at batch b the workers are rotated by b."""
    if stream.iterations:
        stream.epoch, stream.start_batch, stream.streams = stream.epoch + 1, 0, {}
    stream.iterations += 1
    info = get_worker_info()
    worker, workers = (info.id, info.num_workers) if info else (0, 1)
    if workers != stream.num_streams:
        raise DataError(f"data: {workers} loader workers but the stream was built for {stream.num_streams}")
    first = stream.start_batch + worker
    return first % workers, range(first, stream.batches_per_epoch, workers)


def make_loader(stream, workers: int, seed: int, epoch: int = 0, persistent: bool = False) -> DataLoader:
    """A DataLoader over the streams; its own generator keeps the global torch RNG untouched.
    `persistent`: workers live across epochs (iterate the same loader once per epoch). Batches are
    pinned when a GPU is there, so the host-to-device copy can overlap compute. Workers ignore the
    stop signals (`trainer.stopsignals`): the main process acts on them."""
    from compclip.trainer.stopsignals import ignore_in_worker
    return DataLoader(stream, batch_size=None, num_workers=workers, pin_memory=torch.cuda.is_available(),
                      persistent_workers=persistent and workers > 0,
                      worker_init_fn=ignore_in_worker if workers else None,
                      generator=torch.Generator().manual_seed(seed * 1000 + epoch))
