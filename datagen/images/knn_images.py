"""The images of a shard set for the kNN embedding pass (`datagen.images.knn.embed_shard_set`): read,
hashed, decoded and preprocessed in torch DataLoader workers, delivered in row order.

Each item is a dict: `row` (position in the set), `key`, `hash` (`image_hash` of
the image bytes), `image` (decoded RGB, then the scorer's preprocessing) or `error` (why the
sample has no decodable image: it is then marked invalid, never dropped). With W workers,
worker w handles rows w, w+W, ...; a DataLoader takes one item from each worker in turn, so
the items come out in row order, exactly as with no worker.
"""
from __future__ import annotations

import hashlib
import os
from typing import Callable, Iterator, Optional, Sequence

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from compclip.shardset.imageio import BadImage, decode_image
from compclip.shardset.schema import IMAGE_EXTS
from compclip.shardset.shards import iter_raw_samples


def image_hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


def default_workers() -> int:
    return min(4, os.cpu_count() or 1)


class ShardImages(IterableDataset):
    """Every sample of the shards `urls` in order; a worker decodes only its own rows."""

    def __init__(self, urls: Sequence[str], transform: Optional[Callable] = None):
        self.urls, self.transform = list(urls), transform

    def __iter__(self) -> Iterator[dict]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        row = -1
        for url in self.urls:
            for raw in iter_raw_samples(url):
                row += 1
                if row % workers != worker:
                    continue
                key = raw["__key__"]
                ext = next((e for e in IMAGE_EXTS if e in raw), None)
                data = raw.get(ext, b"") if ext else b""
                item = {"row": row, "key": key, "hash": image_hash(data), "image": None, "error": None}
                try:
                    if ext is None:
                        raise BadImage(f"sample '{key}' in {url}: no image member")
                    image = decode_image(data, f"sample '{key}' in {url}", "RGB")
                    item["image"] = self.transform(image) if self.transform else image
                except BadImage as err:
                    item["error"] = str(err)
                yield item


def _as_is(item: dict) -> dict:
    return item


def image_loader(urls: Sequence[str], transform: Optional[Callable] = None,
                 workers: int = 0) -> DataLoader:
    """Items of `ShardImages` one by one (no batching: the caller batches valid images)."""
    return DataLoader(ShardImages(urls, transform), batch_size=None, num_workers=workers,
                      collate_fn=_as_is, prefetch_factor=8 if workers else None)
