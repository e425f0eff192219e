"""The negclip rule set makes NegCLIP's negatives: parity with an independent transcription.

`reference` below is a transcription of the procedure of NegCLIP's negative-making script
(Yuksekgonul et al., ICLR 2023), written apart from `datagen/negatives/negclip.py` and as
plainly: a full spaCy pipeline, `nlp(caption)` one caption at a time, every pair of every swap
type instead of one random pair. On SugarCrepe's 4,345 distinct positive captions the
generator's set of negatives per caption must equal the reference's, and golden hashes lock
the generator's output (every candidate, and the seeded one-per-type sample) against drift: a
change to the compclip rules can never move them.
"""
from __future__ import annotations

import hashlib
import itertools
import json

import pytest

from compclip.datagen.negatives.base import SPACY_MODEL

# sha256 of the sorted [caption, sorted negatives] list (every candidate), and of the seed-0
# sample-mode output in order; change them only with a deliberate change of the negclip rules
GOLDEN_ALL = "04600055c6282a54e2d262294cd4fddfbcff86d4d040da2185e658ef5361f405"
GOLDEN_SAMPLE = "7d6b7d97d34f13142f7bfbae095e910631e5d6ceccdb0e7e7dad043332c6098c"


def reference(nlp, sentence: str) -> set[str]:
    """Every negative NegCLIP's script can make of `sentence`."""
    from spacy.matcher import Matcher
    from spacy.util import filter_spans

    def same(a: str, b: str) -> bool:
        def bare(s: str) -> str:
            return " ".join(s.replace(".", "").replace(",", "").strip().split())
        return bare(a) == bare(b)

    doc = nlp(sentence)
    words = [t.text for t in doc]
    out = set()

    def swap_phrases(spans):
        for x, y in itertools.permutations(spans, 2):
            new = sentence.replace(x.text, "123X456").replace(y.text, x.text).replace("123X456", y.text)
            if not same(new, sentence):
                out.add(new.lower())

    swap_phrases([c for c in doc.noun_chunks if len(c.text.split()) > 2])
    matcher = Matcher(nlp.vocab)
    matcher.add("Verb phrase", [[{"POS": "VERB", "OP": "?"}, {"POS": "ADV", "OP": "*"},
                                 {"POS": "AUX", "OP": "*"}, {"POS": "VERB", "OP": "+"}]])
    swap_phrases(filter_spans([doc[s:e] for _, s, e in matcher(doc)]))
    for attr, value in (("tag_", "NN"), ("tag_", "NNS"), ("pos_", "ADV"), ("pos_", "ADJ")):
        index = [t.i for t in doc if getattr(t, attr) == value]
        for i, j in itertools.combinations(index, 2):
            new = list(words)
            new[i], new[j] = new[j], new[i]
            if not same(" ".join(new), sentence):
                out.add(" ".join(new))
    return out


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode("utf-8")).hexdigest()


@pytest.fixture(scope="module")
def captions(shared_benchmarks):
    from compclip.datagen.negatives.audit import sugarcrepe_captions
    caps = sugarcrepe_captions(shared_benchmarks / "sugarcrepe")
    assert len(caps) == 4345
    return caps


@pytest.fixture(scope="module")
def every_candidate(captions):
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    return RuleNegativeGenerator(rules="negclip", mode="all", cap=None).generate(captions)


def test_every_caption_has_exactly_the_reference_negatives(captions, every_candidate):
    import spacy
    nlp = spacy.load(SPACY_MODEL)  # the whole pipeline, as the script loaded it
    pairs = [(c, reference(nlp, c), {n.text for n in negs}) for c, negs in zip(captions, every_candidate)]
    differ = [(c, sorted(ref ^ ours)) for c, ref, ours in pairs if ref != ours]
    assert not differ, f"{len(differ)} captions differ, e.g. {differ[:3]}"
    covered = sum(bool(negs) for negs in every_candidate) / len(captions)
    assert covered > 0.97  # the script leaves captions with one noun, one adjective ... without


def test_golden_hashes(captions, every_candidate):
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    every = sorted([c, sorted(n.text for n in negs)] for c, negs in zip(captions, every_candidate))
    sample = [[(n.subkind, n.text) for n in negs]
              for negs in RuleNegativeGenerator(rules="negclip").generate(captions, seed=0)]
    assert {"all": _digest(every), "sample": _digest(sample)} == {"all": GOLDEN_ALL, "sample": GOLDEN_SAMPLE}


def test_sample_mode_is_one_random_pair_per_type(captions, every_candidate):
    """Sample mode is the script: one pair per type, so at most one negative per sub-kind,
    always one of the candidates, and none where the drawn pair gives the caption back."""
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    sample = RuleNegativeGenerator(rules="negclip").generate(captions[:500], seed=3)
    for negs, every in zip(sample, every_candidate):
        subkinds = [n.subkind for n in negs]
        assert len(subkinds) == len(set(subkinds))
        assert {(n.subkind, n.text) for n in negs} <= {(n.subkind, n.text) for n in every}
    # a caption with two equal nouns and one other: a third of the draws give the caption back
    caption = "A dog next to a dog on a bed"
    drawn = [RuleNegativeGenerator(rules="negclip", kinds=["swap:noun"]).generate([caption], seed=s)[0]
             for s in range(300)]
    share_empty = sum(not d for d in drawn) / len(drawn)
    assert 0.25 < share_empty < 0.42, share_empty


def test_known_answers_from_the_authors_release():
    """Negatives that appear in the validation file NegCLIP's authors released with their code
    (mertyg/vision-language-models-are-bows, temp_data/valid_neg_clip.tsv), spelled as there."""
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    gen = RuleNegativeGenerator(rules="negclip", mode="all", cap=None)
    cases = {
        "A little girl holding a kitten next to a blue fence.":
            "a blue fence holding a kitten next to a little girl.",
        "Large elephant rubbing itself up against a large tree. ":
            "large elephant rubbing itself up against a Large tree .",
        "A man holding a sausage dog and looking at the sausage dog":
            "a man holding the sausage dog and looking at a sausage dog",
        "A toilet sitting in a bathroom next to a sink.": "A bathroom sitting in a toilet next to a sink .",
    }
    for (caption, expected), negs in zip(cases.items(), gen.generate(list(cases))):
        assert expected in {n.text for n in negs}, (caption, [n.text for n in negs])


def test_the_compclip_rules_are_not_the_reference(captions):
    """The parity test can fail: the guarded rules' swaps differ from the script's."""
    import spacy
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    nlp = spacy.load(SPACY_MODEL)
    some = captions[:200]
    ours = RuleNegativeGenerator(kinds=["swap"], mode="all", plausibility=None).generate(some)
    assert sum(reference(nlp, c) != {n.text for n in negs} for c, negs in zip(some, ours)) > 100
