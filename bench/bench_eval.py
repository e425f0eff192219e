"""Eval speed: items/s per benchmark with a tiny model on the synthetic fixture, and encoder
calls per unique text / image, per benchmark and over all benchmarks (1.0 = each encoded once).

    .venv/bin/python bench/bench_eval.py [--arch micro-vit-32] [--n 24] [--reps 3] [--quick] [--device cuda]
                                         [--real-root DIR]   # + all-MiniLM-L6-v2 T2T on real text files

One untimed warm-up pass over every benchmark (imports, spaCy, the datasets library, file
cache). Then `--reps` repetitions; in each, every benchmark is run alone with a fresh
embedding cache and fresh loading (`reuse=False`), so its time covers load + encode + score.
The scorer under the cache is wrapped by a counter of what reaches the encoder, and the cache
records what the benchmark asks for: calls per unique text = texts encoded / distinct strings
asked for; per unique image = images encoded / distinct image references (`ref.key`: file and
crop, dataset row and column) asked for. Distinct images by pixels are reported beside (the
fixture has BiVLC rows whose negative image is a pixel copy of the positive: two references,
encoded once each, by design). Finally all benchmarks run on one
shared cache (the same caption or image in two benchmarks is encoded once overall). Torch
threads: `--threads` (default: OMP_NUM_THREADS, else 1). The model runs on `--device` (images are
decoded and transformed on the CPU either way). Writes bench/results/eval.json.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from bench.common import log, summarize, write_result  # noqa: E402
from compclip.eval.api import run  # noqa: E402
from compclip.eval.cache import EmbeddingCache  # noqa: E402
from compclip.eval.registry import list_benchmarks  # noqa: E402
from compclip.eval.scorer import OpenClipScorer, Scorer  # noqa: E402
from compclip.models import load_model  # noqa: E402

OPTIONS = {"zeroshot": {"datasets": ["cifar10", "cifar100"]}}
QUICK_OPTIONS = {"zeroshot": {"datasets": ["cifar10"]}}


class Counting(Scorer):
    """Counts what reaches the encoder: items, calls, distinct texts and distinct images."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        self.texts = self.images = self.text_calls = self.image_calls = 0
        self.distinct_texts: set[str] = set()
        self.distinct_images: set[str] = set()

    @property
    def supports_images(self) -> bool:
        return self.inner.supports_images

    def encode_texts(self, texts):
        self.texts += len(texts)
        self.text_calls += 1
        self.distinct_texts.update(texts)
        return self.inner.encode_texts(texts)

    def encode_images(self, images):
        self.images += len(images)
        self.image_calls += 1
        for im in images:
            self.distinct_images.add(hashlib.sha1(f"{im.mode}{im.size}".encode() + im.tobytes()).hexdigest())
        return self.inner.encode_images(images)



class CountingCache(EmbeddingCache):
    """An EmbeddingCache over a `Counting` scorer that also records what the benchmarks ask for:
    distinct text strings and distinct image references (`ref.key`)."""

    def __init__(self, counting: Counting, **kwargs):
        super().__init__(counting, **kwargs)
        self.counting = counting
        self.asked_texts: set[str] = set()
        self.asked_images: set = set()

    def texts(self, texts):
        self.asked_texts.update(texts)
        return super().texts(texts)

    def images(self, refs):
        self.asked_images.update(r.key for r in refs)
        return super().images(refs)

    def summary(self) -> dict:
        c = self.counting

        def per(n: int, unique: int):
            return round(n / unique, 4) if unique else None
        return {"texts_encoded": c.texts, "unique_texts": len(self.asked_texts),
                "images_encoded": c.images, "unique_images": len(self.asked_images),
                "encodes_per_unique_text": per(c.texts, len(self.asked_texts)),
                "encodes_per_unique_image": per(c.images, len(self.asked_images)),
                "distinct_texts_at_encoder": len(c.distinct_texts),
                "distinct_images_by_pixels": len(c.distinct_images),
                "text_batches": c.text_calls, "image_batches": c.image_calls}


def items_of(result) -> int:
    return sum(v for k, v in result.counts.items() if "/" not in k)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="micro-vit-32")
    p.add_argument("--n", type=int, default=24, help="fixture size (items per subset ~ n..4n)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    p.add_argument("--quick", action="store_true", help="fixture n=8, zero-shot on cifar10 only")
    p.add_argument("--out", default=None)
    p.add_argument("--real-root", help="data root with the real VISLA / SugarCrepe++ text files")
    p.add_argument("--device", default="cpu", help="torch device of the model (cpu, cuda, cuda:N)")
    p.add_argument("--benchmarks", nargs="*", help="these benchmarks only (default: all registered)")
    args = p.parse_args()
    options = QUICK_OPTIONS if args.quick else OPTIONS
    if args.quick:
        args.n = 8
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    scorer = OpenClipScorer.from_loaded(load_model(args.arch, device=args.device), batch_size=args.batch_size,
                                        device=args.device)
    names = args.benchmarks or list_benchmarks()
    options = {k: v for k, v in options.items() if k in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    items: dict[str, int] = {}
    calls: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = str(make_root(Path(tmp), args.n))
        log(f"eval: warm-up over {len(names)} benchmarks")
        run(scorer, names, root, options, progress=False, batch_size=args.batch_size)
        for rep in range(args.reps):
            for name in names:
                cache = CountingCache(Counting(scorer), batch_size=args.batch_size, progress=False)
                t0 = time.perf_counter()
                res = run(cache, [name], root, {name: options[name]} if name in options else None,
                          progress=False, batch_size=args.batch_size, reuse=False)[name]
                times[name].append(time.perf_counter() - t0)
                items[name] = items_of(res)
                calls[name] = cache.summary()  # the same every repetition
            log(f"eval rep {rep + 1}/{args.reps}: " + ", ".join(
                f"{n} {items[n] / times[n][-1]:.0f}/s" for n in names))
        cache = CountingCache(Counting(scorer), batch_size=args.batch_size, progress=False)
        t0 = time.perf_counter()
        run(cache, names, root, options, progress=False, reuse=False)
        shared = {**cache.summary(), "seconds": round(time.perf_counter() - t0, 2)}
    per_bench = {name: {"items": items[name], "seconds": summarize(times[name]),
                        "items_per_s": summarize([items[name] / t for t in times[name]], 1),
                        "encoder_calls": calls[name]} for name in names}
    once = [c for c in list(calls.values()) + [shared]]
    goal_met = all(c["encodes_per_unique_text"] in (None, 1.0) and c["encodes_per_unique_image"] in (None, 1.0)
                   for c in once)
    real = {}
    if args.real_root:
        from compclip.eval.scorer import SentenceTransformerScorer
        minilm = SentenceTransformerScorer.minilm()
        for name in ("visla", "sugarcrepe_pp"):
            t0 = time.perf_counter()
            res = run(minilm, [name], args.real_root, progress=False)[name]
            dt = time.perf_counter() - t0
            real[name] = {"scorer": "all-MiniLM-L6-v2 (T2T)", "items": items_of(res), "seconds": round(dt, 2),
                          "items_per_s": round(items_of(res) / dt, 1)}
            log(f"real {name}: {real[name]}")
    device = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else "cpu"
    write_result("eval", {"arch": args.arch, "device": device, "benchmarks": names, "fixture_n": args.n, "batch_size": args.batch_size,
                          "torch_threads": torch.get_num_threads(), "reps": args.reps, "options": options,
                          "timing": "load + encode + score, fresh cache and fresh loading per run",
                          "per_benchmark": per_bench, "all_benchmarks_shared_cache": shared,
                          "goal": "every text and image encoded exactly once", "goal_met": goal_met,
                          "real_text_minilm": real}, args.out)


def make_root(tmp: Path, n: int) -> Path:
    from tests.fixtures.eval_data import make_data_root
    return make_data_root(tmp / "data", n=n)


if __name__ == "__main__":
    main()
