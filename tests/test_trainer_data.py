"""Streaming data and the batch composer: layout, partners, negatives, determinism, bad input."""
import random

import pytest
import torch

from trainer.compose import Composer
from trainer.data import DataError, ShardStream, check_features, make_loader, resolve_sources
from trainer.fixtures import write_fixture_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    return {
        "generated": write_fixture_shards(root / "gen", n=48, partner="generated"),
        "mirrored": write_fixture_shards(root / "mir", n=32, partner="mirrored", negatives=False),
        "neighbour": write_fixture_shards(root / "nn", n=32, neighbours=3),
        "plain": write_fixture_shards(root / "plain", n=32, negatives=False),
        "corrupt": write_fixture_shards(root / "bad", n=40, negatives=False, corrupt=4),
    }


def composer(micro_model, batch_size=4, **kw):
    return Composer(micro_model.preprocess_train, micro_model.tokenizer, batch_size, **kw)


def stream(micro_model, path, batches=4, workers=0, rank=0, bad=0.01, **kw):
    comp = composer(micro_model, **kw)
    return ShardStream(resolve_sources([str(path)]), None, comp, seed=7, rank=rank, world_size=2,
                       batches_per_epoch=batches, num_streams=workers, shuffle_buffer=8, max_bad_fraction=bad)


@pytest.mark.parametrize("partner", ["generated", "mirrored", "neighbour"])
def test_batches_follow_the_layout_with_partners(micro_model, shards, partner):
    s = stream(micro_model, shards[partner], partner=partner, partners_per_batch=2,
               negatives_per_image=2 if partner == "generated" else 0)
    batch, info = next(iter(make_loader(s, 0, 0, 0)))
    batch.check()
    per = 2 if partner == "generated" else 0
    assert batch.images.shape == (6, 3, 32, 32) and batch.texts.shape[0] == 4 + 2 + 4 * per
    assert batch.partner_of.tolist() == [0, 1] and info["consumed"] >= 4


def test_negatives_sampled_filtered_and_padded(micro_model, shards):
    from datagen.schema import ShardSample
    from datagen.shards import iter_raw_samples
    comp = composer(micro_model, negatives_per_image=3, kinds=("swap", "add"))
    raws = list(iter_raw_samples(sorted(shards["generated"].glob("*.tar"))[0]))[:4]
    items = [comp.item(r, random.Random(i)) for i, r in enumerate(raws)]
    for raw, item in zip(raws, items):
        kind_of = {n.text: n.kind for n in ShardSample.from_wds(raw).negatives}
        assert all(kind_of[n] in ("swap", "add") for n in item.negatives)
        assert len(item.negatives) == sum(k in ("swap", "add") for k in kind_of.values())
    batch = comp.collate(items).check()
    counts = [len(i.negatives) for i in items]
    assert batch.text_valid[4:].tolist() == sum(([True] * c + [False] * (3 - c) for c in counts), [])
    assert batch.negative_of.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_generated_partner_negative_not_repeated(micro_model, shards):
    from datagen.shards import iter_raw_samples
    comp = composer(micro_model, partner="generated", negatives_per_image=3)
    for raw in list(iter_raw_samples(sorted(shards["generated"].glob("*.tar"))[0]))[:8]:
        item = comp.item(raw, random.Random(0))
        assert item.partner_caption not in item.negatives


def test_stream_is_deterministic_and_resumes_mid_epoch(micro_model, shards):
    s = stream(micro_model, shards["generated"], batches=5, workers=2, partner="generated",
               negatives_per_image=1)
    full = list(make_loader(s, 2, 0, 0))
    again = list(make_loader(s, 2, 0, 0))
    assert [b.keys for b, _ in full] == [b.keys for b, _ in again]
    assert all(torch.equal(a.images, b.images) for (a, _), (b, _) in zip(full, again))
    positions = {}
    for _, info in full[:3]:
        positions[info["stream"]] = {k: v for k, v in info.items() if k != "stream"}
    s.set_position(0, 3, positions)
    rest = list(make_loader(s, 2, 0, 0))
    assert [b.keys for b, _ in rest] == [b.keys for b, _ in full[3:]]
    assert all(torch.equal(a.images, b.images) and torch.equal(a.texts, b.texts)
               for (a, _), (b, _) in zip(rest, full[3:]))
    other_rank = stream(micro_model, shards["generated"], batches=5, workers=2, rank=1, partner="generated",
                        negatives_per_image=1)
    assert [b.keys for b, _ in make_loader(other_rank, 2, 0, 0)] != [b.keys for b, _ in full]


def test_corrupt_samples_are_skipped_and_counted(micro_model, shards):
    s = stream(micro_model, shards["corrupt"], batches=6, bad=0.5)
    infos = [info for _, info in make_loader(s, 0, 0, 0)]
    assert infos[-1]["bad"] > 0 and "cannot decode image" in infos[-1]["last_error"]


def test_too_many_bad_samples_stop_with_a_clear_message(micro_model, shards):
    s = stream(micro_model, shards["corrupt"], batches=6, bad=0.01)
    with pytest.raises(DataError, match=r"samples bad .* above data.max_bad_fraction=0.01; last: sample 's"):
        list(make_loader(s, 0, 0, 0))


def test_unreadable_shard_is_counted(micro_model, tmp_path):
    path = write_fixture_shards(tmp_path / "set", n=32, per_shard=8, negatives=False)
    (path / "shard-000001.tar").write_bytes(b"garbage" * 100)
    s = stream(micro_model, path, batches=8, bad=0.6)
    infos = [info for _, info in make_loader(s, 0, 0, 0)]
    assert infos[-1]["shard_bad"] >= 8 and "shard-000001.tar" in infos[-1]["last_error"]


@pytest.mark.parametrize("source, partner, negatives, message", [
    ("plain", "none", 2, "negatives.per_image=2 but the shard set's manifest.json says it has no hard negatives"),
    ("plain", "neighbour", 0, "data.partner=neighbour but the shard set's manifest.json says it has no neighbours"),
    ("mirrored", "generated", 0, "data.partner=generated but the shard set's manifest.json says features.partner='mirrored'"),
])
def test_recipe_asking_for_missing_features_fails(shards, source, partner, negatives, message):
    with pytest.raises(DataError) as err:
        check_features(resolve_sources([str(shards[source])]), partner, negatives)
    assert str(shards[source]) in str(err.value) and message in str(err.value)


def test_brace_pattern_and_missing_shards(shards):
    (src,) = resolve_sources([str(shards["generated"]) + "/shard-{000000..000002}.tar"])
    assert len(src.urls) == 3 and src.manifest is not None
    with pytest.raises(DataError, match=r"data.train_shards\[0\] .*not found"):
        resolve_sources([str(shards["generated"]) + "/shard-{000000..000009}.tar"])


def test_sources_are_mixed_by_weight(micro_model, tmp_path):
    a = write_fixture_shards(tmp_path / "a", n=16, per_shard=4, negatives=False, prefix="a")
    b = write_fixture_shards(tmp_path / "b", n=16, per_shard=4, negatives=False, prefix="b")

    def keys(weights):
        s = ShardStream(resolve_sources([str(a), str(b)]), weights, composer(micro_model), seed=1, rank=0,
                        world_size=1, batches_per_epoch=8, num_streams=1, shuffle_buffer=4, max_bad_fraction=0)
        return "".join(k[0] for batch, _ in make_loader(s, 0, 0, 0) for k in batch.keys)

    assert set(keys([0.0, 1.0])) == {"b"}
    mixed = keys([1.0, 1.0])
    assert 8 <= mixed.count("a") <= 24 and 8 <= mixed.count("b") <= 24
