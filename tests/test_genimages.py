"""Generated negative images: partner pairs from the renderer (patched and real) and a tiny random
diffusers pipeline; kind filters, skips counted, seeding, candidate picking, resume."""
import io
import json
import zlib

import numpy as np
import pytest
from PIL import Image

from compclip.datagen.images.genimages import (DiffusersBackend, RendererBackend, caption_seed, generate_picked,
                               tiny_pipeline, write_generated, write_generated_object_bank)
from compclip.shardset.schema import Negative, ShardSample
from compclip.shardset.shards import ShardSetWriter, iter_raw_samples, read_manifest, shard_urls, verify_shard_set
from compclip.datagen.images.stitch import load_object_bank, make_pair
from tests.fixtures.faults import Killed, killed_after


class FakeParseError(ValueError):
    pass


def fake_render(caption, size, seed):
    """Colour from the caption, a seed-dependent stripe; captions with 'purple' do not parse."""
    if "purple" in caption:
        raise FakeParseError(caption)
    colour = zlib.crc32(caption.encode()).to_bytes(4, "little")[:3]
    pixels = np.zeros((size, size, 3), np.uint8) + np.frombuffer(colour, np.uint8)
    pixels[seed % size] = 255
    return Image.fromarray(pixels)


def png(colour):
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), colour).save(buf, format="PNG")
    return buf.getvalue()


def source_set(folder, n=12):
    with ShardSetWriter(folder, max_count=5, features={"negatives": True}) as writer:
        for i in range(n):
            negs = [Negative(f"a blue cube left of a red ball {i}", "swap", "obj", "rules"),
                    Negative(f"a green cube {i}", "replace", "att", "rules"),
                    Negative(f"a big cube near a ball {i}", "add", "att", "rules")]
            if i % 4 == 1:  # only captions the renderer cannot parse among swap/replace
                negs[:2] = [Negative(f"a purple cube {i}", "swap", "obj"),
                            Negative(f"a purple ball {i}", "replace", "att")]
            if i % 4 == 2:
                negs = [negs[2]]  # no swap/replace negative at all
            writer.add(ShardSample(key=f"s{i:03d}", caption=f"a red cube {i}", image=png((i, 0, 0)),
                                   meta={"i": i}, negatives=negs))
    return folder


@pytest.fixture
def src(tmp_path):
    return source_set(tmp_path / "src")


def renderer(size=16):
    return RendererBackend(size=size, render=fake_render, errors=(FakeParseError,))


def all_samples(directory):
    return [ShardSample.from_wds(raw) for url in shard_urls(directory) for raw in iter_raw_samples(url)]


def test_renderer_partners_follow_filters_and_count_skips(src, tmp_path):
    manifest = write_generated(src, tmp_path / "out", renderer(), kinds=["swap", "replace"], seed=3,
                               ext="png", batch_size=4, max_count=4)
    skipped = {}
    for shard in manifest["shards"]:
        for reason, count in shard["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + count
    assert skipped == {"unrenderable": 3, "no_negative": 3}
    assert manifest["features"] == {"negatives": True, "partner": "generated"}
    assert verify_shard_set(tmp_path / "out")["partners"] == 6
    source = {s.key: s for s in all_samples(src)}
    for sample in all_samples(tmp_path / "out"):
        p = sample.partner
        neg = sample.negatives[p.negative_index]
        assert p.kind == "generated" and neg.kind in ("swap", "replace") and p.caption == neg.text
        assert sample.image == source[sample.key].image and sample.caption == source[sample.key].caption
        row = int(sample.key[1:])
        expected = fake_render(neg.text, 16, caption_seed(3, row, p.negative_index, 0))
        assert Image.open(io.BytesIO(p.image)).tobytes() == expected.tobytes()  # seeded per caption


def test_parse_errors_inside_a_sample_fall_to_siblings(tmp_path):
    with ShardSetWriter(tmp_path / "src") as writer:
        writer.add(ShardSample(key="a", caption="c", image=png("red"), negatives=[
            Negative("a purple cube", "swap", "obj"), Negative("a green cube", "swap", "att")]))
    manifest = write_generated(tmp_path / "src", tmp_path / "out", renderer(), per_sample=2)
    (sample,) = all_samples(tmp_path / "out")
    assert sample.partner.caption == "a green cube" and sample.partner.negative_index == 1
    assert manifest["genimages"]["unrenderable_captions"] == 1


def test_per_sample_partners_get_their_own_keys(src, tmp_path):
    write_generated(src, tmp_path / "out", renderer(), kinds=["add"], subkinds=["att"], per_sample=2)
    keys = [s.key for s in all_samples(tmp_path / "out")]
    assert keys == [f"s{i:03d}" for i in range(12)]  # one add/att negative each: one partner
    write_generated(src, tmp_path / "two", renderer(), kinds=["swap", "replace", "add"], per_sample=2)
    samples = all_samples(tmp_path / "two")
    by_key = {s.key: s for s in samples}
    assert "s000" in by_key and "s000_g1" in by_key
    assert by_key["s000"].partner.negative_index != by_key["s000_g1"].partner.negative_index


def test_killed_run_resumes_byte_identical(src, tmp_path):
    kwargs = dict(kinds=["swap", "replace", "add"], per_sample=2, seed=1, batch_size=3, max_count=3)
    write_generated(src, tmp_path / "full", renderer(), **kwargs)
    with pytest.raises(Killed), killed_after(7):
        write_generated(src, tmp_path / "res", renderer(), **kwargs)
    part = read_manifest(tmp_path / "res")
    assert not part["complete"] and 0 < len(part["shards"])
    write_generated(src, tmp_path / "res", renderer(), **kwargs)
    full, res = read_manifest(tmp_path / "full"), read_manifest(tmp_path / "res")
    assert res["complete"] and len(full["shards"]) > 3
    assert [s["sha256"] for s in full["shards"]] == [s["sha256"] for s in res["shards"]]
    assert [s["inputs"] for s in full["shards"]] == [s["inputs"] for s in res["shards"]]


@pytest.fixture(scope="module")
def tiny_backend():
    return DiffusersBackend(tiny_pipeline(seed=0, size=32), steps=2, size=32, batch_size=4, guidance=1.0)


def test_tiny_diffusers_backend_writes_seeded_partners(src, tmp_path, tiny_backend):
    write_generated(src, tmp_path / "a", tiny_backend, kinds=["add"], seed=0, batch_size=8)
    verify_shard_set(tmp_path / "a")
    first = all_samples(tmp_path / "a")
    assert len(first) == 12 and Image.open(io.BytesIO(first[0].partner.image)).size == (32, 32)
    assert len({s.partner.image for s in first}) == 12  # different captions, different seeds
    row = 5  # regenerating one caption alone (another batch) gives the same image
    alone = tiny_backend.generate([first[row].partner.caption], [caption_seed(0, row, first[row].partner.negative_index, 0)])[0]
    got = np.asarray(Image.open(io.BytesIO(first[row].partner.image)).convert("RGB"), int)
    from compclip.shardset.imageio import encode_image
    again = np.asarray(Image.open(io.BytesIO(encode_image(alone))).convert("RGB"), int)
    diff = np.abs(got - again)  # batch composition changes float rounding, JPEG amplifies it
    assert diff.mean() < 0.5 and diff.max() <= 16


def test_clip_pick_keeps_the_best_scoring_candidate(tiny_backend, micro_model):
    from compclip.eval.scorer import OpenClipScorer
    scorer = OpenClipScorer.from_loaded(micro_model)
    seeds = [[11, 12, 13]]
    cands = tiny_backend.generate(["a red cube"] * 3, seeds[0])
    sims = (scorer.encode_images(cands) @ scorer.encode_texts(["a red cube"])[0]).numpy()
    (best,) = generate_picked(tiny_backend, ["a red cube"], seeds, pick="clip", scorer=scorer)
    (first,) = generate_picked(tiny_backend, ["a red cube"], seeds, pick="first")
    assert best.tobytes() == cands[int(sims.argmax())].tobytes()
    assert first.tobytes() == cands[0].tobytes()
    with pytest.raises(ValueError, match="needs a scorer"):
        generate_picked(tiny_backend, ["x"], [[1]], pick="clip")


def test_generated_object_bank_feeds_stitching(tmp_path, tiny_backend):
    paths = write_generated_object_bank(tiny_backend, ["dog", "red car", "tree"], tmp_path / "bank")
    assert [p.name for p in paths] == ["dog.png", "red_car.png", "tree.png"]
    pair = make_pair(load_object_bank(tmp_path / "bank"), 0, size=(96, 64), relations=["left"])
    xs_a, xs_b = np.nonzero(pair.anchor_masks[0])[1], np.nonzero(pair.anchor_masks[1])[1]
    assert xs_a.max() < xs_b.min()


def test_real_renderer_backend(src, tmp_path):
    world = pytest.importorskip("compclip.datagen.world")
    if not hasattr(world, "render_caption"):
        pytest.skip("datagen.world has no render_caption yet")
    backend = RendererBackend(size=32)
    images = backend.generate(["a red circle to the left of a blue square", "zzz qqq ###"], [0, 1])
    assert isinstance(images[0], Image.Image) and images[1] is None  # out of grammar: skipped
    with ShardSetWriter(tmp_path / "wsrc") as writer:
        for i, negs in enumerate([["a blue square to the left of a red circle", "a red circle"],
                                  ["zzz qqq ###"]]):
            writer.add(ShardSample(key=f"w{i}", caption="a red circle to the left of a blue square",
                                   image=png("red"), negatives=[Negative(t, "swap", "rel") for t in negs]))
    manifest = write_generated(tmp_path / "wsrc", tmp_path / "out", backend, per_sample=2, seed=0)
    assert verify_shard_set(tmp_path / "out")["partners"] == 2
    assert manifest["shards"][0]["skipped"] == {"unrenderable": 1}


def test_cli_genimages_with_tiny_diffusers(src, tmp_path, capsys):
    from compclip.datagen.__main__ import main
    assert main(["genimages", "--src", str(src), "--out", str(tmp_path / "o"), "--backend", "diffusers",
                 "--model", "tiny", "--steps", "1", "--guidance", "1", "--size", "32",
                 "--kinds", "replace", "--max-count", "5"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["verified"]["partners"] == 9 and report["skipped"] == {"no_negative": 3}
    assert report["genimages"]["backend"] == "diffusers:tiny"
    assert "genimages" in captured.err and "12/12" in captured.err, captured.err  # a bar with a total
    assert main(["genimages", "--src", str(src), "--out", str(tmp_path / "q"), "--size", "16",
                 "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_diffusers_backend_loads_a_local_pipeline_folder(tmp_path, tiny_backend):
    tiny_backend.pipe.save_pretrained(tmp_path / "pipe")
    loaded = DiffusersBackend.from_pretrained(str(tmp_path / "pipe"), steps=2, size=32, guidance=1.0)
    assert loaded.pipe.safety_checker is None and loaded.name.startswith("diffusers:")
    one = loaded.generate(["a red cube"], [7])[0]
    two = tiny_backend.generate(["a red cube"], [7])[0]
    assert np.abs(np.asarray(one, int) - np.asarray(two, int)).max() <= 1  # same weights, same seed
    with pytest.raises(FileNotFoundError, match="nowhere"):
        DiffusersBackend.from_pretrained(str(tmp_path / "nowhere"))
