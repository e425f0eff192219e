"""Bias audit on known pairs, and the real SugarCrepe captions as a corpus smoke test."""
import numpy as np
import pytest

from compclip.datagen.negatives import audit
from compclip.datagen.negatives.base import normalise


def bag_of_words(texts):
    """An order-blind encoder: it cannot tell a pure reordering from its positive."""
    from sklearn.feature_extraction.text import HashingVectorizer
    return HashingVectorizer(n_features=2 ** 10, alternate_sign=False).transform(texts).toarray()


@pytest.fixture(scope="module")
def sugarcrepe(shared_benchmarks):
    return audit.load_sugarcrepe(shared_benchmarks / "sugarcrepe")


def test_sugarcrepe_groups_and_reorder_share(sugarcrepe):
    assert {k: len(v) for k, v in sugarcrepe.items()} == {
        "add:att": 692, "add:obj": 2062, "replace:att": 788, "replace:obj": 1652,
        "replace:rel": 1406, "swap:att": 666, "swap:obj": 245}
    # the benchmark README: 164 of 245 swap_obj and 408 of 666 swap_att use the same words
    # (swap_obj depends on tokenisation: "a woman's head" -> "a boy's head" counts here, 166)
    assert sum(audit.is_reordering(p, n) for p, n in sugarcrepe["swap:obj"]) == 166
    assert sum(audit.is_reordering(p, n) for p, n in sugarcrepe["swap:att"]) == 408


def test_blind_probe_finds_a_telltale_word_and_not_a_reordering():
    nouns = ["dog", "cat", "man", "horse", "bird", "car", "boat", "child", "table", "tree"]
    places = ["park", "beach", "street", "field", "room", "yard", "lake", "road"]
    pos = [f"a {a} near the {b} in the {p}" for a in nouns for b in nouns if a != b for p in places[:2]]
    reorder = [(p, " ".join(p.split()[:1] + [p.split()[4], "near the", p.split()[1]] + p.split()[5:]))
               for p in pos]
    assert all(audit.is_reordering(p, n) for p, n in reorder)
    telltale = [(p, p.replace(" in the ", " in the strange ")) for p in pos]
    report = audit.audit({"reorder": reorder, "telltale": telltale}, bag_of_words, max_pairs=150)
    assert report["reorder"]["reorder"] == 1.0 and report["telltale"]["reorder"] == 0.0
    assert report["reorder"]["blind_acc"] <= 0.6
    assert report["telltale"]["blind_acc"] >= 0.95
    table = audit.markdown_table(report, {"reorder": report["reorder"]})
    assert "| reorder | 150 | 100.0 |" in table


def test_coverage_per_kind_from_pairs():
    """Hand-made groups over 5 captions: swap covers a, b, c (3/5: its sub-kinds add up to 4/5 and
    the best is 2/5); replace covers a, d; add covers nothing, so it is not listed."""
    groups = {"swap:obj": [("a", "x"), ("b", "x")], "swap:att": [("a", "y")], "swap:noun": [("c", "z"), ("c", "w")],
              "replace:obj": [("a", "v")], "replace:rel": [("d", "u"), ("a", "t")]}
    per_sub, per_kind = audit.coverage(groups, 5)
    assert per_kind == pytest.approx({"swap": 3 / 5, "replace": 2 / 5})
    assert per_sub == pytest.approx({"swap:obj": 2 / 5, "swap:att": 1 / 5, "swap:noun": 1 / 5,
                                     "replace:obj": 1 / 5, "replace:rel": 2 / 5})
    ours = {k: {"pairs": len(v)} for k, v in groups.items()}
    table = audit.markdown_table(ours, {}, per_sub, per_kind)
    assert table.endswith("Coverage per kind (a negative of any of its sub-kinds): replace 40.0 %, swap 60.0 %\n")
    assert "| swap:noun | 2 | – | – | 20.0 |" in table
    assert "Coverage per kind" not in audit.markdown_table(ours, {}, per_sub)


def test_sugarcrepe_captions_as_corpus_smoke(shared_benchmarks):
    captions = audit.sugarcrepe_captions(shared_benchmarks / "sugarcrepe")
    assert len(captions) == 4345
    corpus = captions[:1500]
    groups = audit.ours_on_captions(corpus, seed=0)
    coverage, coverage_kind = audit.coverage(groups, len(corpus))
    counts = {k: len(v) for k, v in groups.items()}
    print("negatives per kind:sub-kind:", counts)
    print("coverage per kind:sub-kind:", {k: round(v, 3) for k, v in coverage.items()})
    print("coverage per kind:", {k: round(v, 3) for k, v in coverage_kind.items()})
    # every rule fires on real captions; the common ones on most of them
    assert set(groups) == {f"swap:{s}" for s in ("noun_chunk", "verb_phrase", "noun", "noun_plural",
                                                  "adverb", "adjective", "obj", "att")} | {
        "replace:obj", "replace:att", "replace:rel", "add:obj", "add:att"}
    # with the plausibility filter (default): replace and add cover >= 90 % of the captions;
    # swap only about a third since the plausibility guards (swap:obj takes only scenes that
    # can exist, as rare as SugarCrepe's; docs/negatives.md, Bias audit), below issue 17's 80 %
    # add:obj 0.75: no neighbour after a place / scene / weather since d7a1d8d (89.7 -> 83.8 %),
    # co-subjects and companions that fit the subject since ce8bd56 (-> 79.7 %); the add kind
    # keeps >= 93 % (the floor below; 94.8 % since f2495f4's scene check), which is what
    # issue 17's 80 % is about; replace:obj 0.8: only nouns that fit the scene since f2495f4
    # (88.5 -> 85.2 % on all 4,345 captions, 82 % on these 1,500, whose smaller scene model
    # refuses more); replace:att 0.25: since 93ec125 an adjective of no attribute group, or of
    # an animal, food, plant or place, is replaced only by one seen with its head, and never the
    # first half of a unit ("polar bear") (43.6 -> 34.4 % on all 4,345 captions, 30.0 % on these
    # 1,500, whose smaller vocabulary knows fewer adjectives per head)
    for kind, floor in {"replace:obj": 0.8, "replace:rel": 0.45, "add:obj": 0.75, "add:att": 0.85,
                        "swap:obj": 0.02, "swap:noun": 0.2, "replace:att": 0.25}.items():
        assert coverage[kind] >= floor, (kind, coverage[kind])
    for kind, floor in {"swap": 0.25, "replace": 0.9, "add": 0.93}.items():
        assert coverage_kind[kind] >= floor, (kind, coverage_kind[kind])
        subs = [v for k, v in coverage.items() if k.startswith(kind + ":")]
        assert max(subs) <= coverage_kind[kind] <= min(1.0, sum(subs)) + 1e-9
    for pairs in groups.values():
        assert all(normalise(p) != normalise(n) for p, n in pairs)
    # swaps reorder the caption's words; replace and add never do
    assert np.mean([audit.is_reordering(p, n) for p, n in groups["swap:noun"]]) > 0.9
    assert not any(audit.is_reordering(p, n) for p, n in groups["replace:obj"] + groups["add:att"])


def test_pairs_from_a_generated_shard_set(tmp_path):
    from compclip.datagen.negatives.pipeline import GenerateOptions, run_generate
    src = tmp_path / "caps.csv"
    src.write_text("image,caption\n" + "".join(
        f"{i}.jpg,A {c} dog is sitting on a wooden bench near a cat.\n"
        for i, c in enumerate(["black", "white", "brown", "small"])))
    run_generate(src, tmp_path / "out", GenerateOptions(progress=False, plausibility=None))
    groups = audit.pairs_from_shards(tmp_path / "out")
    assert {"swap:obj", "replace:obj", "add:att"} <= set(groups)
    assert all(p.startswith("A ") and p != n for pairs in groups.values() for p, n in pairs)


def test_audit_command_checks_its_input_before_loading_the_model(tmp_path, monkeypatch, capsys):
    from compclip.datagen.negatives.__main__ import main as cli

    def no_model(*args, **kwargs):
        raise AssertionError("the encoder was loaded before the input was checked")
    monkeypatch.setattr(audit, "minilm_encoder", no_model)
    assert cli(["audit", "--sugarcrepe", str(tmp_path / "nowhere"), "--json", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nowhere/add_att.json: cannot read SugarCrepe file" in err[0]
    assert not (tmp_path / "a.json").exists()
