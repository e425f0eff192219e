"""Stitched pairs: the relation holds in pixels for both arrangements, captions, determinism,
corrupt bank images skipped and counted, resumed shard sets byte-identical."""
import io
import json

import numpy as np
import pytest
from PIL import Image, ImageDraw

from compclip.shardset.schema import ShardSample
from compclip.shardset.shards import iter_raw_samples, read_manifest, shard_urls, verify_shard_set
from compclip.datagen.images.stitch import article, load_object_bank, make_pair, object_name, write_stitched
from tests.fixtures.faults import Killed, killed_after

COLOURS = {"red_circle": (255, 0, 0), "green_square": (0, 255, 0), "blue_circle": (0, 0, 255),
           "yellow_triangle": (255, 255, 0)}


def make_bank(folder, with_background=True, plain=False):
    folder.mkdir(parents=True, exist_ok=True)
    for i, (stem, colour) in enumerate(COLOURS.items()):
        if plain:  # an opaque photo-like crop: the whole rectangle is the object
            Image.new("RGB", (30 + 7 * i, 20 + 5 * i), colour).save(folder / f"{stem}_{i}.jpg", quality=100)
            continue
        im = Image.new("RGBA", (60 + 10 * i, 50), (0, 0, 0, 0))
        draw = ImageDraw.Draw(im)
        if "circle" in stem:
            draw.ellipse((5, 5, 45 + 10 * i, 45), fill=colour + (255,))
        elif "square" in stem:
            draw.rectangle((8, 3, 40, 35), fill=colour + (255,))
        else:
            draw.polygon([(5, 45), (30, 5), (55, 45)], fill=colour + (255,))
        im.save(folder / f"{stem}.png")
    if with_background:
        (folder / "backgrounds").mkdir(exist_ok=True)
        Image.new("RGB", (100, 80), (0, 0, 0)).save(folder / "backgrounds" / "black.png")
    return folder


@pytest.fixture(scope="module")
def bank_dir(tmp_path_factory):
    return make_bank(tmp_path_factory.mktemp("bank"))


def strictly_before(first: np.ndarray, second: np.ndarray, axis: int) -> bool:
    """Every pixel of `first` lies before every pixel of `second` along axis (1=x, 0=y)."""
    a, b = np.nonzero(first)[axis], np.nonzero(second)[axis]
    return len(a) > 0 and len(b) > 0 and a.max() < b.min()


@pytest.mark.parametrize("relation", ["left", "above"])
@pytest.mark.parametrize("size", [(96, 96), (128, 64), (40, 120)])
def test_relation_holds_in_alpha_masks_for_both_arrangements(bank_dir, relation, size):
    bank = load_object_bank(bank_dir)
    axis = 1 if relation == "left" else 0  # numpy axis: columns for left/right, rows for above
    for index in range(25):
        pair = make_pair(bank, index, seed=3, size=size, relations=[relation], scale=(0.3, 0.6))
        (ma, mb), (ra, rb) = pair.anchor_masks, pair.mirrored_masks
        assert pair.anchor.size == pair.mirrored.size == size
        assert pair.names[0] != pair.names[1]
        assert strictly_before(ma, mb, axis), (index, pair.boxes("anchor"))
        assert strictly_before(rb, ra, axis), (index, pair.boxes("mirrored"))
        # the mirror reflects positions: same object sizes, same position on the other axis
        assert ma.sum() == ra.sum() and mb.sum() == rb.sum()
        other = 1 - axis
        assert np.nonzero(ma)[other].min() == np.nonzero(ra)[other].min()


def colour_mask(image: Image.Image, colour) -> np.ndarray:
    pixels = np.asarray(image.convert("RGB")).astype(int)
    return (np.abs(pixels - np.array(colour)).sum(-1) < 30)


def test_relation_holds_in_decoded_shard_pixels_and_captions_name_it(bank_dir, tmp_path):
    out = tmp_path / "lr"
    write_stitched(out, bank_dir, n_pairs=24, seed=1, size=(80, 80), ext="png", max_count=10)
    assert verify_shard_set(out) == {"samples": 24, "shards": 3, "partners": 24,
                                     "negatives": 0, "with_neighbours": 0}
    phrasings = set()
    for url in shard_urls(out):
        for raw in iter_raw_samples(url):
            sample = ShardSample.from_wds(raw)
            assert sample.partner.kind == "mirrored" and sample.image_ext == "png"
            a, b = sample.meta["objects"]
            axis = 1 if sample.meta["relation"] == "left" else 0
            col = {object_name_to_colour(a), object_name_to_colour(b)}
            assert len(col) == 2
            anchor = Image.open(io.BytesIO(sample.image))
            mirror = Image.open(io.BytesIO(sample.partner.image))
            ca, cb = object_name_to_colour(a), object_name_to_colour(b)
            assert strictly_before(colour_mask(anchor, ca), colour_mask(anchor, cb), axis)
            assert strictly_before(colour_mask(mirror, cb), colour_mask(mirror, ca), axis)
            for caption, first, second in ((sample.caption, a, b), (sample.partner.caption, b, a)):
                fwd = {1: "to the left of", 0: "above"}[axis]
                back = {1: "to the right of", 0: "below"}[axis]
                assert caption in (f"{article(first)} {fwd} {article(second)}",
                                   f"{article(second)} {back} {article(first)}")
                phrasings.add(fwd in caption)
    assert phrasings == {True, False}  # both phrasings are used


def object_name_to_colour(name: str):
    return COLOURS[name.replace(" ", "_")]


def test_both_phrasings_about_half_the_time(bank_dir):
    bank = load_object_bank(bank_dir)
    forward = sum("to the left of" in make_pair(bank, i, seed=0, size=(64, 64), relations=["left"]).anchor_caption
                  for i in range(200))
    assert 70 < forward < 130


def test_deterministic_per_seed_and_index(bank_dir):
    bank = load_object_bank(bank_dir)
    one, two = make_pair(bank, 7, seed=5, size=(64, 64)), make_pair(bank, 7, seed=5, size=(64, 64))
    assert one.anchor.tobytes() == two.anchor.tobytes() and one.anchor_caption == two.anchor_caption
    others = [make_pair(bank, i, seed=s, size=(64, 64)) for i, s in ((8, 5), (7, 6))]
    assert all(o.anchor.tobytes() != one.anchor.tobytes() for o in others)


def test_names_articles_and_plain_images(tmp_path):
    assert object_name(tmp_path / "red_circle.png") == "red circle"
    assert object_name(tmp_path / "dog_12.jpg") == "dog"
    assert article("apple") == "an apple" and article("red cube") == "a red cube"
    bank = load_object_bank(make_bank(tmp_path / "plain", with_background=False, plain=True))
    assert bank.names == ["blue circle", "green square", "red circle", "yellow triangle"]
    pair = make_pair(bank, 0, size=(64, 48), relations=["left"])
    assert strictly_before(*pair.anchor_masks, 1) and strictly_before(*pair.mirrored_masks[::-1], 1)
    assert pair.background.startswith("#")  # no backgrounds folder: a flat colour


def test_corrupt_bank_images_skipped_and_counted(tmp_path):
    bank_dir = make_bank(tmp_path / "bank")
    good = (bank_dir / "red_circle.png").read_bytes()
    (bank_dir / "broken_cube.png").write_bytes(good[: len(good) // 2])  # truncated
    (bank_dir / "noise_cube.jpg").write_bytes(b"not an image at all")
    Image.new("RGBA", (10, 10), (0, 0, 0, 0)).save(bank_dir / "ghost.png")  # nothing visible
    (bank_dir / "backgrounds" / "bad.jpg").write_bytes(b"\xff\xd8\xff garbage")
    bank = load_object_bank(bank_dir)
    assert len(bank.objects) == 4 and "broken cube" not in bank.names
    assert bank.skipped == {"corrupt_image": 3, "corrupt_background": 1}
    manifest = write_stitched(tmp_path / "out", bank_dir, n_pairs=3, size=(48, 48))
    assert manifest["object_bank"]["skipped"] == {"corrupt_image": 3, "corrupt_background": 1}


def test_bank_with_one_object_is_a_clear_error(tmp_path):
    folder = tmp_path / "one"
    folder.mkdir()
    Image.new("RGB", (8, 8), "red").save(folder / "cube_1.png")
    Image.new("RGB", (8, 8), "red").save(folder / "cube_2.png")
    with pytest.raises(ValueError, match="at least two differently named"):
        load_object_bank(folder)


def test_killed_run_resumes_byte_identical(bank_dir, tmp_path):
    kwargs = dict(n_pairs=23, seed=2, size=(64, 64), max_count=5)
    write_stitched(tmp_path / "full", bank_dir, **kwargs)
    with pytest.raises(Killed), killed_after(12):
        write_stitched(tmp_path / "resumed", bank_dir, **kwargs)
    partial = read_manifest(tmp_path / "resumed")
    assert not partial["complete"] and len(partial["shards"]) == 2  # 10 pairs in complete shards
    assert len(list((tmp_path / "resumed").glob(".*.tmp"))) == 1  # the shard being written when killed
    write_stitched(tmp_path / "resumed", bank_dir, **kwargs)
    assert not list((tmp_path / "resumed").glob(".*.tmp"))  # the resume removed it
    full, resumed = read_manifest(tmp_path / "full"), read_manifest(tmp_path / "resumed")
    assert resumed["complete"] and len(full["shards"]) == 5
    assert [s["sha256"] for s in full["shards"]] == [s["sha256"] for s in resumed["shards"]]
    assert json.loads((tmp_path / "full" / "manifest.json").read_text())["features"]["partner"] == "mirrored"


def test_real_world_object_bank(tmp_path):
    world = pytest.importorskip("compclip.datagen.world")
    if not hasattr(world, "write_object_bank"):
        pytest.skip("datagen.world has no write_object_bank yet")
    files = world.write_object_bank(tmp_path / "bank", 48, 0)
    assert files
    bank = load_object_bank(tmp_path / "bank")
    for index in range(10):
        pair = make_pair(bank, index, size=(96, 96))
        axis = 1 if pair.relation == "left" else 0
        assert strictly_before(*pair.anchor_masks, axis)
        assert strictly_before(*pair.mirrored_masks[::-1], axis)


def test_cli_stitch_writes_a_verified_set(bank_dir, tmp_path, repo_root):
    import subprocess
    import sys
    out = tmp_path / "cli"
    run = subprocess.run([sys.executable, "-m", "compclip.datagen", "stitch", "--bank", str(bank_dir),
                          "--out", str(out), "--n", "6", "--canvas", "64x48", "--relations", "above",
                          "--max-count", "4"], cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["verified"]["samples"] == 6 and report["verified"]["shards"] == 2
    assert {s.meta["relation"] for u in shard_urls(out) for s in map(ShardSample.from_wds, iter_raw_samples(u))} == {"above"}


def test_cli_stitch_errors_are_one_line(bank_dir, tmp_path, capsys):
    from compclip.datagen.__main__ import main
    (tmp_path / "empty").mkdir()
    for bank, says in ((tmp_path / "nope", "nope: no such folder; give a folder of object images (--bank)"),
                       (tmp_path / "empty", "empty: no object images (.png, .jpg, ...) in this folder")):
        assert main(["stitch", "--bank", str(bank), "--out", str(tmp_path / "x"), "--n", "1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and err.count("\n") == 1, err
    for option, value, says in (("--canvas", "abc", "'abc' is not a size; give SIDE or WIDTHxHEIGHT"),
                                ("--canvas", "4", "'4': sides of at least 8 pixels"),
                                ("--scale", "0.5,0.2", "'0.5,0.2': need 0 < LO <= HI <= 1"),
                                ("--scale", "big", "'big' is not a range")):
        with pytest.raises(SystemExit) as exit_:
            main(["stitch", "--bank", str(bank_dir), "--out", str(tmp_path / "x"), "--n", "1", option, value])
        assert exit_.value.code == 2
        err = capsys.readouterr().err  # one line, no usage block
        assert err.startswith(f"error: python -m datagen stitch: argument {option}: {says}"), err
        assert err.endswith("; see python -m datagen stitch --help\n") and err.count("\n") == 1


def test_cli_stitch_refuses_a_changed_canvas_on_resume(bank_dir, tmp_path, capsys):
    """A killed 128 px run resumed with --canvas 64 must not mix 64 px shards into the set."""
    from compclip.datagen.__main__ import main
    out = tmp_path / "o"
    args = ["stitch", "--bank", str(bank_dir), "--out", str(out), "--n", "6", "--max-count", "2"]
    with pytest.raises(Killed), killed_after(3):
        main(args + ["--canvas", "128"])  # killed after 3 pairs: one complete shard
    capsys.readouterr()
    assert len(read_manifest(out)["shards"]) == 1
    assert main(args + ["--canvas", "64"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {out / 'manifest.json'}: this output was started with --canvas 128x128, "
                   "this run has --canvas 64x64; rerun with the options it was started with "
                   "(--canvas 128x128) or write to a new --out\n")
    assert main(args + ["--canvas", "128", "--seed", "1"]) == 2
    assert "started with --seed 0, this run has --seed 1" in capsys.readouterr().err
    assert len(read_manifest(out)["shards"]) == 1  # the refused runs wrote nothing
    assert main(args + ["--canvas", "128"]) == 0  # the same options resume
    sizes = {Image.open(io.BytesIO(s.image)).size for u in shard_urls(out)
             for s in map(ShardSample.from_wds, iter_raw_samples(u))}
    assert sizes == {(128, 128)} and verify_shard_set(out)["samples"] == 6


def test_cli_stitch_shows_progress_unless_quiet(bank_dir, tmp_path, capsys):
    from compclip.datagen.__main__ import main
    args = ["stitch", "--bank", str(bank_dir), "--n", "5", "--canvas", "32"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "stitch" in err and "5/5" in err, err
    assert main(args + ["--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_image_helpers_name_the_bad_file_and_encode_deterministically(tmp_path):
    from compclip.shardset.imageio import BadImage, decode_image, encode_image, load_image_file
    image = Image.new("RGB", (20, 10), (10, 200, 30))
    data = encode_image(image, "png")
    assert encode_image(image, "png") == data and encode_image(image, "jpg") == encode_image(image, "jpg")
    assert decode_image(data).size == (20, 10)
    with pytest.raises(BadImage, match="sample 'k7'"):
        decode_image(data[:40], "sample 'k7'")  # header readable, pixels truncated
    with pytest.raises(BadImage, match="missing.png: cannot read"):
        load_image_file(tmp_path / "missing.png")
    with pytest.raises(BadImage, match="empty image data"):
        decode_image(b"")
