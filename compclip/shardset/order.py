"""The order samples are written in: a seeded global permutation, recorded in the manifest.

Every shard set datagen writes is in a seeded random order, so neighbouring samples are
unrelated (the 5 captions of a COCO image do not sit together, and a trainer's shuffle buffer
does not put them in one batch). Writers permute their input items before writing:

    perm = permutation(n, seed)              # position p writes input item perm[p]
    items = shuffled(iterable, seed)         # the same for items that fit in memory
    ShardSetWriter(out, ..., order=shuffled_order(seed))

The permutation depends on (seed, n) alone, so the writer's resume contract holds: a resumed
run skips `inputs_done` positions of the same permutation. The manifest records
`"order": {"shuffled": true, "seed": S}`; `ShardSetWriter` refuses to resume a set written with
another order (`check_order`). A set rewritten sample by sample from another set (kNN
neighbours, generated images, negatives added to a shard set) keeps its source's order and says
so: `inherited_order(src)` = the source's record plus `"inherited_from": <src>`. A sharded set
too large for memory is put in a new order by `compclip.shardset.shuffle` (two passes, bounded memory),
which records `"method": "buckets"` and its bucket count. `order_for_input(path, seed)` picks
the rule for a writer that reads a file or a shard set (the negatives pipeline).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterable, Optional, TypeVar

import numpy as np

from compclip.shardset.manifest import read_manifest
from compclip.errors import CompclipError

T = TypeVar("T")
ORDER_KEY = "order"


class OrderMismatch(CompclipError, ValueError):
    """A resume asked for another order than the one the set was written in."""


def rng(seed: int, purpose: str = "order") -> np.random.Generator:
    """A generator for `seed` and a purpose string; other purposes give independent streams."""
    salt = int.from_bytes(hashlib.blake2b(purpose.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, salt])


def permutation(n: int, seed: int) -> np.ndarray:
    """Position p of the written order holds input item `permutation(n, seed)[p]`."""
    return rng(seed).permutation(n)


def shuffled(items: Iterable[T], seed: int) -> list[T]:
    """The items (read into memory) in the seeded order of `permutation(len, seed)`."""
    items = list(items)
    return [items[i] for i in permutation(len(items), seed)]


def shuffled_order(seed: int, **extra: Any) -> dict[str, Any]:
    """The manifest record of a set written in `permutation(n, seed)` order."""
    return {"shuffled": True, "seed": int(seed), **extra}


def input_order() -> dict[str, Any]:
    """The record of a set written in input order (only on request, e.g. a bench's baseline)."""
    return {"shuffled": False}


def inherited_order(src: str | Path, manifest: Optional[dict] = None) -> dict[str, Any]:
    """The record of a set copied sample by sample, in order, from the shard set `src`."""
    if manifest is None:
        manifest = read_manifest(src)
    record = dict(manifest.get(ORDER_KEY) or {"shuffled": False})
    record.pop("inherited_from", None)
    return {**record, "inherited_from": str(src)}


def check_order(manifest: dict, wanted: dict[str, Any], where: str | Path) -> None:
    """Raise `OrderMismatch` (one line) when a set with complete shards has another order
    (a set written before orders were recorded counts as input order)."""
    have = manifest.get(ORDER_KEY) or input_order()
    if not manifest.get("shards") or have == wanted:
        return
    raise OrderMismatch(f"{where}: written in order {describe(have)}; this run asks for "
                        f"{describe(wanted)}: resume with the same seed, or write to a new folder")


def describe(record: dict[str, Any]) -> str:
    if not record.get("shuffled"):
        text = "input order"
    else:
        text = f"shuffled with seed {record.get('seed')}"
    return text + (f" (inherited from {record['inherited_from']})" if "inherited_from" in record else "")


def order_for_input(input_path: str | Path, seed: int) -> tuple[dict[str, Any], bool]:
    """(manifest record, permute in memory?) for a writer reading `input_path`: a shard set
    folder keeps its own order (rewritten sample by sample, inherited); a single `.tar` shard
    is kept in its order; any other input (captions JSON, CSV: read into memory) is permuted."""
    path = Path(input_path)
    if path.is_dir():
        return inherited_order(path), False
    if path.suffix.lower() == ".tar":
        return {"shuffled": False, "inherited_from": str(path)}, False
    return shuffled_order(seed), True
