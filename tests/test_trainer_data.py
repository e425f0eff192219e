"""Streaming data and the batch composer: layout, partners, negatives, determinism, bad input."""
import random

import pytest
import torch

from compclip.trainer.compose import Composer
from compclip.trainer.data import DataError, ShardStream, check_features, make_loader, resolve_sources
from tests.fixtures.trainer_data import write_fixture_shards


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
    from compclip.shardset.schema import ShardSample
    from compclip.shardset.shards import iter_raw_samples
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
    from compclip.shardset.shards import iter_raw_samples
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


# --- exact per-batch mixes (data.source_batch) -----------------------------------------------

@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    """A COCO-like source (negatives, no partner) and a left-right one (mirrored partners)."""
    root = tmp_path_factory.mktemp("mix")
    return [write_fixture_shards(root / "coco", n=40, per_shard=8, prefix="c"),
            write_fixture_shards(root / "lr", n=24, per_shard=8, partner="mirrored", negatives=False, prefix="l")]


def mixed_stream(micro_model, mix, source_batch=(6, 2), batches=4, workers=0, batch_size=None, **kw):
    comp = composer(micro_model, batch_size=batch_size or sum(source_batch), partner="mirrored", **kw)
    return ShardStream(resolve_sources([str(p) for p in mix]), None, comp, seed=3, rank=0, world_size=1,
                       batches_per_epoch=batches, num_streams=workers, shuffle_buffer=8, max_bad_fraction=0,
                       source_batch=list(source_batch))


def test_mixed_batch_has_exact_counts_with_partner_bearing_anchors_first(micro_model, mix):
    from compclip.shardset.schema import ShardSample
    from compclip.shardset.shards import iter_raw_samples
    samples = [ShardSample.from_wds(r) for tar in sorted(mix[1].glob("*.tar")) for r in iter_raw_samples(tar)]
    partner_caption = {s.key: s.partner.caption for s in samples}
    s = mixed_stream(micro_model, mix, negatives_per_image=1)
    assert s.composer.num_partners == 2
    for batch, info in make_loader(s, 0, 0, 0):
        batch.check()
        assert [k[0] for k in batch.keys] == ["l"] * 2 + ["c"] * 6
        assert batch.partner_of.tolist() == [0, 1] and batch.images.shape[0] == 8 + 2
        expected = micro_model.tokenizer([partner_caption[k] for k in batch.keys[:2]])
        assert torch.equal(batch.texts[8:10], expected)  # each stitched anchor's own mirrored partner
        assert batch.text_valid[10:12].tolist() == [False, False]  # left-right anchors: no negatives
        assert batch.text_valid[12:].all()  # COCO-like anchors: one negative each
        assert sum(info["consumed_by_source"]) == info["consumed"]
    capped = mixed_stream(micro_model, mix, partners_per_batch=1)
    batch, _ = next(iter(make_loader(capped, 0, 0, 0)))
    assert capped.composer.num_partners == 1 and batch.partner_of.tolist() == [0]


def test_mixed_stream_is_deterministic_and_resumes_mid_epoch(micro_model, mix):
    s = mixed_stream(micro_model, mix, batches=5, workers=2)
    full = list(make_loader(s, 2, 0, 0))
    again = list(make_loader(s, 2, 0, 0))
    assert [b.keys for b, _ in full] == [b.keys for b, _ in again]
    assert all(torch.equal(a.images, b.images) for (a, _), (b, _) in zip(full, again))
    positions = {info["stream"]: {k: v for k, v in info.items() if k != "stream"} for _, info in full[:3]}
    assert all(len(p["consumed_by_source"]) == 2 for p in positions.values())
    s.set_position(0, 3, positions)
    rest = list(make_loader(s, 2, 0, 0))
    assert [b.keys for b, _ in rest] == [b.keys for b, _ in full[3:]]
    assert all(torch.equal(a.images, b.images) and torch.equal(a.texts, b.texts)
               for (a, _), (b, _) in zip(rest, full[3:]))
    assert [i for _, i in rest] == [i for _, i in full[3:]]


def test_mixed_stream_counts_bad_samples(micro_model, mix, shards):
    s = ShardStream(resolve_sources([str(shards["corrupt"]), str(mix[1])]), None,
                    composer(micro_model, partner="mirrored"), seed=3, rank=0, world_size=1, batches_per_epoch=6,
                    num_streams=0, shuffle_buffer=8, max_bad_fraction=0.5, source_batch=[3, 1])
    infos = [info for _, info in make_loader(s, 0, 0, 0)]
    assert infos[-1]["bad"] > 0 and "cannot decode image" in infos[-1]["last_error"]
    s.max_bad_fraction = 0.01
    with pytest.raises(DataError, match=r"samples bad .* above data.max_bad_fraction=0.01"):
        list(make_loader(s, 0, 0, 0))


def test_source_batch_must_match_sources_and_batch(micro_model, mix):
    with pytest.raises(DataError, match=r"data.source_batch \[4, 2\]: .* summing to batch_size 8"):
        mixed_stream(micro_model, mix, source_batch=(4, 2), batch_size=8)
    with pytest.raises(DataError, match=r"data.source_batch \[8\]: needs one count >= 1 per source \(2\)"):
        mixed_stream(micro_model, mix, source_batch=(8,))


def test_mixed_features_are_asked_only_of_sources_that_carry_them(shards, mix):
    sources = resolve_sources([str(p) for p in mix])
    check_features(sources, "mirrored", 2, mixed=True)  # COCO has no partner, left-right no negatives
    with pytest.raises(DataError, match=r"data.train_shards\[0\] .*features.partner=None"):
        check_features(sources, "mirrored", 0)  # without source_batch every source must have it
    with pytest.raises(DataError, match=r"data.partner=generated but no data.train_shards source's manifest.json "
                                        r"has features.partner='generated'"):
        check_features(sources, "generated", 0, mixed=True)
    with pytest.raises(DataError, match=r"negatives.per_image=1 but no data.train_shards source's manifest.json"):
        check_features(resolve_sources([str(shards["plain"]), str(mix[1])]), "mirrored", 1, mixed=True)
    with pytest.raises(DataError, match=r"data.partner=neighbour but no .* has features.neighbours"):
        check_features(sources, "neighbour", 0, mixed=True)


def test_uint8_from_workers_normalised_on_the_device_equals_the_float_transform(micro_model, shards):
    """split_normalize + DeviceNormalize: the model sees exactly open_clip's transform's floats."""
    from compclip.shardset.shards import iter_raw_samples, shard_urls
    from compclip.trainer.transforms import split_normalize
    samples = list(iter_raw_samples(shard_urls(shards["plain"])[0]))[:4]
    for transform in (micro_model.preprocess, micro_model.preprocess_train):
        cpu_part, normalize = split_normalize(transform)
        assert normalize is not None
        floats = Composer(transform, micro_model.tokenizer, 4)
        uint8s = Composer(cpu_part, micro_model.tokenizer, 4)
        for sample in samples:
            a = floats.item(sample, random.Random(1)).image
            b = uint8s.item(sample, random.Random(1)).image
            assert b.dtype == torch.uint8
            assert torch.equal(normalize(b.unsqueeze(0))[0], a)


def test_model_input_is_cast_to_the_weights_dtype_only_when_they_are_not_float32(micro_model):
    """DeepSpeed's bf16 / fp16 engine keeps its weights in that dtype without autocast: the images
    reach it in that dtype; float32 weights get the normalised float32 images unchanged."""
    from compclip.trainer.transforms import split_normalize, to_model_input
    _, normalize = split_normalize(micro_model.preprocess_train)
    images = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    fp32 = to_model_input(normalize, torch.float32)(images)
    assert fp32.dtype == torch.float32 and torch.equal(fp32, normalize(images))
    for dtype in (torch.bfloat16, torch.float16):
        low = to_model_input(normalize, dtype)(images)
        assert low.dtype == dtype and torch.equal(low, normalize(images).to(dtype))
    floats = torch.rand(2, 3, 8, 8)  # a transform that was not split: no normalize, the cast alone
    assert to_model_input(None, torch.bfloat16)(floats).dtype == torch.bfloat16
    assert to_model_input(None, torch.float32)(floats) is floats


def test_persistent_workers_step_through_epochs_like_fresh_loaders(micro_model, shards):
    s = stream(micro_model, shards["plain"], batches=3, workers=2)
    fresh = []
    for epoch in (0, 1):
        s.set_position(epoch, 0, {})
        fresh.append([b.keys for b, _ in make_loader(s, 2, 0, epoch)])
    assert fresh[0] != fresh[1]
    s.set_position(0, 0, {})
    loader = make_loader(s, 2, 0, persistent=True)
    persistent = [[b.keys for b, _ in loader] for _ in range(2)]
    assert persistent == fresh


def test_large_jpegs_are_decoded_at_a_reduced_size(micro_model):
    import io
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (640, 480), (200, 40, 40)).save(buf, format="JPEG")
    seen = []
    comp = Composer(lambda image: seen.append(image.size) or torch.zeros(3, 2, 2), micro_model.tokenizer, 4,
                    draft_size=224)
    comp._image(buf.getvalue(), random.Random(0), "x")
    assert seen == [(320, 240)]  # 1/2 scale: the largest reduction keeping both sides >= 224
    comp.draft_size = None
    comp._image(buf.getvalue(), random.Random(0), "x")
    assert seen[-1] == (640, 480)


# --- negatives of neighbour partners, the draw, the pre-flight padding estimate, negatives.rules ----

def raw_samples(path):
    from compclip.shardset.shards import iter_raw_samples, shard_urls
    return [raw for url in shard_urls(path) for raw in iter_raw_samples(url)]


def test_partner_negatives_come_from_the_neighbours_neg_json(micro_model, tmp_path):
    """Even samples have 3 swaps (+ a replace the recipe leaves out), odd ones no neg.json; each
    sample's one neighbour is the next, so even anchors' neighbours have none (padding)."""
    from compclip.shardset.schema import Negative
    from tests.fixtures.trainer_data import write_negative_shards
    negatives = [[Negative(f"neg {i} {j}", "swap", "noun") for j in range(3)] + [Negative(f"other {i}", "replace", "att")]
                 if i % 2 == 0 else [] for i in range(8)]
    path = write_negative_shards(tmp_path / "set", negatives, neighbours=1)
    comp = composer(micro_model, partner="neighbour", negatives_per_image=1, negatives_per_partner=2,
                    kinds=("swap",))
    items = [comp.item(raw, random.Random(i), str(path)) for i, raw in enumerate(raw_samples(path)[:4])]
    for i, item in enumerate(items):
        assert item.partner_caption == f"caption {i + 1}"
        own = {f"neg {i + 1} {j}" for j in range(3)} if (i + 1) % 2 == 0 else set()
        assert set(item.partner_negatives) <= own and len(set(item.partner_negatives)) == min(2, len(own))
        assert set(item.negatives) <= {f"neg {i} {j}" for j in range(3)}
    batch = comp.collate(items).check()
    assert batch.texts.shape[0] == 4 + 4 + 4 * 1 + 4 * 2
    assert batch.negative_of.tolist() == [0, 1, 2, 3] + [4, 4, 5, 5, 6, 6, 7, 7]  # partner p -> image B + p
    assert batch.text_valid[8:].tolist() == [True, False, True, False] + [False, False, True, True] * 2


def test_by_subkind_draws_a_subkind_first(micro_model, tmp_path):
    """1 candidate of sub-kind A, 9 of B: by_subkind picks A half the time, uniform a tenth."""
    from compclip.shardset.schema import Negative
    from tests.fixtures.trainer_data import write_negative_shards
    negatives = [Negative("swap A", "swap", "noun")] + [Negative(f"swap B{j}", "swap", "adjective") for j in range(9)]
    raw = raw_samples(write_negative_shards(tmp_path / "set", [negatives]))[0]

    def share_of_a(draw):
        comp = Composer(lambda image: torch.zeros(3, 2, 2), micro_model.tokenizer, 4, negatives_per_image=1, draw=draw)
        return sum(comp.item(raw, random.Random(seed)).negatives == ["swap A"] for seed in range(2000)) / 2000

    assert 0.45 <= share_of_a("by_subkind") <= 0.55
    assert 0.07 <= share_of_a("uniform") <= 0.13
    every = Composer(lambda image: torch.zeros(3, 2, 2), micro_model.tokenizer, 4, negatives_per_image=12,
                     draw="by_subkind").item(raw, random.Random(0)).negatives
    assert sorted(every) == sorted(n.text for n in negatives)  # without replacement, until none is left


def test_padding_fraction_counts_missing_anchor_and_partner_columns():
    from compclip.trainer.data import padding_fraction
    assert padding_fraction([0, 1, 2, 5], per_image=1) == 0.25
    assert padding_fraction([0, 1, 2, 5], per_image=2) == 3 / 8
    # 3 samples x (1 anchor column + half a partner column): 1 + 0.5 missing of 4.5
    assert padding_fraction([0, 1, 2], per_image=1, per_partner=1, partners=0.5) == pytest.approx(1.5 / 4.5)
    assert padding_fraction([], per_image=1) == 0.0 and padding_fraction([0, 0], per_image=0) == 0.0


@pytest.mark.parametrize("without, warned", [(1, False), (2, True)])
def test_padding_warning_above_one_percent(tmp_path, without, warned):
    """150 samples with one swap each but `without` of them: 0.7 % padding is quiet, 1.3 % warns."""
    from compclip.shardset.schema import Negative
    from compclip.trainer.data import padding_warning
    from tests.fixtures.trainer_data import write_negative_shards
    negatives = [[] if i < without else [Negative(f"neg {i}", "swap", "noun"), Negative(f"r {i}", "replace", "obj")]
                 for i in range(150)]
    (src,) = resolve_sources([str(write_negative_shards(tmp_path / "set", negatives, per_shard=64))])
    line = padding_warning(0, src, ["swap"], ["noun", "adjective"], per_image=1)
    if not warned:
        assert line is None
        return
    assert line == (f"warning: data.train_shards[0] '{src.entry}': 1.3 % of the negative columns will be padding "
                    f"(150 samples read: 2 have fewer than negatives.per_image=1 eligible negatives under "
                    f"kinds=[swap] subkinds=[noun, adjective]); rebuild with --mode all, see docs/data_prep.md")


def test_partner_negatives_need_a_set_with_negatives(tmp_path):
    path = write_fixture_shards(tmp_path / "nn", n=16, negatives=False, neighbours=1)
    with pytest.raises(DataError, match=r"negatives.per_partner=1 but the shard set's manifest.json says it has no "
                                        r"hard negatives"):
        check_features(resolve_sources([str(path)]), "neighbour", 0, negatives_per_partner=1)


@pytest.mark.parametrize("recorded, asked, refused", [
    (None, "compclip", False), (None, "negclip", True), ("negclip", "negclip", False), ("negclip", "compclip", True)])
def test_negatives_rules_must_match_the_manifest(tmp_path, recorded, asked, refused):
    """A manifest without features.rules was written by the compclip rules."""
    path = write_fixture_shards(tmp_path / "set", n=16, rules=recorded)
    sources = resolve_sources([str(path)])
    if not refused:
        check_features(sources, "none", 1, rules=asked)
        return
    with pytest.raises(DataError) as err:
        check_features(sources, "none", 1, rules=asked)
    message = str(err.value)
    assert "\n" not in message and f"data.train_shards[0] '{path}'" in message
    assert f"negatives.rules={asked} but the shard set's manifest.json has features.rules={recorded or 'compclip'}" in message
