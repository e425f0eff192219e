"""The shipped recipes (recipes/*.yaml): each validates, names benchmarks and metrics that exist,
has the batch layout docs/recipes.md gives it, and trains for 2 steps with that layout.

The smoke runs keep each recipe's structure (partner kind, negatives per image and kinds /
sub-kinds, negatives per partner, the draw, sources and their `source_batch` proportions,
accumulation) and shrink the rest: the
`tiny-vit-64` architecture with random weights, batch 8, 2 steps, fp32, no evaluation, and tiny
fixture shard sets written here that carry what each source of the recipe carries (negatives of
every kind:subkind the schema knows, K=3 neighbours + keys.tsv, generated or mirrored partners,
`features.rules` where the recipe's `negatives.rules` asks for it).
The batches are observed where they enter `Trainer.step`, i.e. what the loss really sees.
New recipes are picked up by the glob; a new non-demo recipe needs its documented layout in
FULL_LAYOUT and its shard sets in SHARD_SETS.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from compclip.shardset.schema import SUBKINDS, Negative, Neighbour, Partner, ShardSample
from compclip.shardset.shards import KeyIndex, ShardSetWriter
from compclip.trainer import train
from tests.fixtures.trainer_data import COLOURS, scene_jpeg, train_in_process
from compclip.trainer.recipe import Recipe, load_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
PAPER_RECIPES = [p for p in RECIPES if not p.stem.startswith("demo_")]

# What each real shard set carries (docs/data_prep.md, first table).
SHARD_SETS = {
    "coco": dict(negatives=True, partner=None, neighbours=0),
    "coco_negclip": dict(negatives=True, partner=None, neighbours=3, rules="negclip"),
    "trohn_text": dict(negatives=True, partner=None, neighbours=0),
    "trohn_img": dict(negatives=True, partner="generated", neighbours=0),
    "leftright": dict(negatives=False, partner="mirrored", neighbours=0),
}

# Full-size batch shapes (images, text columns) as docs/recipes.md "Batch shapes" states them:
# plain B x B; TROHN-Text B x 2B; TROHN-Img 2B x 2B; NegCLIP 2B x 4B; left-right 512 x 512.
FULL_LAYOUT = {
    "clip_ft": (256, 256),
    "negclip": (512, 1024),
    "trohn_text": (200, 400),
    "trohn_img": (400, 400),
    "leftright": (512, 512),
}

SMOKE_BATCH = 8
SMOKE_STEPS = 2


def _ids(paths):
    return [p.stem for p in paths]


# --- layout arithmetic -----------------------------------------------------------------------------

def bears_partner(features: dict, partner: str) -> bool:
    if partner == "neighbour":
        return bool(features["neighbours"])
    return partner != "none" and features["partner"] == partner


def expected_layout(recipe: Recipe, source_features: list[dict]) -> dict:
    """B, P, H and the batch shape the docs give for a recipe whose sources carry `source_features`."""
    d = recipe.data
    b = d.batch_size
    bears = [bears_partner(f, d.partner) for f in source_features]
    if d.partner == "none":
        p = 0
    elif d.source_batch:
        p = sum(count for count, bear in zip(d.source_batch, bears) if bear)
    else:
        p = b
    if d.partners_per_batch is not None:
        p = min(p, d.partners_per_batch)
    h = recipe.negatives.per_image * b + recipe.negatives.per_partner * p
    return {"B": b, "P": p, "H": h, "images": b + p, "texts": b + p + h}


def source_folder(entry: str) -> Path:
    """The shard-set folder of a `data.train_shards` entry (a folder, a brace pattern or a tar)."""
    return Path(entry).parent if "{" in entry or entry.endswith(".tar") else Path(entry)


def source_name(entry: str) -> str:
    return source_folder(entry).name


def features_of(recipe: Recipe, index: int) -> dict:
    """What a recipe's source carries: the real shard sets' table (docs/data_prep.md) by folder name;
    any other source (the demo world's sets) carries what the recipe asks of it. (Real folders are
    not read, so the test does not depend on what has been built on this machine.)"""
    d = recipe.data
    name = source_name(d.train_shards[index])
    if name in SHARD_SETS:
        return dict(SHARD_SETS[name])
    # a single source (or every source of a weighted mix) carries everything; in an exact mix only
    # the source with the fewest anchors per batch bears the partner (as left-right: 32 of 480)
    bears = d.partner != "none" and (not d.source_batch or index == min(range(len(d.source_batch)),
                                                                       key=lambda i: d.source_batch[i]))
    rules = {"rules": recipe.negatives.rules} if recipe.negatives.rules else {}
    return dict(negatives=recipe.negatives.per_image + recipe.negatives.per_partner > 0,
                partner=d.partner if bears and d.partner in ("generated", "mirrored") else None,
                neighbours=3 if bears and d.partner == "neighbour" else 0, **rules)


def scale_counts(counts: list[int], total: int) -> list[int]:
    """Counts with the same proportions summing to `total`, each >= 1 (e.g. [448, 32] -> [7, 1])."""
    scaled = [max(1, round(c * total / sum(counts))) for c in counts]
    while sum(scaled) != total:
        i = max(range(len(scaled)), key=lambda k: scaled[k]) if sum(scaled) > total else \
            min(range(len(scaled)), key=lambda k: scaled[k])
        scaled[i] += 1 if sum(scaled) < total else -1
    return scaled


# --- fixture shard sets ----------------------------------------------------------------------------

ALL_NEGATIVE_LABELS = [(kind, sub) for kind, subs in SUBKINDS.items() for sub in subs]


def write_source(directory: Path, prefix: str, features: dict, n: int = 24) -> Path:
    """A tiny shard set carrying `features`. With negatives, each sample has one negative of every
    kind:subkind the schema knows (the first a swap, as a generated partner's `negative_index` 0), so
    any `negatives.kinds` / `subkinds` selection of a recipe finds its columns."""
    rng = random.Random(prefix)
    names = list(COLOURS)
    with ShardSetWriter(directory, max_count=8, features=features) as writer:
        for i in range(n):
            left, right = rng.sample(names, 2)
            caption = f"a {left} square left of a {right} square"
            swapped = f"a {right} square left of a {left} square"
            negatives = [Negative(swapped if j == 0 else f"{caption} ({kind} {sub})", kind, sub, "test")
                         for j, (kind, sub) in enumerate(ALL_NEGATIVE_LABELS)] if features["negatives"] else []
            sample = ShardSample(key=f"{prefix}{i:04d}", caption=caption, image=scene_jpeg(left, right),
                                 meta={"source": "test"}, negatives=negatives)
            if features["partner"] == "generated":
                sample.partner = Partner(scene_jpeg(right, left), swapped, "generated", negative_index=0)
            elif features["partner"] == "mirrored":
                sample.partner = Partner(scene_jpeg(right, left), swapped, "mirrored")
            if features["neighbours"]:
                sample.neighbours = [Neighbour(f"{prefix}{(i + k) % n:04d}", 1.0 / k)
                                     for k in range(1, features["neighbours"] + 1)]
            writer.add(sample)
    if features["neighbours"]:
        KeyIndex.build(directory)
    return directory


def pool_size(recipe: Recipe, with_generated_partner: bool) -> int:
    """Negatives of a fixture sample that pass the recipe's kinds / sub-kinds filter."""
    neg = recipe.negatives
    keep = [(k, s) for k, s in ALL_NEGATIVE_LABELS
            if k in neg.kinds and (neg.subkinds is None or s in neg.subkinds)]
    if with_generated_partner and ALL_NEGATIVE_LABELS[0] in keep:
        return len(keep) - 1  # the partner's own negative is not a column
    return len(keep)


# --- tests -------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", RECIPES, ids=_ids(RECIPES))
def test_recipe_validates_and_names_what_exists(path):
    from compclip.eval.registry import list_benchmarks
    recipe = load_recipe(path)
    known = set(list_benchmarks())
    assert set(recipe.eval.benchmarks) <= known, f"unknown benchmarks {set(recipe.eval.benchmarks) - known}"
    d = recipe.data
    best = recipe.checkpoint.best_metric
    if best and best.startswith("val/"):
        assert d.val_shards or d.val_fraction, f"checkpoint.best_metric {best} needs validation data"
        assert best.removeprefix("val/") in {"loss", "i2t_acc", "t2i_acc", "hard_negative_acc", "partner_acc"}
    elif best:
        bench = best.removeprefix("eval/").split("/")[0]
        assert bench in recipe.eval.benchmarks, f"checkpoint.best_metric {best} needs '{bench}' in eval.benchmarks"
    if d.sampling == "resampled":
        assert d.samples_per_epoch // (d.batch_size * recipe.optim.accum_steps) >= 1


@pytest.mark.parametrize("path", PAPER_RECIPES, ids=_ids(PAPER_RECIPES))
def test_paper_recipes_select_on_held_out_data_with_exact_epochs(path):
    """The papers made exact passes in a global random order and chose the epoch on held-out data."""
    recipe = load_recipe(path)
    assert recipe.data.sampling == "exact"
    assert recipe.checkpoint.best_metric.startswith("val/")
    assert recipe.loss.mask_same_image and recipe.optim.exclude_embeddings_from_decay is False


@pytest.mark.parametrize("path", PAPER_RECIPES, ids=_ids(PAPER_RECIPES))
def test_paper_recipe_layout_and_shard_sets_match_the_docs(path):
    recipe = load_recipe(path)
    assert path.stem in FULL_LAYOUT, f"add {path.stem}'s documented batch shape to FULL_LAYOUT"
    names = [source_name(e) for e in recipe.data.train_shards]
    assert all(n in SHARD_SETS for n in names), f"{names}: add the shard set to SHARD_SETS"
    layout = expected_layout(recipe, [SHARD_SETS[n] for n in names])
    assert (layout["images"], layout["texts"]) == FULL_LAYOUT[path.stem]
    # docs/data_prep.md's table names the shard set each recipe reads
    table = dict(re.findall(r"^\| `(\w+)`\s*\| `(data/shards/\w+)`", (ROOT / "docs" / "data_prep.md")
                            .read_text(encoding="utf-8"), flags=re.M))
    assert table[path.stem] in recipe.data.train_shards
    assert recipe.eval.data_root == "data/benchmarks" and recipe.model.pretrained == "openai"
    assert {"visla", "aro", "bivlc", "sugarcrepe"} <= set(recipe.eval.benchmarks)


@pytest.fixture
def one_thread():
    """One torch thread: the tiny model gains nothing from more, and the test stays fast on a busy machine."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("path", RECIPES, ids=_ids(RECIPES))
def test_recipe_trains_two_steps_with_its_layout(path, tmp_path, monkeypatch, one_thread):
    recipe = load_recipe(path)
    d = recipe.data
    features = [features_of(recipe, i) for i in range(len(d.train_shards))]
    accum = recipe.optim.accum_steps
    first = scale_counts(d.source_batch, SMOKE_BATCH)[0] if d.source_batch else SMOKE_BATCH
    sizes = [24] * len(features)
    if d.sampling == "exact":  # an exact epoch is one pass over the first source: size it for 2 steps
        visits = pool_size(recipe, False) if d.visit_each_negative else 1
        sizes[0] = -(-SMOKE_STEPS * first * accum // visits)
    sources = [write_source(tmp_path / f"src{i}", f"src{i}_", f, n=n) for i, (f, n) in enumerate(zip(features, sizes))]
    steps = SMOKE_STEPS if d.sampling == "resampled" else sizes[0] * visits // first // accum  # visit-each may round up
    overrides = [
        f"data.train_shards={json.dumps([str(s) for s in sources])}",
        f"data.batch_size={SMOKE_BATCH}",
        *([f"data.samples_per_epoch={SMOKE_STEPS * SMOKE_BATCH * accum}", "data.shuffle_buffer=8"]
          if d.sampling == "resampled" else []),
        "data.val_shards=null", "data.val_fraction=0",  # the 24-sample fixtures hold no validation batch
        "data.workers=0",
        "model.arch=tiny-vit-64", "model.pretrained=null", "model.activation=auto", "model.lineage=auto",
        "precision=fp32", "schedule.epochs=1", "schedule.warmup_steps=1",
        "eval.benchmarks=[]", "eval.every_n_steps=0", "checkpoint.resume=null", "checkpoint.every_n_steps=0",
        "checkpoint.best_metric=null",  # no validation data nor benchmark here to select on
        f"logging.output_dir={tmp_path / 'runs'}", "logging.progress=false", "logging.every_n_steps=1",
    ]
    if d.source_batch:
        overrides.append(f"data.source_batch={scale_counts(d.source_batch, SMOKE_BATCH)}")
    if d.partners_per_batch:
        overrides.append(f"data.partners_per_batch={max(1, round(d.partners_per_batch * SMOKE_BATCH / d.batch_size))}")
    small = load_recipe(path, overrides)
    want = expected_layout(small, features)

    seen = []
    original = train.Trainer.step

    def observe(self, batches, **kwargs):
        seen.extend(batches)
        return original(self, batches, **kwargs)

    monkeypatch.setattr(train.Trainer, "step", observe)
    assert train_in_process([path, *overrides]) == 0

    assert len(seen) == steps * accum
    for batch in seen:
        batch.check()
        assert (batch.num_anchors, batch.num_partners, batch.num_negatives) == (want["B"], want["P"], want["H"])
        assert (batch.images.shape[0], batch.texts.shape[0]) == (want["images"], want["texts"])
        # which source each anchor came from: exact counts, partner-bearing sources first
        source_of = [int(k.split("_")[0].removeprefix("src")) for k in batch.keys]
        if small.data.source_batch:
            assert [source_of.count(i) for i in range(len(sources))] == small.data.source_batch
            bears = [bears_partner(f, d.partner) for f in features]
            assert all(bears[s] for s in source_of[:want["P"]])
        # negative columns: every anchor of a negative-bearing source gets its quota, others padding;
        # then each neighbour partner's quota from its own neg.json (the same source)
        per, per_partner = small.negatives.per_image, small.negatives.per_partner
        first = want["B"] + want["P"]
        if per:
            valid = batch.text_valid[first:first + want["B"] * per].reshape(want["B"], per).sum(1).tolist()
            for a, (src, n_valid) in enumerate(zip(source_of, valid)):
                generated = a < want["P"] and d.partner == "generated"
                quota = min(per, pool_size(small, generated)) if features[src]["negatives"] else 0
                assert n_valid == quota, f"anchor {a} of source {src}: {n_valid} valid negatives, want {quota}"
        if per_partner and want["P"]:
            valid = batch.text_valid[first + want["B"] * per:].reshape(want["P"], per_partner).sum(1).tolist()
            owners = batch.negative_of[want["B"] * per:].reshape(want["P"], per_partner)
            assert owners.tolist() == [[want["B"] + q] * per_partner for q in range(want["P"])]
            for q, (src, n_valid) in enumerate(zip(source_of, valid)):
                quota = min(per_partner, pool_size(small, False)) if features[src]["negatives"] else 0
                assert n_valid == quota, f"partner {q} of source {src}: {n_valid} valid negatives, want {quota}"

    ckpts = tmp_path / "runs" / (small.logging.run_name or small.name) / "checkpoints"
    latest = (ckpts / "latest").read_text().strip()
    assert (ckpts / latest).is_file()
    assert json.loads((ckpts / latest).with_suffix(".json").read_text())["step"] == steps
