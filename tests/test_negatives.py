"""Rule negatives: each swap type on hand-written captions, labels, replace/add rules, determinism."""
import random
import re

import pytest

from compclip.datagen.negatives import NEGATIVE_FNS, NegativeGenerator
from compclip.datagen.negatives.base import normalise
from compclip.datagen.negatives.rules import RuleNegativeGenerator, load_nlp
from compclip.datagen.negatives.vocab import ATTRIBUTE_GROUPS, Vocabulary, is_synonym
from compclip.shardset.schema import SUBKINDS

# caption -> the one negative each swap type can make from it
SWAPS = [
    ("noun_chunk", "A young boy in a red hat watches an old man.",
     "An old man in a red hat watches a young boy."),
    ("verb_phrase", "A cat sleeps quietly while a dog barks loudly.",
     "A cat barks quietly while a dog sleeps loudly."),
    ("noun", "A cat sleeps quietly while a dog barks loudly.",
     "A dog sleeps quietly while a cat barks loudly."),
    ("noun_plural", "Two dogs chase three cats.", "Two cats chase three dogs."),
    ("adverb", "A cat sleeps quietly while a dog barks loudly.",
     "A cat sleeps loudly while a dog barks quietly."),
    ("adjective", "The man with a red hat is riding a brown horse.",
     "The man with a brown hat is riding a red horse."),
    ("obj", "Two dogs chase three cats.", "Three cats chase two dogs."),
    ("att", "The man with a red hat is riding a brown horse.",
     "The man with a brown hat is riding a red horse."),
]
CORPUS = [
    "A man in a red shirt is riding a brown horse on the beach.",
    "A woman in a blue dress is holding a white umbrella.",
    "Two dogs are playing with a yellow ball in the park.",
    "A cat is sitting on a wooden table next to a laptop.",
    "A small boy is eating a large pizza at the table.",
    "A black dog is sitting on the green grass.",
    "A man is walking a dog on the street.",
    "Three girls are riding bikes on a busy street.",
    "An old woman is reading a book on a bench.",
    "A white cat is sleeping on a red couch.",
    "A group of people standing on a beach with surfboards.",
    "A young man is holding a tennis racket on a court.",
] * 2


@pytest.fixture(scope="module")
def nlp():
    return load_nlp()


@pytest.fixture(scope="module")
def vocab(nlp):
    gen = RuleNegativeGenerator(nlp=nlp)
    from compclip.datagen.negatives.text import view
    voc = Vocabulary.mine(view(d) for d in gen.parse(CORPUS))
    voc.lm = None  # rule mechanics only: no plausibility filter (tests/test_negatives_quality.py has it)
    voc.scene = None  # nor the scene check (24 captions say little about what comes together)
    return voc


def test_every_schema_subkind_but_swap_rel_has_a_rule():
    expected = {(k, s) for k, subs in SUBKINDS.items() for s in subs} - {("swap", "rel")}
    assert set(NEGATIVE_FNS) == expected


@pytest.mark.parametrize("subkind,caption,expected", SWAPS, ids=[f"{s[0]}-{i}" for i, s in enumerate(SWAPS)])
def test_swap_types_known_answers(nlp, subkind, caption, expected):
    gen = RuleNegativeGenerator(kinds=[f"swap:{subkind}"], mode="all", cap=20, nlp=nlp)
    texts = [n.text for n in gen.generate([caption])[0]]
    assert expected in texts
    sampled = RuleNegativeGenerator(kinds=[f"swap:{subkind}"], nlp=nlp).generate([caption], seed=3)[0]
    assert len(sampled) == 1 and sampled[0].subkind == subkind and sampled[0].kind == "swap"


def test_swap_without_candidates_gives_nothing(nlp):
    gen = RuleNegativeGenerator(kinds=["swap:noun_plural", "swap:adverb"], nlp=nlp)
    assert gen.generate(["A dog on a bench."])[0] == []
    # two identical nouns: swapping them gives the caption back, which must be dropped
    assert RuleNegativeGenerator(kinds=["swap:noun"], nlp=nlp).generate(["A dog and a dog."])[0] == []


def test_generator_protocol_labels_and_never_the_caption(nlp, vocab):
    gen = RuleNegativeGenerator(mode="all", cap=4, vocab=vocab, nlp=nlp)
    assert isinstance(gen, NegativeGenerator)
    out = gen.generate(CORPUS[:12], seed=1)
    assert len(out) == 12
    kinds_seen = set()
    for caption, negs in zip(CORPUS, out):
        per_label = {}
        for n in negs:
            assert n.subkind in SUBKINDS[n.kind]
            assert n.source == "rules"
            assert normalise(n.text) != normalise(caption), (caption, n)
            per_label.setdefault((n.kind, n.subkind), []).append(normalise(n.text))
            kinds_seen.add((n.kind, n.subkind))
        for texts in per_label.values():
            assert len(texts) == len(set(texts)) <= 4
    assert {k for k, _ in kinds_seen} == {"swap", "replace", "add"}


def test_replace_obj_changes_one_noun_and_never_to_a_synonym(nlp, vocab):
    caption = "A man is riding a horse."
    gen = RuleNegativeGenerator(kinds=["replace:obj"], mode="all", cap=8, vocab=vocab, nlp=nlp)
    for seed in range(10):
        for n in gen.generate([caption], seed=seed)[0]:
            old, new = caption.rstrip(".").split(), n.text.rstrip(".").split()
            assert len(old) == len(new)
            changed = [(a, b) for a, b in zip(old, new) if a != b and {a, b} != {"a", "an"}]
            assert len(changed) == 1, n.text
            a, b = changed[0]
            assert a in ("man", "horse") and not is_synonym(a, b), n.text
            assert b.lower() not in ("guy", "gentleman", "male", "men")


def test_replace_att_keeps_the_attribute_group(nlp, vocab):
    colours = set(ATTRIBUTE_GROUPS["colour"].split())
    gen = RuleNegativeGenerator(kinds=["replace:att"], vocab=vocab, nlp=nlp)
    for seed in range(10):
        # a thing's colour is free (an animal's is drawn only from the colours seen with it)
        (neg,) = gen.generate(["A black car is parked on the grass."], seed=seed)[0]
        new = neg.text.split()[1]
        assert new in colours and new != "black", neg.text


def test_replace_rel_changes_a_verb_or_preposition(nlp, vocab):
    gen = RuleNegativeGenerator(kinds=["replace:rel"], mode="all", cap=6, vocab=vocab, nlp=nlp)
    negs = gen.generate(["A cat is sitting on a wooden table."], seed=0)[0]
    assert negs
    for n in negs:
        words = n.text.split()
        assert words[0:2] == ["A", "cat"] and words[-2:] == ["wooden", "table."]
        assert words[3] != "sitting" or words[4] != "on"


def test_add_obj_fixes_agreement_and_add_att_fixes_article(nlp, vocab):
    add_obj = RuleNegativeGenerator(kinds=["add:obj"], mode="all", cap=10, vocab=vocab, nlp=nlp)
    negs = add_obj.generate(["A dog is sleeping."], seed=0)[0]
    assert len(negs) >= 2
    for n in negs:  # after, before or with the dog, or beside the scene; the verb agrees
        assert re.fullmatch(r"(A dog and an? \w+ are sleeping|An? \w+ and a dog are sleeping|"
                            r"A dog with an? \w+ is sleeping|A dog is sleeping (next to|near) an? \w+)\.",
                            n.text), n.text
    add_att = RuleNegativeGenerator(kinds=["add:att"], vocab=Vocabulary(
        {"adj/*": [("old", 5), ("red", 3)]}), nlp=nlp)
    (n,) = add_att.generate(["A umbrella is open."], seed=0)[0]  # sic: the rule fixes the article
    assert n.text in ("An old umbrella is open.", "A red umbrella is open."), n.text


def test_determinism_and_independence_from_batching(nlp, vocab):
    gen = RuleNegativeGenerator(vocab=vocab, nlp=nlp)
    a = gen.generate(CORPUS, seed=7)
    assert a == gen.generate(CORPUS, seed=7)
    assert a[5:] == gen.generate(CORPUS[5:], seed=7, start_index=5)
    assert a != gen.generate(CORPUS, seed=8)


def test_bad_captions_are_skipped_and_counted(nlp):
    gen = RuleNegativeGenerator(nlp=nlp, max_words=100)
    bad = ["", "   ", "这是一只在桌子上的猫", "Le chat noir dort sur le canapé rouge", "dog " * 1000, 42]
    out = gen.generate(bad + ["Two dogs chase three cats."])
    assert out[:-1] == [[]] * len(bad)
    assert out[-1]
    assert gen.skipped == {"empty": 3, "non_english": 2, "too_long": 1}


def test_rule_function_contract_fn_doc_rng(nlp):
    doc = nlp("Two dogs chase three cats.")
    negs = NEGATIVE_FNS[("swap", "noun_plural")](doc, random.Random(0))
    assert [n.text for n in negs] == ["Two cats chase three dogs."]
    assert NEGATIVE_FNS[("replace", "obj")](doc, random.Random(0))  # built-in fallback vocabulary


def test_unknown_kind_is_one_clear_error():
    with pytest.raises(ValueError, match="swap:colour"):
        RuleNegativeGenerator(kinds=["swap:colour"])
