"""The CLIP-like embeddings the approximate kNN is measured on (bench/clip_like.py): unit rows,
the neighbour structure the docstring states (measured by `neighbour_report`), the same rows
in memory and in a float16 memmap."""
import numpy as np

from bench.clip_like import clip_like_embeddings, neighbour_report, write_clip_like


def test_rows_are_unit_float32_and_follow_the_seed():
    x = clip_like_embeddings(3000, d=64, seed=1)
    assert x.shape == (3000, 64) and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    assert np.array_equal(x, clip_like_embeddings(3000, d=64, seed=1))
    assert not np.array_equal(x, clip_like_embeddings(3000, d=64, seed=2))


def test_neighbour_structure_is_clip_like():
    report = neighbour_report(clip_like_embeddings(20_000), sample=500)
    nn, rand = report["nn_cosine"], report["random_cosine"]
    assert 0.8 <= nn["p5"] and nn["p95"] <= 0.92  # nearest neighbour ~0.8-0.9, a narrow band
    assert 0.4 <= rand["mean"] <= 0.5 and 0.05 <= rand["std"] <= 0.15


def test_the_memmap_holds_the_same_rows(tmp_path):
    n = 70_000  # more than one chunk
    on_disk = write_clip_like(tmp_path / "x.npy", n, d=16)
    assert on_disk.dtype == np.float16 and on_disk.shape == (n, 16)
    assert np.abs(np.asarray(on_disk, np.float32) - clip_like_embeddings(n, d=16)).max() < 1e-3
