"""The tag -> POS table (`compclip.compat.spacy.PosTable`) against spaCy's attribute_ruler: agreement and cost.

    .venv/bin/python bench/bench_pos_table.py [--sugarcrepe DIR] [--reps 3]

On SugarCrepe's distinct positive captions, parsed by the rules' pipeline (`load_nlp`: tok2vec +
tagger on numpy BLAS): how many captions / tokens get another coarse POS from the table than
from spaCy's attribute_ruler run on the same Doc (`agreement.vs_ruler`), and than from the full
pipeline with the dependency parser (`agreement.vs_full_pipeline`, with the most frequent
(tag, table POS, spaCy POS) triples); and the CPU seconds of parsing every caption and reading
its POS with the table (`load_nlp` + `view`) and with the ruler running (the same pipeline, ruler
enabled). Writes bench/results/pos_table.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import log, summarize, write_result  # noqa: E402


def agreement(captions, docs, reference) -> dict:
    from compclip.datagen.negatives.text import view
    captions_differ, tokens_differ, tokens = 0, 0, 0
    triples: Counter = Counter()
    for doc, ref in zip(docs, reference):
        v = view(doc)
        theirs = [t.pos_ for t in ref]
        tokens += len(theirs)
        bad = [(tag, a, b) for tag, a, b in zip(v.tags, v.pos, theirs) if a != b]
        if bad or len(theirs) != len(v.pos):
            captions_differ += 1
            tokens_differ += len(bad)
            triples.update(bad)
    return {"captions": len(captions), "captions_differ": captions_differ,
            "captions_differ_share": round(captions_differ / len(captions), 4),
            "tokens": tokens, "tokens_differ": tokens_differ,
            "most_frequent": [{"tag": t, "table": a, "spacy": b, "tokens": n} for (t, a, b), n in triples.most_common(12)]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sugarcrepe", default=str(ROOT.parent / "shared" / "benchmarks" / "sugarcrepe"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from thinc.api import use_ops

    from compclip.compat.spacy import BARE_TOKENIZER, import_spacy
    from compclip.datagen.negatives.audit import sugarcrepe_captions
    from compclip.datagen.negatives.base import SPACY_MODEL
    from compclip.datagen.negatives.rules import load_nlp
    from compclip.datagen.negatives.text import view
    captions = sugarcrepe_captions(args.sugarcrepe)
    nlp = load_nlp()
    spacy = import_spacy()
    ruler = nlp.get_pipe("attribute_ruler")
    docs = list(nlp.pipe(captions, batch_size=256))
    vs_ruler = agreement(captions, docs, [ruler(nlp(c)) for c in captions])
    full = spacy.load(SPACY_MODEL, exclude=["ner", "lemmatizer", "senter"])
    vs_full = agreement(captions, docs, list(full.pipe(captions, batch_size=256)))
    log(f"vs ruler: {vs_ruler['captions_differ']} captions differ; vs full pipeline: {vs_full['captions_differ']}")
    with use_ops("numpy", use_blis=False):
        with_ruler = spacy.load(SPACY_MODEL, exclude=["ner", "lemmatizer", "senter", "parser"],
                                config={"nlp": {"tokenizer": {"@tokenizers": BARE_TOKENIZER}}})
    runs: dict[str, list[float]] = {"table_cpu_s": [], "ruler_cpu_s": []}
    for rep in range(args.reps):
        for name, pipeline in (("table_cpu_s", nlp), ("ruler_cpu_s", with_ruler)):
            t0 = time.process_time()
            for doc in pipeline.pipe(captions, batch_size=256):
                view(doc).pos  # noqa: B018  (the POS as the rules read them)
            runs[name].append(time.process_time() - t0)
        log(f"rep {rep + 1}/{args.reps}: table {runs['table_cpu_s'][-1]:.2f} s, ruler {runs['ruler_cpu_s'][-1]:.2f} s")
    table, ruler_s = summarize(runs["table_cpu_s"]), summarize(runs["ruler_cpu_s"])
    write_result("pos_table", {
        "what": "compclip.compat.spacy.PosTable against spaCy's attribute_ruler on SugarCrepe's distinct captions",
        "agreement": {"vs_ruler": vs_ruler, "vs_full_pipeline": vs_full},
        "speed": {"captions": len(captions), "table_cpu_s": table, "ruler_cpu_s": ruler_s,
                  "ruler_over_table": round(ruler_s["median"] / table["median"], 3)}}, args.out)


if __name__ == "__main__":
    main()
