"""Eval speed: items/s per benchmark with a tiny model on the synthetic fixture, and encoder
calls per unique text / image (1.0 means each is encoded exactly once).

    .venv/bin/python bench/bench_eval.py [--arch micro-vit-32] [--n 24] [--out bench/results/eval.json]
                                         [--real-root DIR]   # + all-MiniLM-L6-v2 T2T on real text files

Each benchmark is timed with a fresh embedding cache (so encoding is included), after one
untimed warm-up run that loads spaCy and the datasets library. Then all benchmarks run on one
shared cache, with a counting wrapper around the scorer, to report encoder calls.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from eval.api import run  # noqa: E402
from eval.cache import EmbeddingCache  # noqa: E402
from eval.registry import list_benchmarks  # noqa: E402
from eval.scorer import OpenClipScorer, Scorer  # noqa: E402
from eval.synthetic import make_data_root  # noqa: E402
from models import load_model  # noqa: E402

OPTIONS = {"zeroshot": {"datasets": ["cifar10", "cifar100"]}}


class Counting(Scorer):
    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        self.texts = self.images = self.text_calls = self.image_calls = 0

    def encode_texts(self, texts):
        self.texts += len(texts)
        self.text_calls += 1
        return self.inner.encode_texts(texts)

    def encode_images(self, images):
        self.images += len(images)
        self.image_calls += 1
        return self.inner.encode_images(images)


def items_of(result) -> int:
    return sum(v for k, v in result.counts.items() if "/" not in k)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="micro-vit-32")
    p.add_argument("--n", type=int, default=24, help="fixture size (items per subset ~ n..4n)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--out", default="bench/results/eval.json")
    p.add_argument("--real-root", help="data root with the real VISLA / SugarCrepe++ text files")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    scorer = OpenClipScorer.from_loaded(load_model(args.arch), batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        root = str(make_data_root(Path(tmp) / "data", n=args.n))
        run(scorer, ["aro", "bivlc"], root, progress=False)  # warm-up (spaCy, datasets)
        per_bench = {}
        for name in list_benchmarks():
            t0 = time.perf_counter()
            res = run(scorer, [name], root, {name: OPTIONS[name]} if name in OPTIONS else None,
                      progress=False, batch_size=args.batch_size)[name]
            dt = time.perf_counter() - t0
            per_bench[name] = {"items": items_of(res), "seconds": round(dt, 3),
                               "items_per_s": round(items_of(res) / dt, 1)}
            print(f"{name:14s} {per_bench[name]['items']:6d} items {dt:7.2f} s {per_bench[name]['items_per_s']:8.1f} items/s")
        counting = Counting(scorer)
        cache = EmbeddingCache(counting, batch_size=args.batch_size, progress=False)
        t0 = time.perf_counter()
        run(cache, list_benchmarks(), root, OPTIONS)
        total = time.perf_counter() - t0
    calls = {"texts_encoded": counting.texts, "unique_texts": len(cache._texts),
             "images_encoded": counting.images, "unique_images": len(cache._images),
             "encodes_per_unique_text": counting.texts / max(1, len(cache._texts)),
             "encodes_per_unique_image": counting.images / max(1, len(cache._images)),
             "text_batches": counting.text_calls, "image_batches": counting.image_calls,
             "all_benchmarks_shared_cache_seconds": round(total, 2)}
    print(json.dumps(calls, indent=1))
    real = {}
    if args.real_root:
        from eval.scorer import SentenceTransformerScorer
        minilm = SentenceTransformerScorer.minilm()
        for name in ("visla", "sugarcrepe_pp"):
            t0 = time.perf_counter()
            res = run(minilm, [name], args.real_root, progress=False)[name]
            dt = time.perf_counter() - t0
            real[name] = {"scorer": "all-MiniLM-L6-v2 (T2T)", "items": items_of(res), "seconds": round(dt, 2),
                          "items_per_s": round(items_of(res) / dt, 1)}
            print(f"real {name}: {real[name]}")
    out = {"arch": args.arch, "fixture_n": args.n, "batch_size": args.batch_size, "torch_threads": torch.get_num_threads(),
           "machine": f"{platform.machine()} {os.cpu_count()} cpus (shared)", "per_benchmark": per_bench,
           "encoder_calls": calls, "real_text_minilm": real}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
