"""compclip/shardset/benchmark_ids.py: the COCO ids each benchmark scores, on the real shared benchmark files and
on fixtures for the parts whose files are not shared (BiVLC, ARO, retrieval)."""
import csv
import json
import shutil

import datasets
import pytest

from compclip.shardset.benchmark_ids import (ImageIdError, benchmark_coco_ids, benchmark_ids, coco_id_from_name,
                            coco_ids_of)


def names_in_column(path, column: int, delimiter="\t"):
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter=delimiter, quoting=csv.QUOTE_NONE))[1:]
    return {r[column] for r in rows if r and r[column].strip()}


def test_coco_id_from_file_names():
    assert coco_id_from_name("000000318723.jpg") == 318723
    assert coco_id_from_name("val2014/COCO_val2014_000000391895.jpg") == 391895
    assert coco_id_from_name("2316491.jpg") == 2316491
    assert coco_id_from_name("README.md") is None


def test_real_benchmark_files_give_their_coco_ids(shared_benchmarks):
    visla = coco_ids_of("visla", shared_benchmarks)
    files = [shared_benchmarks / "visla" / f for f in ("Generic_VISLA.tsv", "Spatial_VISLA.tsv")]
    expected = {int(n.split(".")[0]) for f in files for n in names_in_column(f, 0)}
    assert visla == expected and len(visla) > 500
    sugarcrepe = coco_ids_of("sugarcrepe", shared_benchmarks)
    raw = {int(item["filename"][:-4]) for f in sorted((shared_benchmarks / "sugarcrepe").glob("*.json"))
           for item in json.loads(f.read_text()).values()}
    assert sugarcrepe == raw
    pp = coco_ids_of("sugarcrepe_pp", shared_benchmarks)
    assert pp and pp <= sugarcrepe  # SugarCrepe++ reuses SugarCrepe's val2017 images
    generic = {int(n[:-4]) for n in names_in_column(files[0], 0)}
    spatial = {int(n[:-4]) for n in names_in_column(files[1], 0)}
    assert generic <= sugarcrepe  # VISLA generic: val2017 images SugarCrepe names too
    assert len(spatial - sugarcrepe) > 0.9 * len(spatial)  # spatial: mostly other (train2017) images
    # files not shared: None, and reported as absent
    for name in ("bivlc", "aro", "retrieval", "left_right"):
        found = benchmark_ids(name, shared_benchmarks)
        assert found.ids is None and found.missing
    assert coco_ids_of("zeroshot", shared_benchmarks) is None
    got = benchmark_coco_ids(["visla", "sugarcrepe", "aro", "zeroshot"], shared_benchmarks)
    assert set(got) == {"visla", "sugarcrepe"} and got["visla"] == visla


def test_aro_retrieval_and_bivlc_fixtures(tmp_path, shared_benchmarks):
    root = tmp_path / "benchmarks"
    (root / "aro").mkdir(parents=True)
    (root / "retrieval").mkdir()
    karpathy = [{"image": f"val2014/COCO_val2014_{i:012d}.jpg", "caption": ["a"]} for i in (5, 6)]
    (root / "aro" / "coco_karpathy_test.json").write_text(json.dumps(karpathy))
    vg = [{"image_path": f"{v}.jpg", "true_caption": "x", "false_caption": "y"} for v in (11, 12, 13)]
    (root / "aro" / "visual_genome_relation.json").write_text(json.dumps(vg))
    aro = benchmark_ids("aro", root)
    assert aro.ids == {5, 6} and any("image_data.json" in n for n in aro.notes)  # VG unchecked
    (root / "aro" / "image_data.json").write_text(json.dumps(
        [{"image_id": 11, "coco_id": 900}, {"image_id": 12, "coco_id": None}, {"image_id": 14, "coco_id": 901}]))
    assert coco_ids_of("aro", root) == {5, 6, 900}  # only VG 11 is a COCO image among 11-13
    assert coco_ids_of("left_right", root) == {900}
    assert coco_ids_of("retrieval", root) == {5, 6}  # ARO's copy of the Karpathy test file
    (root / "retrieval" / "coco_karpathy_test.json").write_text(json.dumps(karpathy[:1]))
    assert coco_ids_of("retrieval", root) == {5}  # retrieval/ is looked at first

    assert coco_ids_of("bivlc", root) is None
    ds = datasets.Dataset.from_dict({"caption": ["a", "b"], "negative_caption": ["c", "d"]})
    ds.save_to_disk(str(root / "bivlc"))
    found = benchmark_ids("bivlc", root)  # no id column: SugarCrepe's images stand for BiVLC's
    assert found.ids is None and any("SugarCrepe" in n for n in found.notes)
    (root / "sugarcrepe").symlink_to(shared_benchmarks / "sugarcrepe")
    assert coco_ids_of("bivlc", root) == coco_ids_of("sugarcrepe", root)
    ds.add_column("filename", ["000000000007.jpg", "000000000008.jpg"]).save_to_disk(str(tmp_path / "b2"))
    (tmp_path / "b2").rename(root / "bivlc2")
    shutil.rmtree(root / "bivlc")
    (root / "bivlc2").rename(root / "bivlc")
    assert coco_ids_of("bivlc", root) == {7, 8}  # an id column wins


def test_a_bad_benchmark_file_is_named(tmp_path):
    (tmp_path / "sugarcrepe").mkdir()
    (tmp_path / "sugarcrepe" / "add_att.json").write_text("{not json")
    with pytest.raises(ImageIdError, match="add_att.json: not readable JSON"):
        coco_ids_of("sugarcrepe", tmp_path)
    (tmp_path / "sugarcrepe" / "add_att.json").write_text(json.dumps({"0": {"filename": "cat.png"}}))
    with pytest.raises(ImageIdError, match="item 0: image 'cat.png' has no COCO id"):
        coco_ids_of("sugarcrepe", tmp_path)
