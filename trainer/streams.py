"""The recipe's data -> the training stream and the validation stream.

Training: `data.sampling: resampled` streams shards with replacement through a shuffle buffer
(`trainer.data.ShardStream`, for data at scale); `exact` makes every epoch one pass over the data
in a global random order (`trainer.exact.ExactStream`, what the papers' DataLoaders did).
`data.train_transform: eval` composes training images with the evaluation transform (resize +
centre crop, as BiVLC trained) instead of open_clip's random-resized-crop training transform.

Validation (`data.val_shards`, or `data.val_fraction` of the training images held out by image
id): a fixed set of batches, composed exactly like training batches but with the evaluation
transform, the same at every epoch, read in the main process.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from compclip.trainer.compose import Composer
from compclip.trainer.data import DataError, ShardStream, Source, carries_partner, held_out
from compclip.trainer.exact import ExactStream
from compclip.trainer.recipe import Recipe
from compclip.trainer.sample_index import SampleIndex
from compclip.trainer.transforms import split_normalize


def require_folders(sources: list[Source], key: str) -> None:
    """Exact sampling and validation read samples by position: every source must be a shard-set folder."""
    for i, src in enumerate(sources):
        if src.directory is None or not Path(src.entry).is_dir():  # a list of tars is not a whole set
            raise DataError(f"{key}[{i}] '{src.entry}': exact sampling and validation read samples by "
                            f"position and need a shard-set folder (with manifest.json), not a list of tars")


def load_indexes(sources: list[Source], key: str, progress: bool) -> list[SampleIndex]:
    require_folders(sources, key)
    return [SampleIndex.load(src.directory, progress) for src in sources]


def make_composer(recipe: Recipe, loaded, train: bool) -> Composer:
    """The composer of training (or validation) batches; images leave it as uint8 tensors where
    the transform allows (`trainer.transforms`: the trainer normalises them on the device)."""
    d, n = recipe.data, recipe.negatives
    transform = loaded.preprocess_train if train and d.train_transform == "train" else loaded.preprocess
    transform, _ = split_normalize(transform)
    return Composer(transform, loaded.tokenizer, d.batch_size, d.partner, d.partners_per_batch, n.per_image,
                    n.per_partner, n.draw, tuple(n.kinds), tuple(n.subkinds) if n.subkinds else None,
                    draft_size=image_size(loaded.model) if d.jpeg_draft else None)


def image_size(model) -> Optional[int]:
    size = getattr(getattr(model, "visual", None), "image_size", None)
    return max(size) if isinstance(size, (tuple, list)) else size


def train_stream(recipe: Recipe, sources: list[Source], loaded, rank: int, world: int, progress: bool):
    """The training stream; its `batches_per_epoch` is set by the caller from the step count."""
    d = recipe.data
    composer = make_composer(recipe, loaded, train=True)
    if d.sampling == "resampled":
        return ShardStream(sources, d.source_weights, composer, recipe.seed, rank, world, 1, d.workers,
                           d.shuffle_buffer, d.max_bad_fraction, d.source_batch, hold_out=d.val_fraction)
    indexes = load_indexes(sources, "data.train_shards", progress)
    keep = [~held_out(ix.group, d.val_fraction) for ix in indexes] if d.val_fraction else None
    return ExactStream(sources, indexes, composer, recipe.seed, rank, world, d.workers, d.max_bad_fraction,
                       d.source_batch, d.visit_each_negative, keep)


def val_stream(recipe: Recipe, sources: list[Source], val_sources: Optional[list[Source]], loaded,
               rank: int, world: int, progress: bool) -> Optional[ExactStream]:
    """The validation stream, or None when the recipe has no validation data."""
    d = recipe.data
    if not val_sources and not d.val_fraction:
        return None
    composer = make_composer(recipe, loaded, train=False)
    if val_sources:
        chosen, keep, source_batch = val_sources, None, None
        if not all(carries_partner(s, composer.partner) for s in val_sources):
            composer = replace(composer, partner="none")  # validation sets without the partner
        indexes = load_indexes(chosen, "data.val_shards", progress)
    else:
        chosen, source_batch = sources, d.source_batch
        indexes = load_indexes(chosen, "data.train_shards", progress)
        keep = [held_out(ix.group, d.val_fraction) for ix in indexes]
    stream = ExactStream(chosen, indexes, composer, recipe.seed, rank, world, 0, 1.0, source_batch,
                         False, keep, fixed_epoch=0, tag="val")
    if stream.available_batches == 0:
        raise DataError(f"data: the validation data holds less than one batch of {d.batch_size} per process")
    stream.batches_per_epoch = min(stream.available_batches, d.val_batches or stream.available_batches)
    return stream
