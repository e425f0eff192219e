"""The negatives command at scale (issue 37): what it holds per caption, what it repeats.

- The parses of the vocabulary sample, kept for the generation pass, are `text.Parsed` (text
  and token view), pickled, not spaCy Docs; the rules give the same negatives from them.
- A text input's items, read once to be permuted, are spilled to a temporary file: memory
  holds two int64 per item (before: a `marshal` record each in memory, ~250 bytes here; before
  that, `CaptionItem`s with their meta dicts, ~570). The kept parses are one pickled bytes
  object each (~1.3 KB traced; a `Parsed` of small objects held ~5 KB and, freed, left the
  heap fragmented).
- With `--workers 2` every caption is parsed once, by the workers (before: the vocabulary
  sample twice, in the main process for the vocabulary and again in the workers), and forked
  workers inherit the vocabulary instead of each reading `vocab.json` (calls counted across
  processes through a file).
- Past the vocabulary sample, a chunk is parsed one spaCy batch at a time.
- The vocabulary's caches of derived word sets stay within `CACHE_ENTRIES` each (the class sets
  of replace had no bound), and the negatives do not depend on those bounds.
- The closing report's speed counts the vocabulary pass (a fake clock).
- A caption whose crc32 equals a training caption's is not scored as left out (it crashed).
"""
from __future__ import annotations

import gc
import os
import sys
import tracemalloc

import pytest

from compclip.datagen.negatives.captions_io import CaptionItem

CAPTIONS = ["A man riding a brown horse on a sandy beach.", "Two dogs playing with a red ball in the park.",
            "A woman in a blue dress holding an umbrella.", "A plate of food next to a cup of coffee.",
            "A cat sleeping on a wooden bench near a tree.", "A large white bus parked on the side of a street."]


def _captions(n: int) -> list[str]:
    return [f"{c[:-1]} number {i}." for i, c in zip(range(n), CAPTIONS * (n // len(CAPTIONS) + 1))]


def _kept_parses(n: int) -> list:
    """The parses `build_vocabulary` keeps for `n` captions."""
    from compclip.datagen.negatives.pipeline import build_vocabulary
    items = (CaptionItem(f"k{i}", c) for i, c in enumerate(_captions(n)))
    parsed: list = []
    build_vocabulary(items, n, parsed=parsed)
    return parsed


def test_vocabulary_pass_keeps_compact_parses_that_give_the_same_negatives():
    from compclip.datagen.negatives.pipeline import reused
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    parsed = _kept_parses(300)
    assert len(parsed) == 300 and all(isinstance(p, bytes) for p in parsed)
    # a Doc with its cached view holds ~16 KB traced per caption of this length; a `Parsed`
    # (text + view, hundreds of small objects) ~5 KB; pickled, one bytes object of ~1.3 KB
    assert sum(sys.getsizeof(p) for p in parsed) / len(parsed) < 2000
    gen = RuleNegativeGenerator(plausibility=None)
    docs = gen.parse(_captions(300)[:40])
    for i, (doc, record) in enumerate(zip(docs, parsed)):
        kept = reused(record)
        assert kept.text == doc.text
        assert gen.negatives_for(kept, 0, i) == gen.negatives_for(doc, 0, i)


CACHES = {"unions": "_unions", "kept": "_kept_cache", "add_synonyms": "_add_synonyms",
          "add_without_synonyms": "_add_without_synonyms", "replace_class_sets": "_replace_class_sets",
          "replace_verbs_for_subject": "_replace_verbs_for_subject"}


def test_vocabulary_caches_stay_within_their_entries_and_do_not_change_the_negatives(monkeypatch):
    import copy
    from compclip.datagen.negatives import vocab as vocab_mod
    from compclip.datagen.negatives.pipeline import build_vocabulary
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    captions = _captions(300)
    mined = build_vocabulary((CaptionItem(f"k{i}", c) for i, c in enumerate(captions)), 300)
    assert set(CACHES) == set(vocab_mod.CACHE_ENTRIES)

    def run(limit=None):
        voc, largest, out = copy.deepcopy(mined), dict.fromkeys(CACHES, 0), []
        gen = RuleNegativeGenerator(vocab=voc)
        for i, doc in enumerate(gen.parse(captions[:60])):
            out.append(gen.negatives_for(doc, 0, i))
            for kind, attr in CACHES.items():
                largest[kind] = max(largest[kind], len(voc.__dict__.get(attr, ())))
        return out, largest

    free, sizes = run()
    assert min(sizes.values()) > 2, sizes  # a bound of 2 binds every one of them
    for kind in CACHES:
        monkeypatch.setitem(vocab_mod.CACHE_ENTRIES, kind, 2)
    bounded, sizes = run()
    assert bounded == free and max(sizes.values()) <= 2, sizes


@pytest.mark.slow
def test_two_workers_parse_each_caption_once_and_inherit_the_vocabulary(tmp_path, monkeypatch):
    from compclip.datagen.negatives import pipeline
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    from compclip.datagen.negatives.vocab import Vocabulary
    log = tmp_path / "calls.log"  # appended to by the main process and the forked workers alike

    def note(what: str) -> None:
        with open(log, "a") as handle:
            handle.write(what + "\n")
    parse, from_json = RuleNegativeGenerator.parse, Vocabulary.from_json.__func__

    def counted_parse(self, captions):
        note(f"parse {len(captions)} {os.getpid()}")
        return parse(self, captions)

    def counted_from_json(cls, path):
        note("from_json")
        return from_json(cls, path)
    monkeypatch.setattr(RuleNegativeGenerator, "parse", counted_parse)
    monkeypatch.setattr(Vocabulary, "from_json", classmethod(counted_from_json))
    src = tmp_path / "caps.csv"
    src.write_text("filepath,caption\n" + "".join(f"img{i}.jpg,{c}\n" for i, c in enumerate(_captions(90))))
    pipeline.run_generate(src, tmp_path / "out", pipeline.GenerateOptions(
        workers=2, chunk_size=20, vocab_sample=50, progress=False))
    calls = log.read_text().split("\n")[:-1]
    parses = [c.split()[1:] for c in calls if c.startswith("parse")]
    assert sum(int(n) for n, _ in parses) == 90  # before: 140
    assert sum(int(n) for n, pid in parses if int(pid) == os.getpid()) == 0  # before: the sample's 50
    assert "from_json" not in calls  # before: once per worker


def _traced_at_first_sample(tmp_path, monkeypatch, n: int) -> int:
    """Traced bytes held when `run_generate` writes its first sample (the run stops there), for
    a CSV of `n` captions and a vocabulary sample of 30."""
    from compclip.datagen.negatives import pipeline
    from compclip.shardset.shards import ShardSetWriter
    src = tmp_path / f"caps{n}.csv"
    src.write_text("filepath,caption\n" + "".join(f"{i:012d}.jpg,{c}\n" for i, c in enumerate(_captions(n))))
    seen = []

    def first_sample(self, *args, **kwargs):
        gc.collect()
        seen.append(tracemalloc.get_traced_memory()[0])
        raise KeyboardInterrupt
    monkeypatch.setattr(ShardSetWriter, "add", first_sample)
    tracemalloc.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pipeline.run_generate(src, tmp_path / f"out{n}", pipeline.GenerateOptions(
                vocab_sample=30, chunk_size=10, plausibility=None, progress=False))
    finally:
        tracemalloc.stop()
    return seen[0]


def test_text_input_items_are_held_compactly(tmp_path, monkeypatch):
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    RuleNegativeGenerator().parse(["A warm up."])  # the pipeline loaded (cached) before tracing
    _traced_at_first_sample(tmp_path, monkeypatch, 100)  # caches filled once per process, untraced after
    small, large = (_traced_at_first_sample(tmp_path, monkeypatch, n) for n in (2000, 10000))
    print("traced bytes per input item", (large - small) / 8000)
    # per input item: two int64 (its record's offset in the temporary file, its place in the
    # permutation); a marshal record in memory held ~250 bytes, a CaptionItem ~570
    assert (large - small) / 8000 < 40


def test_reported_speed_counts_the_vocabulary_pass(tmp_path, monkeypatch):
    """The vocabulary pass parses the sample's captions (the generation pass reuses them): a
    speed left without it had no parsing in it for inputs within the sample (20,000 captions by
    default) and most of it past that, so it fell with the input size on its own."""
    from compclip.datagen.negatives import pipeline
    now = [0.0]
    mine = pipeline.build_vocabulary

    def slow_mining(*args, **kwargs):
        now[0] += 1000.0  # the vocabulary pass takes 1,000 s on this clock; nothing else takes any
        return mine(*args, **kwargs)
    monkeypatch.setattr(pipeline.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(pipeline, "build_vocabulary", slow_mining)
    src = tmp_path / "caps.csv"
    src.write_text("filepath,caption\n" + "".join(f"img{i}.jpg,{c}\n" for i, c in enumerate(_captions(20))))
    stats = pipeline.run_generate(src, tmp_path / "out", pipeline.GenerateOptions(progress=False))["stats"]
    assert stats["seconds"] == 1000.0  # before: 0.0


def test_chunks_are_parsed_one_batch_at_a_time(tmp_path, monkeypatch):
    """Past the vocabulary sample a chunk's captions are parsed `batch_size` at a time, so the
    Docs of one batch are held, not those of a whole chunk (1,000 captions by default)."""
    from compclip.datagen.negatives import pipeline
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    sizes = []
    parse = RuleNegativeGenerator.parse

    def counted_parse(self, captions):
        sizes.append(len(captions))
        return parse(self, captions)
    monkeypatch.setattr(RuleNegativeGenerator, "parse", counted_parse)
    src = tmp_path / "caps.csv"
    src.write_text("filepath,caption\n" + "".join(f"img{i}.jpg,{c}\n" for i, c in enumerate(_captions(100))))
    pipeline.run_generate(src, tmp_path / "out", pipeline.GenerateOptions(
        vocab_sample=10, chunk_size=60, batch_size=16, plausibility=None, progress=False))
    assert sum(sizes) == 100 and max(sizes) <= 16  # before: 50 (a chunk less its kept parses)


def test_a_caption_sharing_a_training_captions_crc32_is_not_left_out():
    """The n-gram model knows its training captions by the crc32 of their tokens; among ~500,000
    captions a few share one with one of the 20,000 training captions (one in 320,000 distinct
    COCO-like captions did), and taking away counts such a caption never added went below zero
    (`math domain error`, the run stopped). Such a caption is now scored as an unseen one."""
    from compclip.datagen.negatives.plausibility import NgramLM, _key, tokens
    training = ["A dog lying on a mat.", "A cat sitting on a red sofa.", "Two dogs on a beach."]
    stranger, negatives = "A zebra eating grass in a field.", ["A zebra eating a field in grass."]
    plain = NgramLM.train(training)
    colliding = NgramLM.train(training)
    colliding.seen.add(_key(tokens(stranger)))  # as if its crc32 were a training caption's
    assert colliding.score(stranger, negatives) == plain.score(stranger, negatives)
    assert colliding.logprob(negatives[0], stranger) == plain.logprob(negatives[0], stranger)
    for caption in training:  # training captions are still left out
        assert plain._left_out(tokens(caption)) is not None and plain._minus(tokens(caption)) is not None


def test_corpus_runs_parse_in_small_spacy_batches_with_the_same_tags():
    """spaCy's arrays for one batch are the run's largest transient: ~60 MB traced at 256
    captions, ~18 MB at the pipeline's 64 (these captions); the tags do not depend on the batch."""
    from compclip.datagen.negatives.pipeline import GenerateOptions
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    from compclip.datagen.negatives.text import view
    captions = _captions(256)
    small = RuleNegativeGenerator(**{**GenerateOptions().generator_config(), "plausibility": None})
    small.parse(captions[:8])  # the pipeline loaded before tracing
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        docs = small.parse(captions)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    print("traced peak of one parse of 256 captions, MB", peak / 2**20)
    assert peak < 40 * 2**20
    large = RuleNegativeGenerator(batch_size=256, plausibility=None).parse(captions)
    assert [(view(d).words, view(d).tags, view(d).pos) for d in docs] == \
        [(view(d).words, view(d).tags, view(d).pos) for d in large]
