"""Tiny synthetic shard sets for the trainer's tests and benchmark (not used in training).

`write_fixture_shards(dir, n, ...)` writes `n` samples of coloured-square scenes with captions,
optionally hard negatives (swap / replace / add), a partner per sample (`generated` or
`mirrored`) and K neighbours with a `keys.tsv` index, through `compclip.shardset.shards.ShardSetWriter`,
so the manifest's `features` say what the set carries (`rules`: the `features.rules` recorded,
for `negatives.rules`). `corrupt` samples get undecodable image bytes (the trainer must skip and
count them). `captions_per_image` > 1 gives runs of consecutive samples the same `image_id` (as
COCO's 5 captions per image in Karpathy order). `write_negative_shards(dir, negatives, ...)`
writes one sample per given list of hard negatives (captions `caption <i>`), for tests that need
exact negatives. `train_in_process(argv)` runs `trainer/train.py`'s `main` in this process and
resets accelerate's singletons afterwards, so tests can run it again.
"""
from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Optional

from PIL import Image

from compclip.shardset.schema import Negative, Neighbour, Partner, ShardSample
from compclip.shardset.shards import KeyIndex, ShardSetWriter

COLOURS = {"red": (220, 30, 30), "green": (30, 180, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}


def scene_jpeg(left: str, right: str, size: int = 32) -> bytes:
    image = Image.new("RGB", (size, size), (245, 245, 245))
    half = size // 2
    image.paste(COLOURS[left], (2, half // 2, half - 2, half + half // 2))
    image.paste(COLOURS[right], (half + 2, half // 2, size - 2, half + half // 2))
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_fixture_shards(directory: str | Path, n: int = 64, per_shard: int = 16, negatives: bool = True,
                         partner: Optional[str] = None, neighbours: int = 0, corrupt: int = 0,
                         seed: int = 0, prefix: str = "s", captions_per_image: int = 1,
                         rules: Optional[str] = None) -> Path:
    directory = Path(directory)
    rng = random.Random(seed)
    names = list(COLOURS)
    features = {"negatives": negatives, "partner": partner, "neighbours": neighbours}
    if rules is not None:
        features["rules"] = rules
    with ShardSetWriter(directory, max_count=per_shard, features=features) as writer:
        for i in range(n):
            left, right = rng.sample(names, 2)
            caption = f"a {left} square left of a {right} square"
            swapped = f"a {right} square left of a {left} square"
            other = rng.choice([c for c in names if c not in (left, right)])
            negs = [Negative(swapped, "swap", "att", "fixture"),
                    Negative(f"a {other} square left of a {right} square", "replace", "att", "fixture"),
                    Negative(f"a {left} square left of a {right} square and a {other} one", "add", "obj", "fixture")]
            sample = ShardSample(key=f"{prefix}{i:05d}", caption=caption, image=scene_jpeg(left, right),
                                 meta={"source": "fixture", "index": i, "image_id": i // captions_per_image},
                                 negatives=negs[: rng.randint(1, 3)] if negatives else [])
            if corrupt and i % max(1, n // corrupt) == 0 and i // max(1, n // corrupt) < corrupt:
                sample.image = b"\xff\xd8 this is not a jpeg"
            if partner == "generated":
                sample.partner = Partner(scene_jpeg(right, left), swapped, "generated", negative_index=0)
            elif partner == "mirrored":
                sample.partner = Partner(scene_jpeg(right, left), f"a {right} square left of a {left} square",
                                         "mirrored")
            if neighbours:
                sample.neighbours = [Neighbour(f"{prefix}{(i + d) % n:05d}", 1.0 / d) for d in range(1, neighbours + 1)]
            writer.add(sample)
    if neighbours:
        KeyIndex.build(directory)
    return directory


def write_negative_shards(directory: str | Path, negatives: list[list[Negative]], neighbours: int = 0,
                          per_shard: int = 16, rules: Optional[str] = None, prefix: str = "n") -> Path:
    """Sample i (key `<prefix><i:05d>`, caption `caption <i>`) has the hard negatives `negatives[i]`
    (an empty list: no `neg.json`) and K=`neighbours` neighbours i+1, i+2, ... (mod n) with `keys.tsv`."""
    directory, n = Path(directory), len(negatives)
    names = list(COLOURS)
    features = {"negatives": True, "partner": None, "neighbours": neighbours}
    if rules is not None:
        features["rules"] = rules
    with ShardSetWriter(directory, max_count=per_shard, features=features) as writer:
        for i, negs in enumerate(negatives):
            sample = ShardSample(key=f"{prefix}{i:05d}", caption=f"caption {i}",
                                 image=scene_jpeg(names[i % 4], names[(i + 1) % 4]),
                                 meta={"source": "fixture", "image_id": i}, negatives=list(negs))
            sample.neighbours = [Neighbour(f"{prefix}{(i + d) % n:05d}", 1.0 / d) for d in range(1, neighbours + 1)]
            writer.add(sample)
    if neighbours:
        KeyIndex.build(directory)
    return directory


def train_in_process(argv: list) -> int:
    """`trainer.train.main(argv)` in this process; accelerate's process-wide state is reset after."""
    from accelerate.state import AcceleratorState, GradientState

    from trainer import train
    try:
        return train.main([str(a) for a in argv])
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
