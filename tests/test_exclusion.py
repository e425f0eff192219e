"""Benchmark images out of training (datagen.prepare.exclude): `prepare coco` (COCO 2017 and
Karpathy inputs) and `prepare trohn` drop, by COCO id, the images of Karpathy val/test, COCO
val2017 and the benchmarks under the benchmarks root, record the counts per benchmark and what
could not be checked in the manifest, and list the COCO ids kept in image_ids.txt."""
import json
import shutil

import datasets
import pytest

from compclip.datagen.__main__ import main
from compclip.datagen.prepare.coco import CocoOptions, prepare_coco
from compclip.datagen.prepare.exclude import benchmark_exclusion
from compclip.datagen.prepare.trohn import TrohnOptions, prepare_trohn
from compclip.shardset.shards import iter_raw_samples, read_image_ids, read_manifest, shard_urls
from compclip.shardset.benchmark_ids import coco_ids_of
from tests.fixtures.faults import Killed, killed_after
from tests.test_prepare import CAPTIONS, coco, file_name, jpeg, trohn_text_rows  # noqa: F401


def coco_ids(directory):
    return [json.loads(r["json"])["coco_id"] for u in shard_urls(directory) for r in iter_raw_samples(u)]


def benchmarks(root, sugarcrepe=(), visla=(), karpathy_test=()):
    """A benchmarks root naming the given COCO ids (SugarCrepe, VISLA spatial, retrieval)."""
    (root / "sugarcrepe").mkdir(parents=True)
    (root / "sugarcrepe" / "add_att.json").write_text(json.dumps(
        {str(k): {"filename": file_name(i), "caption": "a", "negative_caption": "b"}
         for k, i in enumerate(sugarcrepe)}))
    (root / "visla").mkdir()
    lines = ["image\tsent1\tsent2\tBest reference (Semantically close)\tReference-2"]
    lines += [f"{file_name(i)}\ta\tb\tc\td" for i in visla]
    (root / "visla" / "Spatial_VISLA.tsv").write_text("\r\n".join(lines))
    (root / "retrieval").mkdir()
    (root / "retrieval" / "coco_karpathy_test.json").write_text(json.dumps(
        [{"image": f"val2014/COCO_val2014_{i:012d}.jpg", "caption": ["x"]} for i in karpathy_test]))
    return root


def test_prepare_coco_leaves_benchmark_images_out_and_records_them(coco, tmp_path, capsys):
    root = benchmarks(tmp_path / "bench", sugarcrepe=[101, 999], visla=[103], karpathy_test=[103, 105])
    val = {"images": [{"id": 104, "file_name": file_name(104)}, {"id": 7777, "file_name": "x.jpg"}],
           "annotations": []}
    (tmp_path / "captions_val2017.json").write_text(json.dumps(val))
    args = ["prepare", "coco", "--captions", str(coco / "captions_train2017.json"), "--images",
            str(coco / "train2017"), "--out", str(tmp_path / "out"), "--benchmarks-root", str(root),
            "--val2017", str(tmp_path / "captions_val2017.json"), "--quiet"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(set(coco_ids(tmp_path / "out"))) == [100, 102]  # 101, 103, 104, 105 left out
    assert report["verified"]["samples"] == 4  # 2 captions per image
    manifest = read_manifest(tmp_path / "out")
    assert manifest["excluded"] == {"coco_val2017": 1, "retrieval": 2, "sugarcrepe": 1, "visla": 1}
    ex = manifest["exclusion"]
    assert ex["images"] == 4 and ex["items"] == 8 and ex["benchmarks_root"] == str(root)
    assert ex["benchmark_images"]["sugarcrepe"] == 2  # 999 is not in the input: named, not counted
    assert {"aro", "bivlc", "sugarcrepe_pp", "karpathy_val"} <= set(ex["unchecked"])
    assert manifest["image_ids"] == "image_ids.txt" and read_image_ids(tmp_path / "out") == {100, 102}
    assert (tmp_path / "out" / "image_ids.txt").read_text() == "100\n102\n"
    assert report["excluded"] == manifest["excluded"]

    kept = tmp_path / "kept"
    assert main(["prepare", "coco", "--captions", str(coco / "captions_train2017.json"), "--images",
                 str(coco / "train2017"), "--out", str(kept), "--benchmarks-root", str(root),
                 "--keep-benchmark-images", "--quiet"]) == 0
    assert read_manifest(kept)["exclusion"] == {"disabled": True}
    assert read_image_ids(kept) == {100, 101, 102, 103, 104, 105}


def test_captions_val2017_next_to_the_input_is_found(coco, tmp_path):
    shutil.copy(coco / "captions_train2017.json", tmp_path / "captions_train2017.json")
    (tmp_path / "captions_val2017.json").write_text(json.dumps(
        {"images": [{"id": 100, "file_name": file_name(100)}], "annotations": []}))
    manifest = prepare_coco(tmp_path / "out", coco / "train2017",
                            CocoOptions(captions=tmp_path / "captions_train2017.json",
                                        benchmarks_root=tmp_path / "none", progress=False))
    assert manifest["excluded"]["coco_val2017"] == 1 and 100 not in read_image_ids(tmp_path / "out")
    assert set(manifest["exclusion"]["unchecked"]) >= {"visla", "sugarcrepe", "retrieval"}


def test_karpathy_input_excludes_its_own_val_and_test_images(tmp_path):
    root = tmp_path / "coco2014"
    (root / "val2014").mkdir(parents=True)
    entries = []
    for i, split in enumerate(["train", "restval", "val", "test", "train"]):
        name = f"COCO_val2014_{i:012d}.jpg"
        (root / "val2014" / name).write_bytes(jpeg(20 + i))
        entries.append({"filepath": "val2014", "filename": name, "cocoid": i, "split": split,
                        "sentences": [{"raw": CAPTIONS[i], "sentid": 60 + i}]})
    (root / "dataset_coco.json").write_text(json.dumps({"images": entries, "dataset": "coco"}))
    bench = benchmarks(tmp_path / "bench", sugarcrepe=[4])
    manifest = prepare_coco(tmp_path / "k", root, CocoOptions(
        karpathy=root / "dataset_coco.json", splits=["train", "restval", "val", "test"],
        benchmarks_root=bench, progress=False))
    assert sorted(coco_ids(tmp_path / "k")) == [0, 1]
    assert manifest["excluded"]["karpathy_val"] == 1 and manifest["excluded"]["karpathy_test"] == 1
    assert manifest["excluded"]["sugarcrepe"] == 1 and "karpathy_val" not in manifest["exclusion"]["unchecked"]


def test_prepare_trohn_leaves_benchmark_images_out(coco, tmp_path):
    ds = datasets.Dataset.from_dict(trohn_text_rows())  # images 100-103; 102 has no usable negative
    root = benchmarks(tmp_path / "bench", visla=[101])
    manifest = prepare_trohn(ds, tmp_path / "t", coco / "train2017",
                             TrohnOptions(progress=False, name="fixture", benchmarks_root=root, seed=3))
    assert sorted(set(coco_ids(tmp_path / "t"))) == [100, 103]
    assert manifest["excluded"]["visla"] == 1 and manifest["exclusion"]["items"] == 1
    assert manifest["order"] == {"shuffled": True, "seed": 3}
    assert read_image_ids(tmp_path / "t") == {100, 103}


def test_exclusion_on_the_real_benchmark_files(shared_benchmarks):
    """What a train2017 shard set loses: every image the real VISLA / SugarCrepe(++) files name."""
    ex = benchmark_exclusion(shared_benchmarks)
    visla = coco_ids_of("visla", shared_benchmarks)
    assert ex.ids["visla"] == visla and not ex.keeps(next(iter(visla)))
    assert ex.keeps(None) and ex.keeps(max(visla | ex.ids["sugarcrepe"]) + 1)
    keys = ex.manifest_keys(visla)  # an input holding exactly VISLA's images loses all of them
    assert keys["excluded"]["visla"] == len(visla) == keys["exclusion"]["images"]
    assert {"bivlc", "aro", "retrieval"} <= set(keys["exclusion"]["unchecked"])


def test_a_resume_with_other_benchmark_files_is_refused(coco, tmp_path):
    root = benchmarks(tmp_path / "bench", sugarcrepe=[101])
    options = CocoOptions(captions=coco / "captions_train2017.json", shard_size=2, progress=False,
                          benchmarks_root=root)
    with pytest.raises(Killed), killed_after(5):
        prepare_coco(tmp_path / "out", coco / "train2017", options)
    part = read_manifest(tmp_path / "out")
    assert not part["complete"] and len(part["shards"]) == 2
    (root / "visla" / "Spatial_VISLA.tsv").write_text(f"image\ta\tb\tc\td\r\n{file_name(100)}\ta\tb\tc\td")
    with pytest.raises(ValueError, match="started leaving out other benchmark images"):
        prepare_coco(tmp_path / "out", coco / "train2017", options)
    (root / "visla" / "Spatial_VISLA.tsv").write_text("image\ta\tb\tc\td")
    done = prepare_coco(tmp_path / "out", coco / "train2017", options)  # the same files resume
    assert done["complete"] and sorted(set(coco_ids(tmp_path / "out"))) == [100, 102, 103, 104, 105]
