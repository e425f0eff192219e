"""Exact-pass epochs: every sample (or every sample x negative) once per epoch across ranks and
workers, a fresh global order per epoch, resumable at any batch; the sample index; the
validation hold-out by image id; same-image pairs per batch."""
import numpy as np
import pytest
import torch

from compclip.trainer.compose import Composer
from compclip.trainer.data import DataError, held_out, make_loader, resolve_sources
from compclip.trainer.exact import ExactStream
from tests.fixtures.trainer_data import write_fixture_shards
from compclip.trainer.sample_index import CACHE, SampleIndex


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("exact")
    return {
        "plain": write_fixture_shards(root / "plain", n=50, per_shard=8, negatives=True),
        "grouped": write_fixture_shards(root / "grouped", n=100, per_shard=16, negatives=False, captions_per_image=5),
        "mirrored": write_fixture_shards(root / "mir", n=12, per_shard=8, partner="mirrored", negatives=False,
                                         prefix="m"),
        "bad": write_fixture_shards(root / "bad", n=40, per_shard=8, negatives=False, corrupt=2, prefix="b"),
    }


def exact(micro_model, paths, rank=0, world=1, batch=4, workers=0, seed=7, **kw):
    sources = resolve_sources([str(p) for p in paths])
    comp = Composer(micro_model.preprocess, micro_model.tokenizer, batch, partner=kw.pop("partner", "none"),
                    negatives_per_image=kw.pop("negatives", 0))
    indexes = [SampleIndex.load(s.directory) for s in sources]
    return ExactStream(sources, indexes, comp, seed, rank, world, workers, kw.pop("bad", 0.01), **kw)


def epoch_keys(stream, epoch=0, start=0, workers=0):
    stream.set_position(epoch, start, {})
    return [b.keys for b, _ in make_loader(stream, workers, 0, epoch)]


@pytest.mark.parametrize("workers", [0, 2])
def test_each_sample_once_per_epoch_across_ranks_and_workers(micro_model, sets, workers):
    n, batch, world = 50, 4, 2
    seen = []
    for rank in range(world):
        stream = exact(micro_model, [sets["plain"]], rank, world, batch, workers)
        assert stream.available_batches == n // (batch * world)
        seen += [k for keys in epoch_keys(stream, workers=workers) for k in keys]
    assert len(seen) == len(set(seen)) == (n // (batch * world)) * batch * world


def test_a_fresh_global_order_each_epoch_reproducible_from_the_seed(micro_model, sets):
    a, b = exact(micro_model, [sets["plain"]]), exact(micro_model, [sets["plain"]])
    assert epoch_keys(a, 0) == epoch_keys(b, 0)
    assert epoch_keys(a, 0) != epoch_keys(a, 1)
    assert epoch_keys(a, 0) != epoch_keys(exact(micro_model, [sets["plain"]], seed=8), 0)


def test_resume_at_any_batch_continues_identically(micro_model, sets):
    stream = exact(micro_model, [sets["plain"]], workers=2)
    full = epoch_keys(stream, 1, workers=2)
    stream.set_position(1, 5, {})
    batches = [b for b, _ in make_loader(stream, 2, 0, 1)]
    assert [b.keys for b in batches] == full[5:]
    again = exact(micro_model, [sets["plain"]], workers=2)
    again.set_position(1, 0, {})
    first = [b for b, _ in make_loader(again, 2, 0, 1)]
    torch.testing.assert_close(first[5].images, batches[0].images)  # composition too


def test_visit_each_negative_gives_every_caption_negative_pair_once(micro_model, sets):
    stream = exact(micro_model, [sets["plain"]], batch=4, negatives=1, visit_each_negative=True)
    index = SampleIndex.load(sets["plain"])
    total = int(index.eligible_negatives(("swap", "replace", "add"), None).sum())
    assert total > len(index)  # samples have 1-3 negatives each
    pairs = []
    stream.set_position(0, 0, {})
    for batch, _ in make_loader(stream, 0, 0, 0):
        pairs += list(zip(batch.keys, batch.texts[batch.num_matched:].tolist()))
    assert len(pairs) == (total // 4) * 4
    assert len({(k, tuple(t)) for k, t in pairs}) == len(pairs)


def test_visit_each_negative_needs_one_negative_per_image(micro_model, sets):
    with pytest.raises(DataError, match="negatives.per_image=1"):
        exact(micro_model, [sets["plain"]], negatives=2, visit_each_negative=True)


def test_mixed_sources_one_pass_over_the_first_partner_bearing_first(micro_model, sets):
    stream = exact(micro_model, [sets["grouped"], sets["mirrored"]], batch=5, partner="mirrored",
                   source_batch=[4, 1])
    assert stream.available_batches == 100 // 4
    keys = epoch_keys(stream)
    assert all(k[0].startswith("m") and not any(x.startswith("m") for x in k[1:]) for k in keys)
    primary = [x for k in keys for x in k[1:]]
    assert len(primary) == len(set(primary)) == 100
    partners = [k[0] for k in keys]  # 25 draws from 12 mirrored samples: whole permutations
    assert set(partners[:12]) == set(partners[12:24]) and len(set(partners[:12])) == 12


def test_bad_samples_are_replaced_and_counted(micro_model, sets):
    stream = exact(micro_model, [sets["bad"]], batch=4, bad=0.5)
    stream.set_position(0, 0, {})
    infos = [info for _, info in make_loader(stream, 0, 0, 0)]
    assert infos[-1]["bad"] == 2 and infos[-1]["consumed"] == 40 + 2
    with pytest.raises(DataError, match="max_bad_fraction"):
        stream = exact(micro_model, [sets["bad"]], batch=4, bad=0.01)
        stream.set_position(0, 0, {})
        list(make_loader(stream, 0, 0, 0))


def test_sample_index_is_cached_and_rebuilt_when_the_set_changes(tmp_path):
    path = write_fixture_shards(tmp_path / "s", n=20, per_shard=8)
    first = SampleIndex.load(path)
    assert (path / CACHE).is_file() and len(first) == 20
    raw = first.read(13, {})
    assert raw["__key__"] == "s00013" and raw["txt"].decode().startswith("a ")
    write_fixture_shards(tmp_path / "s2", n=30, per_shard=8)
    (path / "manifest.json").write_text((tmp_path / "s2" / "manifest.json").read_text())
    for shard in (tmp_path / "s2").glob("*.tar"):
        (path / shard.name).write_bytes(shard.read_bytes())
    assert len(SampleIndex.load(path)) == 30


def test_held_out_images_keep_all_their_captions_together(sets):
    index = SampleIndex.load(sets["grouped"])
    mask = held_out(index.group, 0.3)
    assert 0 < mask.sum() < len(index)
    by_image = mask.reshape(-1, 5)  # 5 consecutive captions per image
    assert (by_image.all(1) | ~by_image.any(1)).all()


def same_image_share(batches_of_groups) -> float:
    shared = total = 0
    for groups in batches_of_groups:
        values, counts = np.unique(groups, return_counts=True)
        shared += int(counts[counts > 1].sum())
        total += len(groups)
    return shared / total


def test_exact_order_breaks_up_captions_of_one_image(micro_model, sets):
    """5 captions per image written next to each other: a global permutation spreads them out
    (a batch of 10 of 100 captions of 20 images: ~40 % share by chance, 100 % in input order)."""
    stream = exact(micro_model, [sets["grouped"]], batch=10)
    index = SampleIndex.load(sets["grouped"])
    pool = stream.pools[0]
    groups = [[int(index.group[int(pool.sample[stream.entry(pool, e, j, t)])]) for t in range(10)]
              for e in range(5) for j in range(stream.available_batches)]
    assert same_image_share(groups) < 0.7
    in_order = [index.group[j * 10:(j + 1) * 10] for j in range(10)]
    assert same_image_share(in_order) == 1.0
