"""Blind baselines (`eval.blind`): each judge against an independent re-computation from the raw
benchmark files, leave-one-image-out, the tie rules, and the `blind:<judge>` rows in the reports."""
import csv
import json
import math
import re
from collections import Counter

import numpy as np
import pytest
import torch

from compclip.eval.blind.minilm import NearestCaptionJudge
from compclip.eval.blind.ngram import BigramJudge
from compclip.eval.blind.tasks import run_blind
from compclip.eval.cli import main
from tests.fixtures.eval_data import make_data_root

SC_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
SCPP_SUBSETS = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def n_words(text):  # written apart from eval.blind.length: letters, digits and apostrophes
    return len(re.findall(r"[0-9a-z']+", text.casefold()))


@pytest.fixture(scope="module")
def real_root(tmp_path_factory, shared_benchmarks):
    root = tmp_path_factory.mktemp("blind_real")
    for b in ("sugarcrepe", "sugarcrepe_pp", "visla"):
        (root / b).symlink_to(shared_benchmarks / b, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def length_rows(real_root):
    return run_blind(["length"], ["sugarcrepe", "sugarcrepe_pp", "visla"], str(real_root))["blind:length"]


@pytest.fixture(scope="module")
def fixture_root(tmp_path_factory):
    return make_data_root(tmp_path_factory.mktemp("blind_fixture") / "data", n=4, seed=3)


def test_length_matches_the_raw_sugarcrepe_files(length_rows, shared_benchmarks):
    r = length_rows["sugarcrepe"]
    wins, n = {}, {}
    for s in SC_SUBSETS:
        items = json.loads((shared_benchmarks / "sugarcrepe" / f"{s}.json").read_text(encoding="utf-8")).values()
        wins[s] = sum(n_words(it["caption"]) < n_words(it["negative_caption"]) for it in items)
        n[s] = len(items)
        assert r.headline[s] == wins[s] / n[s], s
        ties = sum(n_words(it["caption"]) == n_words(it["negative_caption"]) for it in items)
        assert r.categories[s]["tie"] == ties / n[s] and r.categories[s]["n"] == n[s]
    assert sum(n.values()) == 7511
    assert r.headline["micro"] == sum(wins.values()) / 7511
    assert r.headline["macro"] == pytest.approx(np.mean([wins[s] / n[s] for s in SC_SUBSETS]), abs=1e-12)
    assert r.headline["add"] == (wins["add_att"] + wins["add_obj"]) / (n["add_att"] + n["add_obj"])
    assert r.headline["add"] > 0.9  # an add_* negative is the positive plus words: shorter wins
    assert r.categories["swap_obj"]["tie"] > 0.9  # a swap keeps the words: a tie, counted wrong


def test_length_matches_the_raw_triplet_files(length_rows, shared_benchmarks):
    r = length_rows["sugarcrepe_pp"]
    for s in SCPP_SUBSETS:
        items = json.loads((shared_benchmarks / "sugarcrepe_pp" / f"{s}.json").read_text(encoding="utf-8"))
        p1 = [n_words(it["caption"]) < n_words(it["negative_caption"]) for it in items]
        p2 = [n_words(it["caption2"]) < n_words(it["negative_caption"]) for it in items]
        assert r.headline[f"{s}/p1_n"] == sum(p1) / len(items)
        assert r.headline[f"{s}/p2_n"] == sum(p2) / len(items)
        assert r.headline[f"{s}/i2t"] == sum(a and b for a, b in zip(p1, p2)) / len(items)
    assert {"all/i2t", "macro/i2t"} <= set(r.headline)
    v = length_rows["visla"]
    with open(shared_benchmarks / "visla" / "Generic_VISLA.tsv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    idx = [rows[0].index(c) for c in ("caption", "second positive", "negative_caption")]
    ok = [n_words(row[idx[0]]) < n_words(row[idx[2]]) and n_words(row[idx[1]]) < n_words(row[idx[2]])
          for row in rows[1:] if row[idx[2]].strip()]
    assert len(ok) == 973 and v.headline["generic/i2t"] == sum(ok) / 973


def test_blind_rows_hold_only_caption_choices(length_rows):
    assert not [k for k in length_rows["sugarcrepe_pp"].headline if "t2t" in k]  # text-only already
    assert set(length_rows["visla"].headline) == {f"{s}/{m}" for s in ("generic", "spatial")
                                                  for m in ("i2t", "p1_n", "p2_n")}


def grams(text):
    toks = ["<s>"] + re.findall(r"[0-9a-z']+", text.casefold()) + ["</s>"]
    return list(zip(toks, toks[1:]))


def brute_bigram_score(text, corpus_grams, vocab_size, k=0.1):
    """Mean log P of the caption's bigrams under add-k counts refitted from scratch on `corpus_grams`."""
    pairs = Counter(g for gs in corpus_grams for g in gs)
    ctx = Counter(g[0] for gs in corpus_grams for g in gs)
    return float(np.mean([np.log((pairs[g] + k) / (ctx[g[0]] + k * vocab_size)) for g in grams(text)]))


def test_ngram_matches_a_model_refitted_without_each_items_image(real_root, shared_benchmarks):
    subsets = ("swap_att", "swap_obj")
    got = run_blind(["ngram"], ["sugarcrepe"], str(real_root),
                    {"sugarcrepe": {"subsets": list(subsets)}})["blind:ngram"]["sugarcrepe"]
    items = {s: list(json.loads((shared_benchmarks / "sugarcrepe" / f"{s}.json").read_text()).values())
             for s in subsets}
    corpus = {(it["caption"], it["filename"]) for its in items.values() for it in its}  # each pair once
    by_image = {}
    for caption, image in corpus:
        by_image.setdefault(image, []).append(grams(caption))
    vocab = {w for caption, _ in corpus for _, w in grams(caption)}
    shared = 0
    for s, its in items.items():
        correct = 0
        for it in its:
            others = [g for image, gs in by_image.items() if image != it["filename"] for g in gs]
            shared += len(by_image[it["filename"]]) > 1
            pos, neg = (brute_bigram_score(it[k], others, len(vocab) + 1) for k in ("caption", "negative_caption"))
            correct += pos > neg
        assert got.headline[s] == correct / len(its), s
    assert shared > 0  # some images have several positives here: all of them are left out


def test_ngram_leaves_the_own_image_out():
    judge = BigramJudge()
    judge.fit(["zebra eats pizza", "a dog runs"], ["img1", "img2"])
    seen_only_in_own = judge.score(["zebra eats pizza", "pizza eats zebra"], ["img1", "img1"])
    assert seen_only_in_own[0] == seen_only_in_own[1]  # its own caption gives it no credit
    from_elsewhere = judge.score(["zebra eats pizza", "pizza eats zebra"], ["img2", "img2"])
    assert from_elsewhere[0] > from_elsewhere[1]


class Letters:
    """A stand-in encoder: L2-normalised letter counts."""

    def encode_texts(self, texts):
        out = torch.zeros(len(texts), 26)
        for i, t in enumerate(texts):
            for ch in re.findall("[a-z]", t.lower()):
                out[i, ord(ch) - 97] += 1
        return torch.nn.functional.normalize(out, dim=-1)


def test_minilm_judge_is_nearest_caption_of_another_image():
    corpus, groups = ["a cat on a mat", "dogs run", "zzz"], ["i1", "i2", "i3"]
    judge = NearestCaptionJudge(Letters())
    judge.fit(corpus, groups)
    texts, own = ["a cat on a mat", "dogs run"], ["i1", "i3"]
    emb, ref = Letters().encode_texts(texts), Letters().encode_texts(corpus)
    want = [max(float(emb[i] @ ref[j]) for j in range(3) if groups[j] != own[i]) for i in range(2)]
    assert judge.score(texts, own) == pytest.approx(want)
    assert judge.score(["a cat on a mat"], ["i1"])[0] < 0.999  # its own caption is masked


def test_bivlc_images_are_keyed_by_their_bytes(fixture_root):
    import hashlib

    import datasets
    from compclip.eval.blind.tasks import bivlc_image_keys
    table = datasets.load_from_disk(str(fixture_root / "bivlc")).data.table
    want = [hashlib.sha1(cell["bytes"]).hexdigest() for cell in table.column("image").to_pylist()]
    assert bivlc_image_keys(str(fixture_root / "bivlc")) == want and len(set(want)) == len(want)


def test_tie_rules_follow_each_benchmark(fixture_root):
    r = run_blind(["length"], ["aro", "bivlc"], str(fixture_root))["blind:length"]
    aro = r["aro"].headline
    # VG: swapped words, equal length: argmax over [false, true] takes the false one (wrong)
    assert aro["vg_relation/micro"] == 0 and aro["vg_attribution/micro"] == 0
    # Order: perturbations keep the words: argmax over [true, ...] takes the true one (correct)
    assert aro["coco_order/mean"] == 1 and any("coco_order" in n and "100.0 %" in n for n in r["aro"].notes)
    b = r["bivlc"]
    assert set(b.headline) == {"i2t", "i2t_pos", "i2t_neg"}  # T2I and Group choose between images
    ng = run_blind(["ngram"], ["bivlc"], str(fixture_root))["blind:ngram"]["bivlc"]
    assert ng.headline["i2t"] == 0  # one choice for both images: never right for both
    for row in ng.categories.values():
        assert row["i2t_pos"] + row["i2t_neg"] + row["tie"] == pytest.approx(1)


def test_cli_adds_blind_rows_and_none_for_image_benchmarks(real_root, tmp_path, capsys):
    rc = main(["score", "--blind", "length,ngram", "--benchmarks", "sugarcrepe,visla,retrieval,zeroshot",
               "--data-root", str(real_root), "--out", str(tmp_path), "--no-plots", "--quiet"])
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == {"blind:length", "blind:ngram"}
    for label, metrics in summary.items():
        assert {k.split("/")[0] for k in metrics} == {"sugarcrepe", "visla"}, label
    direct = run_blind(["ngram"], ["sugarcrepe"], str(real_root))["blind:ngram"]["sugarcrepe"]
    assert summary["blind:ngram"]["sugarcrepe/macro"] == direct.headline["macro"]
    md = (tmp_path / "results.md").read_text()
    assert "| metric | blind:length | blind:ngram |" in md
    assert "retrieval: no blind row" in md and "zeroshot: no blind row" in md
    assert "blind:length\tsugarcrepe/add\t" in capsys.readouterr().out


def test_cli_refuses_an_unknown_judge_before_anything_runs(real_root, capsys):
    assert main(["score", "--blind", "length,vera", "--benchmarks", "sugarcrepe", "--data-root",
                 str(real_root)]) == 2
    assert "unknown blind judge(s) 'vera'; known: length, ngram, minilm" in capsys.readouterr().err


def test_missing_text_files_are_listed_at_once(tmp_path, capsys):
    assert main(["score", "--blind", "length", "--benchmarks", "sugarcrepe,visla", "--data-root",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "sugarcrepe" in err and "visla" in err and "python -m eval download" in err


def test_blind_rows_beside_a_model(fixture_root, tmp_path):
    rc = main(["score", "--model", "micro-vit-32", "--pretrained", "none", "--label", "micro", "--blind", "length",
               "--benchmarks", "sugarcrepe,bivlc", "--data-root", str(fixture_root), "--out", str(tmp_path),
               "--no-plots", "--quiet", "--no-cache"])
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary) == ["micro", "blind:length"]
    assert "bivlc/group" in summary["micro"] and "bivlc/group" not in summary["blind:length"]
    assert (tmp_path / "blind_length.json").is_file()
