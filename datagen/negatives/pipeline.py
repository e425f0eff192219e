"""Corpus runs: caption input -> shard set with `neg.json`, chunked, parallel and resumable.

    run_generate("captions_train2017.json", "out/", GenerateOptions(workers=1))

1. Vocabulary (the compclip rules only; the negclip rules use none): `out/vocab.json` if
   present (a resumed run), else the file given, else mined from the first `vocab_sample`
   captions; saved to `out/vocab.json` either way, so every chunk, worker and resume draws from
   the same words. That sample is parsed by the worker processes when there are several, and
   its parses are kept (`text.Parsed`: text and token view, not the spaCy Doc; pickled,
   `kept`) and reused by step 2, inline or sent to a worker with their chunk: every caption is
   parsed once. Worker processes forked from the main one inherit its vocabulary.
2. Items are read in order and cut into chunks; each chunk's captions go to a worker (or run
   inline with `workers=1`), which parses them once and returns their negatives. Caption `i` of
   the input always uses seed `(seed, i)`, so output does not depend on chunking or workers.
3. The main process writes samples (text inputs in a seeded permutation, `compclip.shardset.order`,
   read back from a temporary file: `_Spilled`) through `ShardSetWriter`; a killed run resumes
   after the last complete shard (`inputs_done` items are skipped, not re-parsed) and produces
   byte-identical shards. Shard inputs are
   copied member by member (images are never decoded) with `neg.json` added; rule negatives
   already there are replaced, others kept. The run holds the output folder's lock
   (`datagen.outlock`) from its first write to its end, and records the input's fingerprint
   in the manifest (`compclip.shardset.shards.pin_inputs`): a resume whose input file or shard set
   changed since the set started is refused in one line before anything is written. A
   complete set is returned as it is, without writing to it.
4. Empty, non-English and over-long captions are skipped and counted (the negclip rules skip
   only empty ones): text inputs record them in the manifest's `skipped`, shard inputs keep the
   sample without negatives. With `require_negative`, a caption that gets no negative is left
   out too (`no_negative`), as NegCLIP's script dropped such captions.
   The manifest records the rule set and spaCy model (`features.rules`, `features.spacy_model`)
   and the samples by their number of negatives (`negatives_per_sample`, per shard and in all).
   Each shard also records its captions' counts (`counts`: captions, skip reasons, negatives
   and coverage counts per kind:subkind); the closing report `negatives_stats.json` is their
   sum over every shard, so after a resume it covers the whole set, the killed run's shards
   included (its speed, `captions_per_s`, is this run's, from the vocabulary pass on: that pass
   parses the sample's captions, which the generation pass then does not).
5. With `images` (a `datagen.prepare.imagefiles.ImageFiles`), each text item's image file
   (`meta["image_path"]` under the images root) is attached as the sample's image, bytes as they
   are on disk. A missing or unreadable file stops the run with an error naming the file and the
   caption key (complete shards stay; rerunning resumes), or with `skip_missing` is skipped and
   counted (`missing_image`, `corrupt_image`). `splits` keeps only items whose `meta["split"]`
   is one of them (Karpathy's `train`, `restval`, ...).
6. While it runs, Python's cyclic garbage collector starts a pass after `GC_THRESHOLD` new
   objects instead of 700 (`fewer_gc_passes`): the run makes millions of small short-lived
   objects and nearly no cycles, and with the default every few thousand of them set off a
   pass, some over the whole heap (spaCy model, n-gram tables, parsed captions): ~0.5 s of a
   5,000-caption command; 0.17-0.24 s with a threshold of 50,000, 0.10-0.11 s with 200,000
   (two passes). The previous thresholds are restored on return.
"""
from __future__ import annotations

import functools
import gc
import json
import marshal
import os
import pickle
import tempfile
import sys
import time
from array import array
from collections import Counter, deque
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from compclip.datagen.negatives.captions_io import CaptionItem, InputError, read_items
from compclip.shardset.imageio import BadImage
from compclip.datagen.negatives.base import Coverage
from compclip.datagen.negatives.plausibility import DEFAULT_MARGIN
from compclip.shardset.order import order_for_input
from compclip.datagen.negatives.rules import SPACY_MODEL, RuleNegativeGenerator, check_spacy_model, select_kinds
from compclip.datagen.negatives.text import Parsed, view
from compclip.datagen.negatives.vocab import Vocabulary
from compclip.datagen.prepare.imagefiles import SKIP_CORRUPT, SKIP_MISSING, MissingImage
from compclip.shardset.schema import Negative, ShardSample
from compclip.datagen.outlock import hold
from compclip.shardset.shards import (INPUTS_KEY, MANIFEST, ShardSetWriter, check_features, check_inputs,
                            grouped, pin_inputs, read_manifest, summed_counts)

VOCAB_FILE = "vocab.json"
GC_THRESHOLD = 200_000  # new objects between two passes of the cyclic collector (Python: 700)
STATS_FILE = "negatives_stats.json"
_WORKER: dict[str, Any] = {}
_BLOCK = 1024  # captions per block of the vocabulary pass (4 of spaCy's batches of 256)


def build_vocabulary(items: Iterator[CaptionItem], n: int, max_words: int = 100,
                     parsed: Optional[list] = None, spacy_model: str = SPACY_MODEL,
                     pool=None) -> Vocabulary:
    """Mine the vocabulary from the first `n` captions; their parses are appended to `parsed`
    when a list is given (`kept`: a `text.Parsed` pickled, ~1 KB; `reused` reads it back), so
    the generation pass need not parse them again. They are parsed and mined block by block
    (the Docs and `Parsed` of one block held at a time), by the processes of `pool` (`_pool`)
    when given."""
    captions = [it.caption for it in islice(items, n)]
    blocks = [captions[b:b + _BLOCK] for b in range(0, len(captions), _BLOCK)]
    if pool is None:
        gen = RuleNegativeGenerator(max_words=max_words, spacy_model=spacy_model)
        done: Iterator[list] = (_kept(gen, block) for block in blocks)
    else:
        done = pool.imap(_parse_block, blocks)

    def views() -> Iterator:
        for block in done:
            for d in block:
                if parsed is not None:
                    parsed.append(None if d is None else kept(d))
                if d is not None:
                    yield view(d)
    return Vocabulary.mine(views())


def kept(parse: Parsed) -> bytes:
    """A kept parse as one bytes object: a `Parsed` holds hundreds of small objects (~5 KB);
    freed, they leave the heap fragmented, and the process's memory does not go down."""
    return pickle.dumps(parse, protocol=pickle.HIGHEST_PROTOCOL)


def reused(record: bytes) -> Parsed:
    """The `Parsed` that `kept` stored."""
    return pickle.loads(record)


def _kept(gen: RuleNegativeGenerator, captions: list[str]) -> list[Optional[Parsed]]:
    return [None if d is None else Parsed(d) for d in gen.parse(captions)]


def _parse_block(captions: list[str]) -> list[Optional[Parsed]]:
    """A worker's part of the vocabulary pass: the parses of a block of the sample."""
    return _kept(_WORKER["gen"], captions)


def _init_worker(config: dict[str, Any], vocab_path: Optional[str], seed: int,
                 vocab: Optional[Vocabulary] = None) -> None:
    try:  # one thread per worker process: the pool is the parallelism
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:
        pass
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    if vocab is None and vocab_path is not None:
        vocab = Vocabulary.from_json(vocab_path)
    _WORKER["gen"] = RuleNegativeGenerator(vocab=vocab, **config)
    _WORKER["seed"] = seed


def _work(start: int, captions: list[str], reuse: Optional[list] = None) -> list[Any]:
    """Negatives (or a skip reason) for captions `start, start+1, ...` of the input; `reuse`
    holds the parses of the first of them kept from the vocabulary pass (`kept`). The
    others are parsed one spaCy batch at a time: the Docs of one batch are held, not a chunk's."""
    gen: RuleNegativeGenerator = _WORKER["gen"]
    reuse = reuse or []
    out = [_negatives(gen, caption, None if doc is None else reused(doc), start + i)
           for i, (caption, doc) in enumerate(zip(captions, reuse))]
    for b in range(len(reuse), len(captions), gen.batch_size):
        batch = captions[b:b + gen.batch_size]
        out += [_negatives(gen, caption, doc, start + b + i)
                for i, (caption, doc) in enumerate(zip(batch, gen.parse(batch)))]
    return out


def _negatives(gen: RuleNegativeGenerator, caption: str, doc, index: int) -> Any:
    return gen.negatives_for(doc, _WORKER["seed"], index) if doc is not None else _skip_reason(gen, caption)


def _skip_reason(gen: RuleNegativeGenerator, caption: str) -> str:
    from compclip.datagen.negatives.text import skip_reason
    return skip_reason(caption, gen.max_words) or "unparsed"


def _chunks(items: Iterator[CaptionItem], start: int, size: int) -> Iterator[tuple[int, list[CaptionItem]]]:
    while True:
        chunk = list(islice(items, size))
        if not chunk:
            return
        yield start, chunk
        start += len(chunk)


def fewer_gc_passes(fn):
    """Run `fn` with the cyclic garbage collector's first threshold raised to `GC_THRESHOLD`
    (point 6 of the module docstring); restored afterwards, whatever happens. Worker processes
    forked meanwhile inherit it."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        before = gc.get_threshold()
        gc.set_threshold(max(before[0], GC_THRESHOLD), *before[1:])
        try:
            return fn(*args, **kwargs)
        finally:
            gc.set_threshold(*before)
    return run


@dataclass
class GenerateOptions:
    """What `run_generate` does; the command line (`negatives generate`, `prepare coco`) builds one.

    `kinds`, `mode`, `cap`, `max_words`, `batch_size`: the generator's (`RuleNegativeGenerator`);
    `seed`: caption `i` draws from `(seed, i)`, and text inputs are written in the seeded
    permutation of `compclip.shardset.order.order_for_input`. `workers`, `chunk_size`: point 2 of the module
    docstring; `shard_size`: samples per shard. `vocab_path`, `vocab_sample`: point 1.
    `image_col`, `caption_col`: the caption input's columns (`datagen.negatives.captions_io.read_items`).
    `limit` caps the input items read. `images`, `skip_missing`, `splits`: point 5; `select`
    filters the items (e.g. benchmark images out, `datagen.prepare.exclude`). `plausibility`
    ("ngram", "hf:<local model folder>" or None; "auto": "ngram" for the compclip rules, none for
    negclip) and `margin`: the plausibility filter (see datagen/negatives/rules.py). `rules`:
    "compclip" or "negclip"; `spacy_model`: the pipeline to parse with; `require_negative`:
    point 4. `progress`: a bar on stderr."""
    kinds: Optional[list[str]] = None
    mode: str = "sample"
    cap: int = 8
    seed: int = 0
    workers: int = 1
    chunk_size: int = 1000
    shard_size: int = 10_000
    vocab_path: Optional[str | Path] = None
    vocab_sample: int = 20_000
    max_words: int = 100
    batch_size: int = 64  # spaCy's arrays for one batch: ~24 MB at 64 captions, ~60 MB at 256 (same tags)
    progress: bool = True
    image_col: Optional[str] = None
    caption_col: Optional[str] = None
    limit: Optional[int] = None
    images: Any = None  # a datagen.prepare.imagefiles.ImageFiles
    skip_missing: bool = False
    splits: Optional[list[str]] = None
    select: Optional[Callable[[Iterator[CaptionItem]], Iterator[CaptionItem]]] = None
    plausibility: Optional[str] = "auto"
    margin: float | dict[str, float] = field(default_factory=lambda: DEFAULT_MARGIN)  # per kind, or one for all
    rules: str = "compclip"
    spacy_model: str = SPACY_MODEL
    require_negative: bool = False

    def scorer(self) -> Optional[str]:
        """The plausibility filter actually used ("auto" resolved)."""
        if self.plausibility == "auto":
            return "ngram" if self.rules == "compclip" else None
        return self.plausibility

    def generator_config(self) -> dict[str, Any]:
        """The `RuleNegativeGenerator` keyword arguments (a worker process builds its own)."""
        return {"kinds": self.kinds, "mode": self.mode, "cap": self.cap, "max_words": self.max_words,
                "batch_size": self.batch_size, "plausibility": self.scorer(), "margin": self.margin,
                "rules": self.rules, "spacy_model": self.spacy_model}

    def features(self) -> dict[str, Any]:
        """The manifest's `features`: a resume with other options is refused by them."""
        features = {"negatives": "rules", "rules": self.rules, "spacy_model": self.spacy_model,
                    "mode": self.mode, "seed": self.seed, "kinds": sorted(self.kinds) if self.kinds else "all"}
        if self.mode == "all":
            features["cap"] = self.cap or None
        if self.require_negative:
            features["require_negative"] = True
        if self.scorer():
            features["plausibility"] = {"scorer": self.scorer(), "margin": self.margin}
        if self.images is not None:
            features["images"] = True
        if self.splits:
            features["splits"] = sorted(self.splits)
        return features


@fewer_gc_passes
def run_generate(input_path: str | Path, out_dir: str | Path,
                 options: Optional[GenerateOptions] = None) -> dict[str, Any]:
    """Generate negatives for every caption of `input_path` into the shard set `out_dir`, as
    `options` say (`GenerateOptions`; the defaults without). An input with no caption at all is
    an `InputError`, raised before anything is written.
    """
    opt = options or GenerateOptions()
    out_dir = Path(out_dir)
    config = opt.generator_config()
    RuleNegativeGenerator(**config)  # bad options are refused before any work
    check_spacy_model(opt.spacy_model)
    features = opt.features()
    order, permute = order_for_input(input_path, opt.seed)
    source = _Input(input_path, opt, permute)
    if next(source.items(), None) is None:
        raise InputError(f"{input_path}: no captions (empty input)")
    vocab_file = out_dir / VOCAB_FILE
    if (out_dir / MANIFEST).is_file():  # a set made with other options is refused before anything is written
        manifest = read_manifest(out_dir)
        check_features(manifest, features, out_dir / MANIFEST)
        if manifest.get("complete"):  # reused as it is: nothing is written (it may be read-only)
            check_inputs(manifest.get(INPUTS_KEY) or {}, [input_path], out_dir)
            return {"manifest": manifest, "stats": _read_stats(out_dir), "resumed_from": None}
    # a given vocabulary is read before anything is written: a bad file leaves no --out behind
    vocab = Vocabulary.from_json(opt.vocab_path) if opt.vocab_path and not vocab_file.is_file() else None
    with hold(out_dir):
        pin_inputs(out_dir, [input_path])  # a resume reading an edited input is refused here
        if not os.access(out_dir, os.W_OK):  # found before the vocabulary pass, not after it
            raise PermissionError(13, "Permission denied", str(out_dir))
        parsed: list = []  # a fresh run parses the vocabulary sample once: the generation pass reuses it
        t0 = time.perf_counter()  # the speed counts the vocabulary pass: it parses the sample's captions
        # mined or read here, once: the generation pass (inline or forked workers) uses it as is
        # (what vocab.json holds)
        if opt.rules != "compclip":
            vocab, vocab_file = None, None
        elif not vocab_file.is_file():
            if vocab is None:
                with _pool(opt.workers, config, (None, opt.seed)) if opt.workers > 1 else nullcontext() as pool:
                    vocab = build_vocabulary(source.items(), opt.vocab_sample, opt.max_words,
                                             parsed, opt.spacy_model, pool)
            vocab.to_json(vocab_file)
        else:
            vocab = Vocabulary.from_json(vocab_file)  # a resumed run
        kinds_selected = select_kinds(opt.kinds, opt.rules)
        writer = ShardSetWriter(out_dir, max_count=opt.shard_size, features=features, order=order)
        done = writer.inputs_done
        run: Counter[str] = Counter()  # this run's counts; the writer keeps each shard's
        bar = _progress(opt.progress, done, _total(input_path, source.permuted, opt.limit))
        write = _Write(writer, run, bar, opt)
        chunks = _chunks(islice(source.items(), done, None), done, opt.chunk_size)
        vocab_name = str(vocab_file) if vocab_file else None
        try:
            if opt.workers <= 1:
                _init_worker(config, vocab_name, opt.seed, vocab)
                for start, chunk in chunks:
                    write(start, chunk, _work(start, [it.caption for it in chunk], parsed[start:start + len(chunk)]))
                    if parsed and start + len(chunk) >= len(parsed):
                        parsed.clear()  # past the vocabulary sample: free the parses
            else:
                _run_pool(opt.workers, config, vocab_name, vocab, opt.seed, chunks, write, parsed)
        except BaseException as err:  # complete shards and the manifest stay; the partial one goes
            writer.__exit__(type(err), err, None)
            raise
        finally:
            if bar is not None:
                bar.close()
        elapsed = time.perf_counter() - t0
        manifest = writer.close()
        whole, unrecorded = summed_counts(manifest)
        final = _finish_stats(whole, kinds_selected, elapsed, run["captions"])
        if unrecorded:  # shards of an older version record no counts: the report leaves them out
            final["shards_without_counts"] = unrecorded
        final["resumed_from"] = done
        (out_dir / STATS_FILE).write_text(json.dumps(final, indent=1, sort_keys=True))
    return {"manifest": manifest, "stats": final, "resumed_from": done}


class _Input:
    """The caption items of a run, as every pass reads them: filtered by `splits` and `select`,
    a text input permuted by the seed (read, filtered and spilled once, `_Spilled`, then
    reused), capped at `limit`."""

    def __init__(self, path: str | Path, opt: GenerateOptions, permute: bool):
        self.path, self.opt, self.permute = path, opt, permute
        self.permuted: Optional[_Spilled] = None

    def items(self) -> Iterator[CaptionItem]:
        opt = self.opt
        if self.permuted is None:
            it: Iterator[CaptionItem] = read_items(self.path, image_col=opt.image_col, caption_col=opt.caption_col)
            if opt.splits:
                it = (x for x in it if x.meta.get("split") in opt.splits)
            it = opt.select(it) if opt.select is not None else it
            if not self.permute:
                return islice(it, opt.limit) if opt.limit is not None else it
            self.permuted = _Spilled(it, opt.seed)
        it = iter(self.permuted)
        return islice(it, opt.limit) if opt.limit is not None else it


class _Spilled:
    """Items written once to an unnamed temporary file, one `marshal` record each (key,
    caption, meta), and read back in the seeded order of `compclip.shardset.order.permutation`
    (the order `shuffled` gives): memory holds two int64 per item (its record's offset and the
    permutation), 16 bytes an item whatever its size."""

    def __init__(self, items: Iterator[CaptionItem], seed: int):
        import numpy as np
        from compclip.shardset.order import permutation
        self.file = tempfile.TemporaryFile()  # removed when closed, or at once where it can be
        ends = array("q")
        for item in items:
            self.file.write(marshal.dumps((item.key, item.caption, item.meta)))
            ends.append(self.file.tell())
        self.file.flush()
        self.offsets = np.zeros(len(ends) + 1, dtype=np.int64)
        self.offsets[1:] = ends
        self.order = permutation(len(ends), seed)

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self) -> Iterator[CaptionItem]:
        fd, offsets = self.file.fileno(), self.offsets
        for b in range(0, len(self.order), _BLOCK):  # a block of Python ints at a time, not n
            for i in self.order[b:b + _BLOCK].tolist():
                start, end = int(offsets[i]), int(offsets[i + 1])
                yield CaptionItem(*marshal.loads(os.pread(fd, end - start, start)))


class _Write:
    """Writes a chunk's results (negatives or a skip reason per caption) in input order: a sample,
    a copied shard sample or a skip, counted in this run's counts and the shard's."""

    def __init__(self, writer: ShardSetWriter, run: Counter, bar, opt: GenerateOptions):
        self.writer, self.run, self.bar, self.opt = writer, run, bar, opt

    def __call__(self, start: int, chunk: list[CaptionItem], results: list[Any]) -> None:
        writer, opt = self.writer, self.opt
        for item, res in zip(chunk, results):
            if opt.require_negative and res == []:
                res = "no_negative"
            negs = res if isinstance(res, list) else []
            sample = None
            if item.raw is None and isinstance(res, list):
                sample = ShardSample(item.key, item.caption.strip(), meta=item.meta, negatives=negs)
                if opt.images is not None:
                    res = _attach_image(sample, item, opt.images, opt.skip_missing) or res
            if not isinstance(res, list):
                negs = []
            for counts in (self.run, writer.counts):  # before the sample: it may finish the shard
                _count(counts, negs, None if isinstance(res, list) else res)
            if item.raw is not None and res != "no_negative":
                _copy_with_negatives(writer, item.raw, negs)
            elif isinstance(res, list):
                writer.add(sample)
            else:
                writer.skip(res)
        if self.bar is not None:
            self.bar.update(len(chunk))


def _attach_image(sample: ShardSample, item: CaptionItem, images, skip_missing: bool) -> Optional[str]:
    """Put the item's image file into `sample`; returns a skip reason, or raises, when it cannot."""
    where = f"caption key '{item.key}', image_id {item.meta.get('image_id')}"
    try:
        if not item.meta.get("image_path"):
            raise MissingImage(f"{item.meta.get('source', 'input')}: no image file name for {where}")
        sample.image, sample.image_ext = images.load(item.meta["image_path"], where)
    except MissingImage:
        if not skip_missing:
            raise
        return SKIP_MISSING
    except BadImage:
        if not skip_missing:
            raise
        return SKIP_CORRUPT
    return None


def _copy_with_negatives(writer: ShardSetWriter, raw: dict[str, Any], negs: list[Negative]) -> None:
    """Write an input shard sample again with `negs` in `neg.json` (rule negatives already there
    are replaced, others kept). With `ShardSetWriter.add_raw`, every member is copied byte for
    byte (unknown ones too); without it, the sample is re-encoded through `ShardSample`."""
    sample = ShardSample.from_wds(raw, require_image=False)
    merged = [n for n in sample.negatives if n.source != "rules"] + negs
    if not hasattr(writer, "add_raw"):
        sample.negatives = merged
        writer.add(sample)
        return
    members = {k: v for k, v in raw.items() if k != "neg.json"}
    extra = {}
    if merged:
        extra["neg.json"] = json.dumps([asdict(n) for n in merged], ensure_ascii=False,
                                       separators=(",", ":")).encode("utf-8")
    writer.add_raw(members, extra=extra)


def _run_pool(workers: int, config: dict[str, Any], vocab_file: Optional[str], vocab: Optional[Vocabulary],
              seed: int, chunks, write, parsed: list) -> None:
    """Point 2 of the module docstring with `workers` processes; the parent reads, sends each
    chunk's captions (and their kept parses, `parsed`) and writes the results in order."""
    import multiprocessing as mp
    # a forked worker inherits the parent's vocabulary; a spawned one reads vocab.json
    inherited = vocab if "fork" in mp.get_all_start_methods() else None
    with _pool(workers, config, (vocab_file, seed, inherited)) as pool:
        pending: deque = deque()
        for start, chunk in chunks:
            captions = [it.caption for it in chunk]
            reuse = parsed[start:start + len(chunk)]
            if parsed and start + len(chunk) >= len(parsed):
                parsed.clear()  # past the vocabulary sample: what is left goes with the pending chunks
            pending.append((start, chunk, pool.apply_async(_work, (start, captions, reuse))))
            while len(pending) > 2 * workers:
                s, c, res = pending.popleft()
                write(s, c, res.get())
        while pending:
            s, c, res = pending.popleft()
            write(s, c, res.get())


@contextmanager
def _pool(workers: int, config: dict[str, Any], initargs: tuple):
    """`workers` processes, each set up by `_init_worker(config, *initargs)` with one BLAS
    thread; forked where the platform can, after the spaCy pipeline is loaded here, so they
    inherit it instead of importing spaCy again."""
    import multiprocessing as mp
    RuleNegativeGenerator(**config).parse([])  # the pipeline loaded once, before the fork
    saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update({k: "1" for k in saved})  # children inherit: one BLAS thread each
    try:
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        with ctx.Pool(workers, initializer=_init_worker, initargs=(config, *initargs)) as pool:
            yield pool
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _count(counts: Counter, negs: list[Negative], skipped: Optional[str] = None) -> None:
    """Count one caption: `captions`, `skipped:<reason>`, `negatives:<kind>:<subkind>` and the
    coverage counts (`datagen.negatives.base.Coverage`, keys `coverage:...`)."""
    counts["captions"] += 1
    if skipped:
        counts[f"skipped:{skipped}"] += 1
    counts.update(f"negatives:{n.kind}:{n.subkind}" for n in negs)
    Coverage(counts=counts).add(negs)



def _finish_stats(counts: Counter, kinds, elapsed: float,
                  run_captions: Optional[int] = None) -> dict[str, Any]:
    """The closing report (`negatives_stats.json`, printed by `generate`) from `_count`'s counts:
    counts per kind:subkind, and coverage = share of the captions (skipped ones included) with at
    least one negative per kind:subkind (`coverage`), per kind, i.e. of any of its sub-kinds
    (`coverage_kind`), and of any kind (`coverage_any`); see `datagen.negatives.base.Coverage`.
    `kinds`: the (kind, subkind) pairs selected, reported at 0 when none fired. The speed is of
    `run_captions` (this run's captions; default: all counted) over `elapsed`."""
    run_captions = counts["captions"] if run_captions is None else run_captions
    return {"captions": counts["captions"], "seconds": round(elapsed, 3),
            "captions_per_s": round(run_captions / elapsed, 1) if elapsed > 0 else None,
            "skipped": grouped(counts, "skipped:"), "negatives": grouped(counts, "negatives:"),
            **Coverage(kinds, counts).report()}


def _read_stats(out_dir: Path) -> dict[str, Any]:
    path = out_dir / STATS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _total(input_path: str | Path, permuted: Optional[_Spilled], limit: Optional[int]) -> Optional[int]:
    """Items this run reads in all (the progress bar's total, hence its ETA): a text input is
    spilled already (`_Spilled`); a shard set's manifest counts its samples; a lone .tar shard
    is not counted."""
    total = None
    if permuted is not None:
        total = len(permuted)
    elif Path(input_path).is_dir():
        total = sum(s.get("samples", 0) for s in read_manifest(input_path).get("shards", []))
    if limit is not None:
        total = limit if total is None else min(total, limit)
    return total


def _progress(enabled: bool, initial: int, total: Optional[int]):
    if not enabled:
        return None
    from compclip.cli import progress
    return progress(initial=initial, total=total, unit="caption", smoothing=0.1,
                    desc="negatives")
