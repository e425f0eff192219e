"""Blind rows: each benchmark's caption-choice metrics, with a blind judge's scores in place of s(I, c).

Only metrics where the choice is between captions of one image are scored, with the same tie
rules as `eval.metrics` (f = the judge's score of a caption):
- `sugarcrepe`: every headline metric; correct iff f(pos) > f(neg) (strict).
- `sugarcrepe_pp`, `visla`: I2T, P1-N, P2-N (`f(P1) > f(N) and f(P2) > f(N)`, strict); T2T is
  text-only already (score it with `--text-model`).
- `aro`: VG-Relation / VG-Attribution (`numpy.argmax` over [false, true]: a tie is wrong) and
  the Order parts (argmax over [true, 4 perturbations] per seed: a tie is correct).
- `bivlc`: `i2t_pos` f(C0) > f(C1), `i2t_neg` f(C1) > f(C0) and `i2t` (both: never, since a
  blind judge gives both images the same choice); T2I and Group choose between images.
Every other benchmark gets no blind metric, only a note saying why. Categories add `tie`: the
share of items whose compared scores are equal. Each judge is fitted per benchmark (per part for
ARO) on that benchmark's positive captions, keyed by image: SugarCrepe's caption, VISLA /
SugarCrepe++'s P1 and P2, ARO's true captions (Order: every caption, `pre_caption`d), BiVLC's C0
(images keyed by a hash of their bytes); each (caption, image) pair counted once.
"""
from __future__ import annotations

import hashlib
from typing import Optional

import numpy as np

from compclip.errors import InputError
from compclip.eval.benchmarks.aro import order_options, order_summary, vg_summary
from compclip.eval.benchmarks.base import BenchmarkResult, MissingData
from compclip.eval.benchmarks.sugarcrepe import sugarcrepe_headline
from compclip.eval.benchmarks.triplet import triplet_headline
from compclip.eval.blind import JUDGES, make_judge
from compclip.eval.metrics import accuracy, argmax_correct, group_table
from compclip.eval.registry import get_benchmark
from compclip.eval.text_perturb import pre_caption

NOT_BLIND = "no blind row: its metrics do not choose between captions of one image"


def judge_scores(judge, corpus, queries) -> dict[tuple[str, str], float]:
    """{(text, group): score} for every query, after fitting on the distinct corpus pairs."""
    corpus, queries = list(dict.fromkeys(corpus)), list(dict.fromkeys(queries))
    judge.fit([t for t, _ in corpus], [g for _, g in corpus])
    return dict(zip(queries, judge.score([t for t, _ in queries], [g for _, g in queries])))


def _sugarcrepe(bench, judge) -> BenchmarkResult:
    rows = [(s, r) for s, rs in bench.subsets.items() for r in rs]
    f = judge_scores(judge, [(r["caption"], r["filename"]) for _, r in rows],
                     [(r[k], r["filename"]) for _, r in rows for k in ("caption", "negative_caption")])
    masks, categories = {}, {}
    for subset, items in bench.subsets.items():
        pos = np.array([f[r["caption"], r["filename"]] for r in items])
        neg = np.array([f[r["negative_caption"], r["filename"]] for r in items])
        masks[subset] = pos > neg
        categories[subset] = {"acc": accuracy(masks[subset]), "tie": accuracy(pos == neg), "n": len(items)}
    return BenchmarkResult(bench.name, sugarcrepe_headline(masks), categories,
                           counts={s: len(m) for s, m in masks.items()})


def _triplets(bench, judge) -> BenchmarkResult:
    triplets = [t for ts in bench.subsets.values() for t in ts]
    f = judge_scores(judge, [(c, t.image) for t in triplets for c in (t.p1, t.p2)],
                     [(c, t.image) for t in triplets for c in (t.p1, t.p2, t.n)])
    categories, masks_by_subset = {}, {}
    for subset, ts in bench.subsets.items():
        f1, f2, fn = (np.array([f[getattr(t, k), t.image] for t in ts]) for k in ("p1", "p2", "n"))
        masks = {"i2t": (f1 > fn) & (f2 > fn), "p1_n": f1 > fn, "p2_n": f2 > fn}
        categories[subset] = {m: accuracy(v) for m, v in masks.items()} | {
            "tie": accuracy((f1 == fn) | (f2 == fn)), "n": len(ts)}
        masks_by_subset[subset] = masks
    headline = triplet_headline(masks_by_subset, aggregates=bench.name == "sugarcrepe_pp")
    return BenchmarkResult(bench.name, headline, categories, counts={s: len(t) for s, t in bench.subsets.items()})


def _aro(bench, judge) -> BenchmarkResult:
    headline, categories, counts, notes = {}, {}, {}, []
    for part, data in bench.parts.items():
        if part.startswith("vg_"):
            items = data[0]
            f = judge_scores(judge, [(it["true_caption"], it["image_path"]) for it in items],
                             [(it[k], it["image_path"]) for it in items for k in ("false_caption", "true_caption")])
            scores = np.array([[f[it["false_caption"], it["image_path"]], f[it["true_caption"], it["image_path"]]]
                               for it in items])
            h, table, _ = vg_summary(part, items, argmax_correct(scores, answer=1))
            ties = scores[:, 0] == scores[:, 1]
        else:
            cases, tagged = data[0], data[1]
            options = {seed: order_options(cases, tagged, seed, bench.max_words) for seed in bench.seeds}
            f = judge_scores(judge, [(pre_caption(c, bench.max_words), image) for image, c in cases],
                             [(o, image) for opts in options.values() for (image, _), five in zip(cases, opts)
                              for o in five])
            per_seed, ties = [], []
            for seed, opts in options.items():
                scores = np.array([[f[o, image] for o in five] for (image, _), five in zip(cases, opts)])
                per_seed.append(accuracy(argmax_correct(scores, answer=0)))
                ties.append(scores[:, 0] == scores[:, 1:].max(axis=1))
            h, table, _ = order_summary(bench.seeds, per_seed, cases)
            ties = np.concatenate(ties)
        headline.update({f"{part}/{k}": v for k, v in h.items()})
        categories.update({f"{part}/{k}": v for k, v in table.items()})
        counts[part] = len(data[0])
        notes.append(f"aro/{part}: the true caption ties with the best other option in {100 * accuracy(ties):.1f} % "
                     "of items")
    return BenchmarkResult(bench.name, headline, categories, notes=notes, counts=counts)


def bivlc_image_keys(folder: str) -> list[str]:
    """sha1 of each row's `image` bytes (the same COCO image gives the same key)."""
    import datasets
    ds = datasets.load_from_disk(folder)
    ds = ds["test"] if isinstance(ds, datasets.DatasetDict) else ds
    images = ds.select_columns(["image"]).cast_column("image", datasets.Image(decode=False))
    return [hashlib.sha1(row["image"]["bytes"] or row["image"]["path"].encode()).hexdigest() for row in images]


def _bivlc(bench, judge) -> BenchmarkResult:
    c0, c1 = bench.rows["caption"], bench.rows["negative_caption"]
    keys = bivlc_image_keys(bench.folder)
    f = judge_scores(judge, list(zip(c0, keys)), list(zip(c0, keys)) + list(zip(c1, keys)))
    f0, f1 = np.array([f[q] for q in zip(c0, keys)]), np.array([f[q] for q in zip(c1, keys)])
    masks = {"i2t": (f0 > f1) & (f1 > f0), "i2t_pos": f0 > f1, "i2t_neg": f1 > f0}
    types = [str(t).lower() for t in bench.rows["type"]]
    subtypes = [f"{t}/{str(s).lower()}" for t, s in zip(types, bench.rows["subtype"])]
    with_ties = masks | {"tie": f0 == f1}
    return BenchmarkResult(bench.name, {k: accuracy(m) for k, m in masks.items()},
                           group_table(with_ties, types) | group_table(with_ties, subtypes),
                           counts={"instances": len(c0)})


TASKS = {"sugarcrepe": _sugarcrepe, "sugarcrepe_pp": _triplets, "visla": _triplets, "aro": _aro, "bivlc": _bivlc}


def check_blind(judges: list[str], benchmarks: list[str], data_root, options: Optional[dict] = None,
                require_images: bool = False) -> dict:
    """The options, once every judge and benchmark name is known and every file is there: what
    `eval.api.check_data` checks (images too when `require_images`, for the image scorers of the
    same run), plus the text files of the benchmarks in `TASKS` that a text-only check skips.
    `MissingData` lists every problem at once."""
    from compclip.eval.api import problems, validate_names
    options = validate_names(list(benchmarks), options)
    unknown = [j for j in judges if j not in JUDGES]
    if unknown:
        raise InputError(f"unknown blind judge(s) {', '.join(map(repr, unknown))}; known: {', '.join(JUDGES)}")
    found = problems(benchmarks, data_root, options, require_images)
    if not require_images:
        found += [p for b in dict.fromkeys(benchmarks) if b in TASKS and get_benchmark(b).needs_images
                  for p in get_benchmark(b).missing(data_root, False, **options.get(b, {}))]
    if found:
        raise MissingData(found, data_root)
    return options


def run_blind(judges: list[str], benchmarks: list[str], data_root, options: Optional[dict] = None,
              ) -> dict[str, dict[str, BenchmarkResult]]:
    """{"blind:<judge>": {benchmark: BenchmarkResult}} for every judge and benchmark asked for.

    Benchmarks in `TASKS` are loaded text-only (their files checked first: `MissingData` lists
    every problem before anything is scored); the others get a result with no metric and a note."""
    from compclip.eval.api import load_benchmark
    options = check_blind(judges, benchmarks, data_root, options)
    made = [make_judge(name) for name in dict.fromkeys(judges)]
    blind = [b for b in dict.fromkeys(benchmarks) if b in TASKS]
    loaded = {b: load_benchmark(b, data_root, False, options.get(b, {})) for b in blind}
    out = {}
    for judge in made:
        results = {}
        for b in dict.fromkeys(benchmarks):
            if b not in TASKS:
                results[b] = BenchmarkResult(b, {}, notes=[f"{b}: {NOT_BLIND}"])
                continue
            results[b] = TASKS[b](loaded[b], judge)
            results[b].notes = [f"{b}: blind judge `{judge.name}` ({judge.about}); only metrics that choose "
                                "between captions of one image"] + loaded[b].notes + results[b].notes
        out[f"blind:{judge.name}"] = results
    return out
