"""`python -m datagen prepare`: COCO captions + images -> negatives + neighbours, TROHN-Text /
TROHN-Img from (fixture) Hugging Face datasets, COCO cut-outs as an object bank. Each output is
read back with `verify_shard_set` and accepted by the trainer's feature check; bad rows and
missing images give errors naming them; interrupted runs resume without duplicates or losses."""
import io
import json
import random
import shutil

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from compclip.datagen.__main__ import main
from compclip.shardset.imageio import BadImage
from compclip.shardset.order import shuffled
from compclip.datagen.prepare.coco import CocoOptions, prepare_coco
from compclip.datagen.prepare.imagefiles import ImageFiles, MissingImage
from compclip.datagen.prepare.labels import PairLabeller
from compclip.datagen.prepare.trohn import RowError, TrohnOptions, prepare_trohn
from compclip.shardset.schema import ShardSample
from compclip.shardset.shards import (KeyIndex, iter_raw_samples, read_image_ids, read_manifest, shard_urls,
                            verify_shard_set)
from compclip.trainer.compose import Composer
from compclip.trainer.data import DataError, check_features, resolve_sources
from tests.fixtures.faults import Killed, killed_after

CAPTIONS = ["A man riding a brown horse on the beach.", "A red bus parked next to a tall building.",
            "Two dogs chase three cats in a green park.", "A woman holding a blue umbrella in the rain.",
            "A small cat sleeping on a wooden table.", "A boy throwing a ball to a black dog.",
            "A plate of food with a fork and a knife.", "An old truck driving down a dirt road.",
            "A girl in a pink shirt holding a blue kite.", "A bird sitting on a branch of a tree.",
            "A pizza with cheese on a white plate.", "A train stopped at a busy station."]


def jpeg(seed: int, size=(40, 32)) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def file_name(image_id: int) -> str:
    return f"{image_id:012d}.jpg"


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """COCO 2017-style captions JSON: 6 images x 2 captions, images under train2017/."""
    root = tmp_path_factory.mktemp("coco")
    (root / "train2017").mkdir()
    images, annotations = [], []
    for i in range(6):
        image_id = 100 + i
        (root / "train2017" / file_name(image_id)).write_bytes(jpeg(i))
        images.append({"id": image_id, "file_name": file_name(image_id), "width": 40, "height": 32})
        for j in range(2):
            annotations.append({"id": 1000 + 2 * i + j, "image_id": image_id,
                                "caption": CAPTIONS[2 * i + j]})
    path = root / "captions_train2017.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations}))
    return root


def samples(directory):
    return [ShardSample.from_wds(raw) for url in shard_urls(directory) for raw in iter_raw_samples(url)]


def test_prepare_coco_negatives_and_knn_feed_the_trainer(coco, tmp_path, capsys):
    out = tmp_path / "coco_negclip"
    args = ["prepare", "coco", "--captions", str(coco / "captions_train2017.json"), "--images",
            str(coco / "train2017"), "--out", str(out), "--knn", "3", "--arch", "tiny-vit-64",
            "--batch-size", "8", "--max-count", "5", "--quiet"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    shutil.rmtree(tmp_path / "coco_negclip_base")
    assert main(args) == 0  # a complete set is left as it is (its stage-1 set is not rebuilt)
    assert json.loads(capsys.readouterr().out)["verified"] == report["verified"]
    assert not (tmp_path / "coco_negclip_base").exists()
    assert report["verified"]["samples"] == 12 and report["verified"]["with_neighbours"] == 12
    assert report["verified"]["negatives"] >= 12 and report["skipped"] == {}
    assert verify_shard_set(out)["shards"] == 3
    manifest = read_manifest(out)
    assert manifest["features"]["images"] and manifest["features"]["neighbours"] == 3
    # the neighbours set keeps stage 1's global order and its record of excluded benchmark images
    assert manifest["order"] == {"shuffled": True, "seed": 0,
                                 "inherited_from": str(tmp_path / "coco_negclip_base")}
    assert "excluded" in manifest and "unchecked" in manifest["exclusion"]
    assert read_image_ids(out) == set(range(100, 106))
    got = samples(out)
    assert sorted(s.key for s in got) == [f"coco{1000 + i}" for i in range(12)]
    index = KeyIndex(out)
    for s in got:
        assert s.image == (coco / "train2017" / s.meta["image_path"]).read_bytes()  # bytes as on disk
        assert s.caption in CAPTIONS and s.negatives and all(n.source == "rules" for n in s.negatives)
        assert {n.kind for n in s.negatives} <= {"swap", "replace", "add"}
        assert len(s.neighbours) == 3
        for nb in s.neighbours:  # another image (same image = same bytes = excluded), reachable
            assert index.read(nb.key, "jpg") != s.image
    sources = resolve_sources([str(out)])
    check_features(sources, "neighbour", 2)  # what recipes/negclip asks for: no DataError
    with pytest.raises(DataError, match="features.partner"):
        check_features(sources, "generated", 0)
    composer = Composer(preprocess=lambda im: torch.tensor(np.array(im.resize((8, 8))), dtype=torch.float32),
                        tokenizer=None, batch_size=2, partner="neighbour", negatives_per_image=2)
    raw = next(iter_raw_samples(shard_urls(out)[0]))
    item = composer.item(raw, random.Random(0), str(out))
    assert item.partner_caption in CAPTIONS and len(item.negatives) == 2


def test_the_command_line_defaults_are_the_options_defaults(coco, tmp_path, monkeypatch):
    """`prepare coco|trohn` with no optional flag builds `CocoOptions` / `TrohnOptions` equal to
    their defaults, but for what the command line fills in (the source, the kinds, the model)."""
    import dataclasses
    from compclip.datagen.prepare import coco as coco_module, trohn as trohn_module
    got = {}

    def capture(name):
        def run(*args):
            got[name] = args[-1]
            return {"shards": []}
        return run
    monkeypatch.setattr(coco_module, "prepare_coco", capture("coco"))
    monkeypatch.setattr(trohn_module, "prepare_trohn", capture("trohn"))
    captions = coco / "captions_train2017.json"
    main(["prepare", "coco", "--captions", str(captions), "--images", str(coco / "train2017"),
          "--out", str(tmp_path / "c")])
    main(["prepare", "trohn", "--dataset", "fixture", "--images-root", str(coco / "train2017"),
          "--out", str(tmp_path / "t")])
    filled = {"captions": str(captions), "splits": ["train"], "kinds": ["swap", "replace", "add"]}
    for name, cls in (("coco", CocoOptions), ("trohn", TrohnOptions)):
        options = got[name]
        for field in dataclasses.fields(cls):
            if field.name in ("scorer_factory", "knn_options"):  # the model's, from its flags
                continue
            want = getattr(cls(), field.name)
            if name == "coco":
                want = filled.get(field.name, want)
            assert getattr(options, field.name) == want, (name, field.name)


def test_prepare_coco_knn_checks_the_model_before_any_work(coco, tmp_path, capsys, monkeypatch):
    """An unknown --arch or --pretrained, or weights that cannot be had, used to fail only after
    stage 1 had written every image and negative (hours on COCO); now nothing is written."""
    import huggingface_hub.constants
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    args = ["prepare", "coco", "--captions", str(coco / "captions_train2017.json"), "--images",
            str(coco / "train2017"), "--out", str(tmp_path / "nn"), "--knn", "3", "--quiet"]
    for extra, says in ((["--arch", "no-such-arch"], "unknown architecture 'no-such-arch'"),
                        (["--arch", "tiny-vit-64", "--pretrained", str(tmp_path / "missing.pt")],
                         "missing.pt: no such checkpoint"),
                        (["--arch", "ViT-B-32", "--pretrained", "openai"],  # offline, nothing cached
                         "--pretrained openai: cannot get the weights of ViT-B-32")):
        assert main(args + extra) == 2
        for folder in (tmp_path / "nn", tmp_path / "nn_base"):
            assert not list(folder.glob("*.tar")) and not list(folder.glob(".*.tmp"))
            assert not (folder / "manifest.json").is_file() or read_manifest(folder)["shards"] == []
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and err.count("\n") == 1, err


def test_prepare_coco_missing_image_stops_naming_it_and_keeps_what_was_written(coco, tmp_path, capsys):
    images = tmp_path / "train2017"
    shutil.copytree(coco / "train2017", images)
    (images / file_name(104)).unlink()  # the 5th image: captions 1008 and 1009
    args = ["prepare", "coco", "--captions", str(coco / "captions_train2017.json"), "--images",
            str(images), "--out", str(tmp_path / "out"), "--max-count", "3", "--quiet"]
    assert main(args) == 2
    written_order = shuffled([f"coco{1000 + i}" for i in range(12)], 0)  # --seed 0
    first_missing = min(written_order.index("coco1008"), written_order.index("coco1009"))
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and str(images / file_name(104)) in err
    assert f"caption key '{written_order[first_missing]}'" in err and "image_id 104" in err
    manifest = read_manifest(tmp_path / "out")
    assert not manifest["complete"]
    assert [s["samples"] for s in manifest["shards"]] == [3] * (first_missing // 3)
    assert not list((tmp_path / "out").glob(".*.tmp"))  # the partial shard went away
    assert main(args + ["--skip-missing"]) == 0  # resumes after the ones written; skips and counts
    report = json.loads(capsys.readouterr().out)
    assert report["skipped"] == {"missing_image": 2} and report["verified"]["samples"] == 10
    keys = [s.key for s in samples(tmp_path / "out")]
    assert keys == [k for k in written_order if k not in ("coco1008", "coco1009")]


def test_prepare_coco_resume_is_byte_identical(coco, tmp_path):
    options = CocoOptions(captions=coco / "captions_train2017.json", shard_size=2, progress=False)
    prepare_coco(tmp_path / "full", coco / "train2017", options)
    with pytest.raises(Killed), killed_after(5):
        prepare_coco(tmp_path / "res", coco / "train2017", options)
    part = read_manifest(tmp_path / "res")
    assert not part["complete"] and sum(s["samples"] for s in part["shards"]) == 4
    prepare_coco(tmp_path / "res", coco / "train2017", options)
    full, res = read_manifest(tmp_path / "full"), read_manifest(tmp_path / "res")
    assert res["complete"] and [s["sha256"] for s in res["shards"]] == [s["sha256"] for s in full["shards"]]
    keys = [s.key for s in samples(tmp_path / "res")]
    assert len(keys) == len(set(keys)) == 12


def test_prepare_karpathy_keeps_the_chosen_splits(coco, tmp_path):
    root = tmp_path / "coco2014"
    (root / "train2014").mkdir(parents=True)
    entries = []
    for i, split in enumerate(["train", "restval", "val", "test"]):
        name = f"COCO_train2014_{i:012d}.jpg"
        (root / "train2014" / name).write_bytes(jpeg(10 + i))
        entries.append({"filepath": "train2014", "filename": name, "cocoid": i, "split": split,
                        "sentences": [{"raw": CAPTIONS[i], "sentid": 50 + i}]})
    (root / "dataset_coco.json").write_text(json.dumps({"images": entries, "dataset": "coco"}))
    manifest = prepare_coco(tmp_path / "k", root, CocoOptions(
        karpathy=root / "dataset_coco.json", splits=["train", "restval"], progress=False))
    assert manifest["features"]["splits"] == ["restval", "train"]
    got = samples(tmp_path / "k")
    got.sort(key=lambda s: s.key)
    assert [(s.key, s.meta["split"]) for s in got] == [("coco50", "train"), ("coco51", "restval")]
    assert got[1].image == (root / "train2014" / "COCO_train2014_000000000001.jpg").read_bytes()


def test_image_files_errors_and_resize(tmp_path):
    (tmp_path / "a.jpg").write_bytes(jpeg(0, (300, 200)))
    (tmp_path / "b.jpg").write_bytes(b"not an image at all")
    files = ImageFiles(tmp_path)
    assert files.load("a.jpg", "k")[1] == "jpg"
    with pytest.raises(MissingImage, match=r"c\.jpg: image file not found \(key x\)"):
        files.load("c.jpg", "key x")
    with pytest.raises(BadImage, match=r"b\.jpg \(key y\): not a JPEG"):
        files.load("b.jpg", "key y")
    data, ext = ImageFiles(tmp_path, max_side=64).load("a.jpg", "k")
    assert ext == "jpg" and Image.open(io.BytesIO(data)).size == (64, 43)


def test_inferred_labels_on_trohn_style_pairs():
    pairs = [("A man is in a kitchen making pizzas.", "A woman is in a kitchen making pizzas."),
             ("a blue bike parked on a side walk.", "a red bike parked on a side walk."),
             ("The table near the kitchen has a bowl of fruit on it.",
              "The table far from the kitchen has a bowl of fruit on it."),
             ("A cat resting on a laptop next to a person.", "A cat resting on a person next to a laptop."),
             ("A girl in a pink shirt holding a blue umbrella.", "A girl in a blue shirt holding a pink umbrella."),
             ("An elephant standing under a tree.", "An elephant and a squirrel standing under a tree."),
             ("three people riding horses on a beach", "Three elderly people riding horses on a beach.")]
    assert PairLabeller()(pairs) == [("replace", "obj"), ("replace", "att"), ("replace", "rel"),
                                     ("swap", "obj"), ("swap", "att"), ("add", "obj"), ("add", "att")]


def trohn_text_rows():
    """TROHN-Text's columns; image 100's first caption has 3 negatives (rows 0, 2, 4)."""
    c0, c1 = CAPTIONS[0], CAPTIONS[2]
    rows = [(100, c0, "A woman riding a brown horse on the beach."),
            (101, c1, "Two cats chase three dogs in a green park."),
            (100, c0, "A horse riding a brown man on the beach."),
            (102, CAPTIONS[4], CAPTIONS[4]),  # negative equal to the caption: no sample
            (100, c0, "A man and a dog riding a brown horse on the beach."),
            (103, CAPTIONS[6], "A plate of food with a spoon and a knife.")]
    return {"image_id": [file_name(i) for i, _, _ in rows], "caption": [c for _, c, _ in rows],
            "negative_caption": [n for _, _, n in rows]}


def test_prepare_trohn_text_groups_labels_and_resumes(coco, tmp_path, capsys):
    ds = datasets.Dataset.from_dict(trohn_text_rows())
    ds.save_to_disk(str(tmp_path / "hf"))  # the CLI loads a local save_to_disk folder
    out = tmp_path / "trohn_text"
    assert main(["prepare", "trohn", "--dataset", str(tmp_path / "hf"), "--images-root",
                 str(coco / "train2017"), "--out", str(out), "--max-count", "2", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["skipped"] == {"no_negative": 1} and report["verified"]["samples"] == 3
    assert read_manifest(out)["features"] == {"negatives": "trohn-text", "labels": "inferred",
                                              "images": True, "grouped": True}
    got = {s.key: s for s in samples(out)}
    assert sorted(got) == ["trohntext000000000", "trohntext000000001", "trohntext000000005"]
    first = got["trohntext000000000"]
    assert first.meta["rows"] == [0, 2, 4] and first.caption == CAPTIONS[0]
    assert [(n.kind, n.subkind) for n in first.negatives] == [("replace", "obj"), ("swap", "obj"),
                                                              ("add", "obj")]
    assert first.image == (coco / "train2017" / file_name(100)).read_bytes()
    check_features(resolve_sources([str(out)]), "none", 1)  # recipes/trohn_text: per_image 1

    full_hashes = [s["sha256"] for s in read_manifest(out)["shards"]]
    with pytest.raises(Killed), killed_after(3):
        prepare_trohn(ds, tmp_path / "res", coco / "train2017",
                      TrohnOptions(shard_size=2, progress=False, name=str(tmp_path / "hf")))
    part = read_manifest(tmp_path / "res")
    assert not part["complete"] and [s["samples"] for s in part["shards"]] == [2]
    prepare_trohn(ds, tmp_path / "res", coco / "train2017",
                  TrohnOptions(shard_size=2, progress=False, name=str(tmp_path / "hf")))
    assert [s["sha256"] for s in read_manifest(tmp_path / "res")["shards"]] == full_hashes
    # the report of the resumed run covers the whole set, as the uninterrupted run's does
    reports = [json.loads((d / "prepare_stats.json").read_text()) for d in (out, tmp_path / "res")]
    for report in reports:
        report.pop("seconds"), report.pop("resumed_from")
    assert reports[1] == reports[0] == {"units": 4, "samples": 3, "dropped_negatives": 1,
                                        "skipped": {"no_negative": 1},
                                        "labels": {"add:obj": 1, "replace:obj": 2, "swap:obj": 2}}
    flat = prepare_trohn(ds, tmp_path / "flat", coco / "train2017",
                         TrohnOptions(group=False, label="replace:obj", progress=False))
    assert sum(s["samples"] for s in flat["shards"]) == 5 and flat["features"]["labels"] == "fixed"


def png(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.open(io.BytesIO(jpeg(seed))).save(buf, format="PNG")
    return buf.getvalue()


def trohn_img_dataset(bad_row=None):
    rows = trohn_text_rows()
    data = {k: [v[i] for i in (0, 1, 5)] for k, v in rows.items()}
    data["negative_image"] = [{"bytes": png(40 + i), "path": None} for i in range(3)]
    data["type"], data["subtype"] = ["replace", "SWAP", "replace"], ["obj", "obj", "obj"]
    if bad_row is not None:
        data["negative_image"][bad_row] = None
    features = datasets.Features({k: datasets.Value("string") for k in data if k != "negative_image"})
    features["negative_image"] = datasets.Image()
    return datasets.Dataset.from_dict(data, features=features)


def test_prepare_trohn_img_partner_is_the_generated_image(coco, tmp_path):
    ds = trohn_img_dataset()
    manifest = prepare_trohn(ds, tmp_path / "img", coco / "train2017",
                             TrohnOptions(progress=False, name="fixture"))
    assert manifest["features"] == {"negatives": "trohn-img", "labels": "dataset", "images": True,
                                    "grouped": False, "partner": "generated"}
    got = sorted(samples(tmp_path / "img"), key=lambda s: s.key)
    assert [s.key for s in got] == ["trohnimg000000000", "trohnimg000000001", "trohnimg000000002"]
    for i, s in enumerate(got):
        assert s.partner.kind == "generated" and s.partner.negative_index == 0
        assert s.partner.image == png(40 + i) and s.partner.image_ext == "png"  # stored bytes
        assert s.partner.caption == s.negatives[0].text
    assert (got[1].negatives[0].kind, got[1].negatives[0].subkind) == ("swap", "obj")  # from columns
    check_features(resolve_sources([str(tmp_path / "img")]), "generated", 1)  # recipes/trohn_img


def test_prepare_trohn_bad_rows_error_naming_the_row(coco, tmp_path):
    with pytest.raises(RowError, match=r"fixture row 1, image_id '000000000101.jpg': negative_image is empty"):
        prepare_trohn(trohn_img_dataset(bad_row=1), tmp_path / "a", coco / "train2017",
                      TrohnOptions(progress=False, name="fixture", shard_size=1))
    assert [s["samples"] for s in read_manifest(tmp_path / "a")["shards"]] == [1]  # row 0 kept
    rows = trohn_text_rows()
    rows["image_id"][5] = file_name(999)
    ds = datasets.Dataset.from_dict(rows)
    with pytest.raises(MissingImage, match=r"000000000999\.jpg: image file not found "
                                           r"\(fixture row 5, image_id '000000000999.jpg'\)"):
        prepare_trohn(ds, tmp_path / "b", coco / "train2017",
                      TrohnOptions(progress=False, name="fixture", label="add:obj"))
    manifest = prepare_trohn(ds, tmp_path / "c", coco / "train2017",
                             TrohnOptions(progress=False, name="fixture", label="add:obj", skip_missing=True))
    assert manifest["shards"][0]["skipped"] == {"no_negative": 1, "missing_image": 1}
    with pytest.raises(RowError, match="missing column"):
        prepare_trohn(ds.remove_columns("negative_caption"), tmp_path / "d", coco / "train2017")


def test_coco_object_bank_feeds_the_stitcher(coco, tmp_path, capsys):
    anns = []
    for i, (cat, box) in enumerate([(1, (2, 2, 20, 20)), (2, (10, 4, 24, 24)), (1, (0, 0, 30, 25)),
                                    (2, (1, 1, 3, 3))]):  # the last is too small
        x, y, w, h = box
        anns.append({"id": 500 + i, "image_id": 100 + i, "category_id": cat, "bbox": list(box),
                     "iscrowd": 0, "segmentation": [[x, y, x + w, y, x + w / 2, y + h]]})
    data = {"images": [{"id": 100 + i, "file_name": file_name(100 + i)} for i in range(4)],
            "categories": [{"id": 1, "name": "traffic light"}, {"id": 2, "name": "dog"}],
            "annotations": anns}
    (tmp_path / "instances.json").write_text(json.dumps(data))
    bank = tmp_path / "bank"
    assert main(["prepare", "cocobank", "--instances", str(tmp_path / "instances.json"), "--images",
                 str(coco / "train2017"), "--out", str(bank), "--min-size", "8", "--max-side", "16"]) == 0
    assert json.loads(capsys.readouterr().out)["objects"] == 3
    names = sorted(p.name for p in bank.iterdir() if p.suffix == ".png")
    assert json.loads((bank / "cocobank.json").read_text())["options"]["--per-class"] >= 1
    assert names == ["dog_501.png", "traffic_light_500.png", "traffic_light_502.png"]
    cut = Image.open(bank / "dog_501.png")
    assert cut.mode == "RGBA" and max(cut.size) == 16 and cut.getchannel("A").getextrema() == (0, 255)
    assert main(["stitch", "--bank", str(bank), "--out", str(tmp_path / "lr"), "--n", "4",
                 "--canvas", "64"]) == 0
    assert json.loads(capsys.readouterr().out)["verified"]["partners"] == 4


# ------------------------------------------------------------------ inputs the output trusts

def tree(folder):
    """Every file under `folder` with its bytes and mtime_ns."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_prepare_coco_knn_reuses_a_complete_read_only_base_untouched(coco, tmp_path, capsys):
    """A complete --base set is read, never written (before: it had to be writable, and every
    rerun left a 0-byte .tmp shard in it)."""
    common = ["--captions", str(coco / "captions_train2017.json"), "--images", str(coco / "train2017"),
              "--max-count", "5", "--quiet"]
    base = tmp_path / "base"
    assert main(["prepare", "coco", *common, "--out", str(base)]) == 0
    capsys.readouterr()
    before = tree(base)
    for path in [base, *base.iterdir()]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        for run in range(2):
            assert main(["prepare", "coco", *common, "--out", str(tmp_path / f"nn{run}"), "--knn", "2",
                         "--arch", "micro-vit-32", "--base", str(base)]) == 0
            assert json.loads(capsys.readouterr().out)["verified"]["with_neighbours"] == 12
            assert tree(base) == before
        assert main(["prepare", "coco", *common, "--out", str(tmp_path / "other"), "--knn", "2",
                     "--arch", "micro-vit-32", "--base", str(base), "--mode", "all"]) == 2
        err = capsys.readouterr().err.strip()  # a base made with other options is not reused
        assert err == (f"error: {base / 'manifest.json'}: this output was started with --mode sample, this run "
                       "has --mode all; rerun with the options it was started with (--mode sample) or write "
                       "to a new --out")
    finally:
        for path in [base, *base.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)


def test_prepare_coco_resume_with_edited_captions_is_refused(coco, tmp_path, capsys):
    captions = tmp_path / "captions_train2017.json"
    shutil.copy(coco / "captions_train2017.json", captions)
    out = tmp_path / "out"
    with pytest.raises(Killed), killed_after(5):
        prepare_coco(out, coco / "train2017", CocoOptions(captions=captions, shard_size=2, progress=False,
                                                          kinds=["swap", "replace", "add"]))  # what the command line gives
    before = tree(out)
    data = json.loads(captions.read_text())
    data["annotations"][0]["caption"] = "A man riding a white horse on the beach."
    captions.write_text(json.dumps(data))
    assert main(["prepare", "coco", "--captions", str(captions), "--images", str(coco / "train2017"),
                 "--out", str(out), "--max-count", "2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {captions}: this input changed since {out} was started (its contents differ ") and "\n" not in err
    assert tree(out) == before


def write_clone(folder, rows):
    """A local clone of a hub dataset repository: README.md naming data/train-*, and
    data/train-00000-of-00001.parquet."""
    (folder / "data").mkdir(parents=True)
    datasets.Dataset.from_dict(rows).to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n"
                                      "  - split: train\n    path: data/train-*\n---\n# TROHN-Text\n")
    return folder


def test_prepare_trohn_local_clones_of_the_same_name_each_give_their_own_rows(coco, tmp_path, capsys):
    """F1: two local clones named TROHN-Text in different folders (before: the second built a
    complete set from the first's rows, cached by the folder name). Rows are read from the
    clone's parquet files, listed with their sha256 in the manifest."""
    import hashlib
    other = trohn_text_rows()
    other["caption"] = [c.replace("A ", "One ", 1) for c in other["caption"]]
    other["negative_caption"] = [c.replace("A ", "One ", 1) for c in other["negative_caption"]]
    clones = {"a": write_clone(tmp_path / "a" / "TROHN-Text", trohn_text_rows()),
              "b": write_clone(tmp_path / "b" / "TROHN-Text", other)}
    for name, clone in clones.items():
        out = tmp_path / f"set_{name}"
        assert main(["prepare", "trohn", "--dataset", str(clone), "--images-root", str(coco / "train2017"),
                     "--out", str(out), "--label", "add:obj", "--quiet"]) == 0
        capsys.readouterr()
        rows = trohn_text_rows() if name == "a" else other
        assert {s.caption for s in samples(out)} == {rows["caption"][i] for i in (0, 1, 5)}
    for name, clone in clones.items():
        parquet = clone / "data" / "train-00000-of-00001.parquet"
        record = read_manifest(tmp_path / f"set_{name}")["inputs"]
        assert list(record) == [str(parquet.resolve())]
        assert record[str(parquet.resolve())]["sha256"] == hashlib.sha256(parquet.read_bytes()).hexdigest()


def test_prepare_trohn_on_git_lfs_pointers_says_run_git_lfs_pull(coco, tmp_path, capsys):
    clone = tmp_path / "TROHN-Text"
    (clone / "data").mkdir(parents=True)
    pointer = clone / "data" / "train-00000-of-00001.parquet"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:"
                       f"{'ab' * 32}\nsize 123456\n")
    assert main(["prepare", "trohn", "--dataset", str(clone), "--images-root", str(coco / "train2017"),
                 "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {pointer}: a git-lfs pointer, not the data; run git "
                                               "lfs pull in the clone, then rerun")


def test_coco_object_bank_leaves_benchmark_images_out_and_stitched_pairs_name_theirs(coco, tmp_path, capsys):
    """Cut-outs of a benchmark's COCO image are left out as prepare coco leaves them out
    (before: kept), and a stitched pair names the COCO images of its two objects in
    `json.coco_ids`, which the set's image_ids.txt (the trainer's overlap guard) lists
    (before: no COCO id at all)."""
    anns = []
    for i, (cat, box) in enumerate([(1, (2, 2, 20, 20)), (2, (10, 4, 24, 24)), (1, (0, 0, 30, 25))]):
        x, y, w, h = box
        anns.append({"id": 500 + i, "image_id": 100 + i, "category_id": cat, "bbox": list(box),
                     "iscrowd": 0, "segmentation": [[x, y, x + w, y, x + w / 2, y + h]]})
    (tmp_path / "instances.json").write_text(json.dumps({
        "images": [{"id": 100 + i, "file_name": file_name(100 + i)} for i in range(3)],
        "categories": [{"id": 1, "name": "traffic light"}, {"id": 2, "name": "dog"}], "annotations": anns}))
    karpathy = tmp_path / "dataset_coco.json"  # Karpathy test holds image 102
    karpathy.write_text(json.dumps({"images": [{"cocoid": 102, "split": "test", "filepath": "val2014",
                                                "filename": "x.jpg", "sentences": []}]}))
    bank = tmp_path / "bank"
    assert main(["prepare", "cocobank", "--instances", str(tmp_path / "instances.json"), "--images",
                 str(coco / "train2017"), "--out", str(bank), "--min-size", "8", "--max-side", "16",
                 "--karpathy-ref", str(karpathy), "--benchmarks-root", str(tmp_path / "no_benchmarks")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["objects"] == 2 and report["excluded"]["karpathy_test"] == 1
    assert sorted(p.name for p in bank.glob("*.png")) == ["dog_501.png", "traffic_light_500.png"]
    assert json.loads((bank / "coco_ids.json").read_text()) == {"dog_501.png": 101, "traffic_light_500.png": 100}
    assert main(["stitch", "--bank", str(bank), "--out", str(tmp_path / "lr"), "--n", "4", "--canvas", "32"]) == 0
    capsys.readouterr()
    assert all(s.meta["coco_ids"] == [100, 101] and "coco_id" not in s.meta for s in samples(tmp_path / "lr"))
    assert read_image_ids(tmp_path / "lr") == {100, 101}
