"""compclip.compat: each change to a third-party library, run patched and through its plain
fallback (the version check answering no); where the two must agree, they do. The tag -> POS
table against spaCy's own attribute_ruler on every SugarCrepe caption."""
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import compclip.compat as compat
from compclip.compat import spacy as cspacy
from compclip.compat import torch as ctorch
from compclip.datagen.negatives.base import SPACY_MODEL

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ["A man riding a horse on a beach.", "Two dogs are playing with a red ball in the park.",
            "The cat that is sitting on the sofa has a blue collar.", "Is there a cup next to the laptop?",
            "A woman who has long hair stands near a bus while it rains.", "Mr. Smith's dog-sled isn't here."]


def unchecked(monkeypatch, module):
    monkeypatch.setattr(module, "patched", lambda: False)


def test_version_check_warns_once_and_is_remembered(monkeypatch):
    monkeypatch.setattr(compat, "_WARNED", set())
    monkeypatch.setattr(compat, "_CHECKED", {})
    assert compat.in_checked_range("torch", "2.0", "99")
    with pytest.warns(compat.UncheckedVersion, match=r"torch .* is outside the range .*>=0.1,<0.2"):
        assert not compat.in_checked_range("torch", "0.1", "0.2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not compat.in_checked_range("torch", "0.1", "0.2")  # remembered, no second warning
        assert not compat.in_checked_range("torch", "0.3", "0.4")  # one warning per library
    with pytest.warns(compat.UncheckedVersion, match="not installed"):
        assert not compat.in_checked_range("no-such-distribution-x", "1", "2")


def test_installed_versions_are_the_checked_ones():
    """The environment the tests run in is the one the changes were checked on: the patched
    paths are what the rest of the suite exercises."""
    assert cspacy.patched() and ctorch.patched()


def test_import_spacy_hides_torch_only_where_checked(monkeypatch):
    code = ("import sys; from compclip.compat.spacy import import_spacy; import_spacy(); "
            "print('torch' in sys.modules, 'spacy.cli' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split() == ["False", "False"]
    fallback = ("import sys, compclip.compat.spacy as c; c.patched = lambda: False; c.import_spacy(); "
                "print('spacy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", fallback], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split() == ["True"]


def test_stop_words_read_as_a_file_equal_the_imported_lists(monkeypatch):
    patched = {lang: cspacy.stop_words(lang) for lang in ("en", "de", "fr")}
    unchecked(monkeypatch, cspacy)
    plain = {lang: cspacy.stop_words(lang) for lang in ("en", "de", "fr")}
    assert patched == plain and len(patched["en"]) > 300


def test_tagger_patched_and_plain_give_the_same_tags_and_pos(monkeypatch):
    nlp, table = cspacy.load_tagger(SPACY_MODEL)
    assert table is not None and "attribute_ruler" in nlp.disabled
    unchecked(monkeypatch, cspacy)
    plain, none = cspacy.load_tagger(SPACY_MODEL)
    assert none is None and "attribute_ruler" in plain.pipe_names and "parser" not in plain.pipe_names
    ours = [[(t.text, t.tag_, table.pos(t.tag_, t.text)) for t in d] for d in nlp.pipe(CAPTIONS)]
    theirs = [[(t.text, t.tag_, t.pos_) for t in d] for d in plain.pipe(CAPTIONS)]
    assert ours == theirs


def test_view_reads_spacys_pos_on_the_fallback_path(monkeypatch):
    """Outside the checked versions the ruler runs; `view` then reads the Doc's own POS."""
    from compclip.datagen.negatives.text import view
    unchecked(monkeypatch, cspacy)
    plain, _ = cspacy.load_tagger(SPACY_MODEL)
    doc = plain("A man is riding a horse.")
    assert doc.has_annotation("POS")
    assert view(doc).pos == [t.pos_ for t in doc] and view(doc).pos[2] == "AUX"


def test_pos_table_equals_spacys_attribute_ruler_on_every_sugarcrepe_caption(shared_benchmarks):
    """The table against the ruler itself, both after the same tagger: every token of the 4,345
    distinct SugarCrepe captions gets the same coarse POS. (Against the full pipeline, parser
    included, 288 of them differ, 6.6 %: the ruler's parse-dependent patterns, which no
    pipeline without the parser applies; compclip.compat.spacy.)"""
    from compclip.datagen.negatives.audit import sugarcrepe_captions
    from compclip.datagen.negatives.rules import load_nlp
    from compclip.datagen.negatives.text import view
    captions = sugarcrepe_captions(shared_benchmarks / "sugarcrepe")
    assert len(captions) == 4345
    nlp = load_nlp()
    ruler = nlp.get_pipe("attribute_ruler")
    differ = []
    for doc in nlp.pipe(captions, batch_size=256):
        ours = view(doc).pos
        doc = ruler(doc)  # spaCy's own: the same Doc, the ruler applied
        if ours != [t.pos_ for t in doc]:
            differ.append(doc.text)
    assert differ == [], f"{len(differ)} captions differ, e.g. {differ[:3]}"


def micro_clip():
    from compclip.models import load_model
    torch.manual_seed(0)
    return load_model("micro-vit-32").model


def test_one_dim_logit_scale_keeps_state_dicts_plain_and_the_fallback_leaves_the_model(monkeypatch):
    plain = micro_clip()
    model = micro_clip()
    assert ctorch.one_dim_logit_scale(model) and model.logit_scale.shape == (1,)
    saved, reference = model.state_dict(), plain.state_dict()
    assert saved["logit_scale"].dim() == 0 and saved.keys() == reference.keys()
    assert all(torch.equal(saved[k], reference[k]) for k in saved)
    with torch.no_grad():
        reference["logit_scale"].fill_(1.5)
    model.load_state_dict(reference)  # a plain (0-dim) state dict loads
    assert model.logit_scale.shape == (1,) and float(model.logit_scale.detach()) == 1.5
    plain.load_state_dict(model.state_dict())  # and what it saves loads into plain open_clip
    assert float(plain.logit_scale.detach()) == 1.5
    unchecked(monkeypatch, ctorch)
    untouched = micro_clip()
    assert not ctorch.one_dim_logit_scale(untouched) and untouched.logit_scale.dim() == 0
    assert all(torch.equal(v, micro_clip().state_dict()[k]) for k, v in untouched.state_dict().items())
