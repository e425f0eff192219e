"""Synthetic image embeddings whose neighbour structure resembles CLIP's, for kNN benchmarks and
tests: `clip_like_embeddings` makes them, `neighbour_report` measures what they look like.

Model, chosen to match what is reported for CLIP ViT-B/32 image embeddings (all vectors share
a large common component, so random pairs have cosine ~0.4-0.5; the variance around it decays
roughly like a power law, with a few tens of effective dimensions; images come in topics and
near-identical scenes; the nearest neighbour's cosine lies in a narrow band ~0.8-0.9):

    x = normalise(sqrt(0.45) * m + t[topic] + s[scene] + e)

- `m`: one unit vector shared by every row (`MEAN_SHARE` = 0.45: random pairs' cosine);
- `t`, `s`, `e`: independent Gaussian offsets in the d - 1 dimensions orthogonal to `m`, each
  with the same spectrum (variance of the j-th principal direction ~ 1/j, `ALPHA`, in a random
  rotation: ~28 effective dimensions at d = 512) and total variance 0.20 (topic), 0.15 (scene)
  and 0.20 (item) (`LEVELS`): two rows of one scene have cosine ~0.80 on average, of one topic
  ~0.65, of two topics ~0.45, each with the spread of the offsets' dot products;
- `sqrt(n)/2` topics with log-normal popularity (sigma 1: some topics are much denser than
  others), `n/20` scenes (`SCENE_SIZE`), each in one topic drawn by popularity, rows drawn
  uniformly over scenes.

Measured (`neighbour_report`, 1,000 queries; `tests/test_clip_like.py` checks the bands at 20k):
nearest-neighbour cosine median 0.86, 5th-95th percentile 0.82-0.90, and cosine to random other
rows mean 0.46, standard deviation 0.11, at 20k, 250k and 1M rows alike.

Rows are generated in chunks of `CHUNK` (each chunk seeded from `seed` and its index): 1M-3M
rows need only the output array (float32, N x d x 4 bytes) plus ~2 KB per scene;
`write_clip_like` writes the same rows into a float16 .npy memmap instead.

    python bench/clip_like.py 100000        # prints neighbour_report of 100k rows
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

CHUNK = 65_536
MEAN_SHARE = 0.45  # squared norm of the shared component: random pairs' cosine
LEVELS = {"topic": 0.20, "scene": 0.15, "item": 0.20}  # variance of each offset
SCENE_SIZE = 20  # mean rows per scene
ALPHA = 1.0  # spectrum exponent: variance of principal direction j ~ j**-ALPHA


def _basis(d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(shared unit vector [d], spectrum-scaled basis [d-1, d]) from one random rotation."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    spectrum = np.arange(1, d, dtype=np.float64) ** -ALPHA
    spectrum /= spectrum.sum()
    return q[:, 0].astype(np.float32), (np.sqrt(spectrum)[:, None] * q[:, 1:].T).astype(np.float32)


def _offsets(rng: np.random.Generator, m: int, basis: np.ndarray, variance: float) -> np.ndarray:
    return (rng.standard_normal((m, len(basis)), dtype=np.float32) * np.float32(np.sqrt(variance))) @ basis


def clip_like_embeddings(n: int, d: int = 512, seed: int = 0) -> np.ndarray:
    """[n, d] float32, L2-normalised rows with CLIP-like neighbour structure (module docstring)."""
    out = np.empty((n, d), np.float32)
    for start, x in _row_chunks(n, d, seed):
        out[start:start + len(x)] = x
    return out


def write_clip_like(path: str | Path, n: int, d: int = 512, seed: int = 0,
                    dtype: str = "float16") -> np.ndarray:
    """The rows of `clip_like_embeddings(n, d, seed)` written chunk by chunk into an .npy memmap
    of `dtype` (as `datagen knn` stores embeddings), for sets larger than memory; returns it
    opened read-only."""
    out = np.lib.format.open_memmap(path, "w+", dtype, (n, d))
    for start, x in _row_chunks(n, d, seed):
        out[start:start + len(x)] = x
    out.flush()
    del out
    return np.load(path, mmap_mode="r")


def _row_chunks(n: int, d: int, seed: int):
    """(first row, rows [<= CHUNK, d] float32) in order."""
    if n < 1 or d < 2:
        raise ValueError(f"clip_like_embeddings needs n >= 1 and d >= 2, got n={n}, d={d}")
    rng = np.random.default_rng(seed)
    mean, basis = _basis(d, rng)
    n_topics = max(1, round(np.sqrt(n) / 2))
    n_scenes = max(1, n // SCENE_SIZE)
    popularity = rng.lognormal(0.0, 1.0, n_topics)
    topic_of_scene = rng.choice(n_topics, n_scenes, p=popularity / popularity.sum())
    scenes = _offsets(rng, n_topics, basis, LEVELS["topic"])[topic_of_scene]
    for start in range(0, n_scenes, CHUNK):  # in place, chunk by chunk: no second [scenes, d] array
        stop = min(n_scenes, start + CHUNK)
        scenes[start:stop] += _offsets(rng, stop - start, basis, LEVELS["scene"]) + np.sqrt(MEAN_SHARE) * mean
    for i, start in enumerate(range(0, n, CHUNK)):
        stop = min(n, start + CHUNK)
        chunk_rng = np.random.default_rng([seed, i])
        x = scenes[chunk_rng.integers(0, n_scenes, stop - start)]
        x += _offsets(chunk_rng, stop - start, basis, LEVELS["item"])
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        yield start, x


def neighbour_report(x: np.ndarray, sample: int = 1000, seed: int = 1, chunk: int = CHUNK) -> dict:
    """Measured neighbour structure of `x` (unit rows): percentiles of each sampled row's
    nearest-neighbour cosine (exact, against all rows but itself) and the mean, spread and
    percentiles of its cosine to random other rows."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(x), min(sample, len(x)), replace=False)
    queries = np.asarray(x[pick], np.float32)
    best = np.full(len(pick), -np.inf, np.float32)
    for start in range(0, len(x), chunk):
        sims = queries @ np.asarray(x[start:start + chunk], np.float32).T
        own = (pick >= start) & (pick < start + len(sims[0]))
        sims[np.flatnonzero(own), pick[own] - start] = -np.inf
        best = np.maximum(best, sims.max(1))
    others = rng.integers(0, len(x), len(pick))
    keep = others != pick
    random_cos = np.einsum("ij,ij->i", queries[keep], np.asarray(x[others[keep]], np.float32))
    qs = [5, 25, 50, 75, 95]
    return {"rows": len(x), "queries": len(pick),
            "nn_cosine": {f"p{q}": round(float(v), 3) for q, v in zip(qs, np.percentile(best, qs))},
            "random_cosine": {"mean": round(float(random_cos.mean()), 3),
                              "std": round(float(random_cos.std()), 3),
                              **{f"p{q}": round(float(v), 3) for q, v in zip(qs, np.percentile(random_cos, qs))}}}


if __name__ == "__main__":
    print(json.dumps(neighbour_report(clip_like_embeddings(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)),
                     indent=1))
