"""Triplet benchmarks' shared part (VISLA, SugarCrepe++): an image, two positives P1, P2, a negative N.

Readers for the two on-disk formats and the scoring rule (`eval.metrics.triplet_correct`):
I2T, P1-N, P2-N with images; T2T always (so text-only scorers get T2T alone).
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from compclip.eval.benchmarks.base import DataError, read_text
from compclip.eval.cache import EmbeddingCache
from compclip.eval.images import FileImage
from compclip.eval.metrics import accuracy, triplet_correct
from compclip.eval.stats import ItemTable, cluster_ids, index_by, metric


@dataclass(frozen=True)
class Triplet:
    image: str  # file name as stored
    p1: str
    p2: str
    n: str
    source: str  # "file:line" or "file:id", for error messages and per-instance records


def read_visla_tsv(path: Path, columns: tuple[str, str, str, str]) -> tuple[list[Triplet], int]:
    """Rows of a VISLA TSV (header named `columns` = image, P1, P2, N, extra columns ignored).

    Rows whose N is empty are dropped (spatial: 12 of 652); returns (triplets, dropped).
    """
    rows = list(csv.reader(io.StringIO(read_text(path), newline=""), delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows:
        raise DataError(f"{path}: empty file")
    header = rows[0]
    missing = [c for c in columns if c not in header]
    if missing:
        raise DataError(f"{path}: header {header} lacks column(s) {missing}")
    idx = [header.index(c) for c in columns]
    out, dropped = [], 0
    for line, row in enumerate(rows[1:], start=2):
        if len(row) < len(header):
            raise DataError(f"{path}:{line}: expected {len(header)} tab-separated fields, got {len(row)}")
        image, p1, p2, n = (row[i] for i in idx)
        if not n.strip():
            dropped += 1
            continue
        if not (image and p1.strip() and p2.strip()):
            raise DataError(f"{path}:{line}: empty image or positive caption")
        out.append(Triplet(image, p1, p2, n, f"{path.name}:{line}"))
    return out, dropped


def read_scpp_json(path: Path) -> list[Triplet]:
    """A SugarCrepe++ subset: a JSON list of {id, filename, caption, caption2, negative_caption}."""
    try:
        records = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(records, list):
        raise DataError(f"{path}: expected a JSON list of records")
    out = []
    for i, r in enumerate(records):
        try:
            out.append(Triplet(r["filename"], r["caption"], r["caption2"], r["negative_caption"],
                               f"{path.name}:id={r.get('id', i)}"))
        except (KeyError, TypeError) as e:
            raise DataError(f"{path}: record {i} (id={r.get('id') if isinstance(r, dict) else '?'}) "
                            f"lacks key {e}") from e
    return out


def score_triplets(cache: EmbeddingCache, triplets: list[Triplet],
                   image_paths: Optional[dict[str, str]]) -> dict[str, np.ndarray]:
    """Per-item correctness masks; image metrics only when `image_paths` is given."""
    p1 = cache.texts([t.p1 for t in triplets])
    p2 = cache.texts([t.p2 for t in triplets])
    n = cache.texts([t.n for t in triplets])
    image = cache.images([FileImage(image_paths[t.image]) for t in triplets]) if image_paths else None
    return triplet_correct(p1, p2, n, image)


def triplet_headline(masks: dict[str, dict[str, np.ndarray]], aggregates: bool) -> dict[str, float]:
    """`<subset>/<column>` accuracies of {subset: {column: mask}}; with `aggregates`, `all/<column>`
    (every item) and `macro/<column>` (mean over subsets), as SugarCrepe++ reports them."""
    headline, columns = {}, {}
    for subset, cols in masks.items():
        for col, mask in cols.items():
            headline[f"{subset}/{col}"] = accuracy(mask)
            columns.setdefault(col, []).append(mask)
    if aggregates:
        for col, parts in columns.items():
            headline[f"all/{col}"] = accuracy(np.concatenate(parts))
            headline[f"macro/{col}"] = float(np.mean([accuracy(m) for m in parts]))
    return headline


def triplet_table(instances: list[dict], aggregates: bool) -> Optional[ItemTable]:
    """Per subset and correctness column `<subset>/<column>`; with `aggregates`, `all/<column>`
    (every item) and `macro/<column>` (mean over subsets). Items sharing an image are one cluster."""
    if not instances:
        return None
    subsets = index_by([r["subset"] for r in instances])
    columns = [k for k, v in instances[0].items() if isinstance(v, bool)]
    out = {}
    for col in columns:
        values = [r[col] for r in instances]
        out.update({f"{s}/{col}": metric(values, idx) for s, idx in subsets.items()})
        if aggregates:
            out[f"all/{col}"] = metric(values, np.arange(len(values)))
            out[f"macro/{col}"] = metric(values, *subsets.values())
    return ItemTable(cluster_ids([r["image"] for r in instances]), out)
