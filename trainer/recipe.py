"""Recipes: YAML files validated into typed config.

A recipe is plain YAML data. `load_recipe(path, overrides)` reads it, applies `key.sub=value`
command-line overrides, and validates the result into `Recipe` (pydantic models that forbid
unknown keys and do not coerce types). Any problem raises `RecipeError`, whose message is one line
naming the file, the key and, for a near-miss typo, the key that was probably meant.
The reference of every key lives in docs/recipes.md.

`TRAINING_KEYS` are the keys that change what is trained; a resume compares them with the
checkpoint's recipe (`training_changes`) and refuses a change unless `checkpoint.allow_recipe_change`.
`FREE_KEYS` are all the others (logging, evaluation, checkpoint timing, loader workers, validation).
"""
from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from compclip.errors import CompclipError


class RecipeError(CompclipError, ValueError):
    """A recipe that cannot be used; the message is a single line naming file and key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)


class ModelConfig(_Section):
    arch: Optional[str] = None  # null: the architecture a compclip checkpoint's sidecar names (pretrained)
    pretrained: Optional[str] = None  # open_clip tag, a checkpoint (file, pointer, run folder), or null (random init)
    activation: Literal["auto", "gelu", "quickgelu"] = "auto"
    lineage: Literal["auto", "openai", "other"] = "auto"
    freeze_image: bool = False
    freeze_text: bool = False
    grad_checkpointing: bool = False
    compile: bool = False  # torch.compile the model's forward (nn.Module.compile: state dicts unchanged)

    @model_validator(mode="after")
    def _arch_or_checkpoint(self) -> "ModelConfig":
        p = self.pretrained
        path_like = p is not None and ("/" in p or p.endswith((".pt", ".pth", ".bin", ".safetensors"))
                                       or p in ("best", "latest") or Path(p).exists())
        if self.arch is None and not path_like:
            raise ValueError("arch is required unless pretrained is a compclip checkpoint (which names its own)")
        return self


class DataConfig(_Section):
    train_shards: list[str]  # shard-set folders, brace patterns or paths; each entry is one source
    source_weights: Optional[list[float]] = None
    source_batch: Optional[list[Annotated[int, Field(ge=1)]]] = None  # exact anchors per batch per source
    sampling: Literal["resampled", "exact"] = "resampled"  # exact: one pass per epoch in a global random order
    samples_per_epoch: Optional[int] = Field(default=None, gt=0)  # resampled only: anchors per epoch
    visit_each_negative: bool = False  # exact only: a sample is visited once per eligible negative
    batch_size: int = Field(gt=0)  # positives per process per step
    partner: Literal["none", "neighbour", "generated", "mirrored"] = "none"
    partners_per_batch: Optional[int] = Field(default=None, ge=0)  # null: one per positive
    train_transform: Literal["train", "eval"] = "train"  # eval: resize + centre crop (BiVLC)
    jpeg_draft: bool = True  # decode large JPEGs at reduced size (>= the model's input size)
    workers: int = Field(default=2, ge=0)
    shuffle_buffer: int = Field(default=1000, ge=0)  # resampled only
    max_bad_fraction: float = Field(default=0.01, ge=0.0, le=1.0)
    val_shards: Optional[list[str]] = None  # held-out shard sets scored every epoch
    val_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)  # or: this share of images held out of training
    val_batches: Optional[int] = Field(default=None, gt=0)  # at most this many validation batches
    allow_incomplete: bool = False  # train on a shard set whose writer has not finished (manifest complete: false)

    @model_validator(mode="after")
    def _weights_match_sources(self) -> "DataConfig":
        if self.source_weights is not None and len(self.source_weights) != len(self.train_shards):
            raise ValueError("source_weights needs one weight per train_shards entry")
        if self.source_batch is not None:
            if self.source_weights is not None:
                raise ValueError("source_batch and source_weights exclude each other; set source_weights to null")
            if len(self.source_batch) != len(self.train_shards):
                raise ValueError("source_batch needs one anchor count per train_shards entry")
            if sum(self.source_batch) != self.batch_size:
                raise ValueError(f"source_batch sums to {sum(self.source_batch)}, "
                                 f"batch_size is {self.batch_size}; they must be equal")
        if self.sampling == "resampled":
            if self.samples_per_epoch is None:
                raise ValueError("sampling=resampled needs samples_per_epoch (anchors per epoch)")
            if self.visit_each_negative:
                raise ValueError("visit_each_negative needs sampling=exact")
        else:
            if self.samples_per_epoch is not None:
                raise ValueError("sampling=exact makes an epoch one pass over the data; set samples_per_epoch to null")
            if self.source_weights is not None:
                raise ValueError("sampling=exact reads every sample once per epoch; source_weights does not apply "
                                 "(use source_batch for a fixed mix)")
        if self.val_shards and self.val_fraction:
            raise ValueError("val_shards and val_fraction exclude each other; set one of them")
        return self


class NegativesConfig(_Section):
    per_image: int = Field(default=0, ge=0)  # hard-negative caption columns per positive
    per_partner: int = Field(default=0, ge=0)  # and per neighbour partner, from the neighbour's own neg.json
    draw: Literal["uniform", "by_subkind"] = "uniform"  # by_subkind: a sub-kind uniformly, then a candidate of it
    rules: Optional[Literal["negclip", "compclip"]] = None  # the training sets' manifest features.rules must be this
    kinds: list[Literal["swap", "replace", "add"]] = ["swap", "replace", "add"]
    subkinds: Optional[list[str]] = None  # null: every sub-kind of the chosen kinds


class LossConfig(_Section):
    logit_scale_init: float = 2.6592  # log(1 / 0.07), as CLIP
    logit_scale_max: Optional[float] = Field(default=100.0, gt=0)  # null: never clamped (BiVLC)
    learn_logit_scale: bool = True
    mask_same_image: bool = True  # false: the papers' plain loss (same-image pairs count as negatives)
    gather_with_grad: bool = True
    partners_as_positives: bool = True


class OptimConfig(_Section):
    lr: float = Field(gt=0)
    weight_decay: float = Field(default=0.2, ge=0)
    betas: list[float] = [0.9, 0.98]
    eps: float = Field(default=1e-6, gt=0)
    grad_clip: Optional[float] = Field(default=None, gt=0)
    accum_steps: int = Field(default=1, ge=1)
    exclude_embeddings_from_decay: bool = False  # open_clip / NegCLIP / BiVLC decay the embeddings
    implementation: Literal["auto", "foreach", "single"] = "auto"  # AdamW kernel (trainer/optim.py)
    text_lr: Optional[float] = Field(default=None, gt=0)  # the text tower's peak lr; null: `lr` for every parameter

    @model_validator(mode="after")
    def _two_betas(self) -> "OptimConfig":
        if len(self.betas) != 2:
            raise ValueError("betas needs exactly two values")
        return self


class ScheduleConfig(_Section):
    epochs: int = Field(gt=0)
    warmup_steps: int = Field(default=0, ge=0)
    kind: Literal["cosine", "constant"] = "cosine"


class EvalConfig(_Section):
    benchmarks: list[str] = []
    data_root: Optional[str] = None
    every_epoch: bool = True
    every_n_steps: int = Field(default=0, ge=0)
    distributed: bool = False
    batch_size: int = Field(default=256, gt=0)
    options: dict[str, dict[str, Any]] = {}
    allow_overlap: bool = False  # train even when training images are in an evaluation set (flagged)


class LoggingConfig(_Section):
    output_dir: str = "runs"
    run_name: Optional[str] = None
    tensorboard: bool = True
    report_to: list[str] = ["tensorboard"]  # trackers by accelerate's `log_with` names (trainer.monitor)
    every_n_steps: int = Field(default=10, gt=0)
    progress: bool = True

    @model_validator(mode="after")
    def _distinct_trackers(self):
        repeated = sorted({name for name in self.report_to if self.report_to.count(name) > 1})
        if repeated:
            raise ValueError(f"report_to names {', '.join(repeated)} more than once")
        return self


class CheckpointConfig(_Section):
    every_n_steps: int = Field(default=0, ge=0)
    every_minutes: float = Field(default=30.0, ge=0)  # also checkpoint when this long passed since the last (0: never)
    keep_last: int = Field(default=2, ge=1)
    best_metric: Optional[str] = None
    best_mode: Literal["max", "min"] = "max"
    resume: Optional[str] = None  # "auto", a run folder, or null
    overwrite: bool = False  # start over in a run folder that already holds checkpoints
    allow_recipe_change: bool = False  # resume although TRAINING_KEYS differ from the checkpoint's recipe (recorded)


class DistributedConfig(_Section):
    timeout_minutes: float = Field(default=30.0, gt=0)  # a collective waiting longer is an error on every rank


class Recipe(_Section):
    name: str
    seed: int = 0
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    model: ModelConfig
    data: DataConfig
    negatives: NegativesConfig = NegativesConfig()
    loss: LossConfig = LossConfig()
    optim: OptimConfig
    schedule: ScheduleConfig
    eval: EvalConfig = EvalConfig()
    logging: LoggingConfig = LoggingConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    distributed: DistributedConfig = DistributedConfig()

    @model_validator(mode="after")
    def _partner_negatives_need_neighbours(self) -> "Recipe":
        n, partner = self.negatives, self.data.partner
        if n.per_partner and partner != "neighbour":
            raise ValueError(f"negatives.per_partner={n.per_partner} draws from each neighbour's own neg.json and "
                             f"needs data.partner=neighbour (got {partner}); set negatives.per_partner=0")
        return self


# --- YAML -------------------------------------------------------------------------------------

class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-6` as a float (YAML 1.1 insists on `1.0e-6`)."""


_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def _parse_yaml(text: str, where: str, lines: bool = True) -> Any:
    try:
        return yaml.load(text, Loader=_RecipeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        at = f"line {mark.line + 1}: " if lines and mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context, begun = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and begun is not None and lines:
            context = f"{context} begun on line {begun.line + 1}"
        what = f"{problem} ({context})" if context else problem
        raise RecipeError(f"{where}: {at}not valid YAML: {what}") from None


# --- overrides -------------------------------------------------------------------------------

def apply_override(data: dict, override: str, source: str) -> None:
    """Apply one `key.sub=value` override in place; the value is parsed as YAML."""
    if "=" not in override:
        raise RecipeError(f"{source}: override '{override}' is not of the form key.sub=value")
    dotted, raw = override.split("=", 1)
    parts = dotted.strip().split(".")
    if not all(parts):
        raise RecipeError(f"{source}: override '{override}' has an empty key")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise RecipeError(f"{source}: key '{'.'.join(parts[:i + 1])}' is not a section")
        node = child
    node[parts[-1]] = _parse_yaml(raw, f"{source}: override '{dotted}'", lines=False)


# --- validation errors as one line -----------------------------------------------------------

def _known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys.extend(_known_keys(ann, prefix + name + "."))
    return keys


def _one_line(err: ValidationError, path: str) -> str:
    errors = err.errors()
    # a typo shows as both an unknown key and a missing one: report the typo, it is the cause
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    key = ".".join(str(p) for p in first["loc"])
    kind = first["type"]
    if kind == "extra_forbidden":
        known = _known_keys(Recipe)
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if not near:  # a typo in the last part only: compare within the same section
            section, _, leaf = key.rpartition(".")
            siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == section]
            near = [f"{section}.{m}" if section else m
                    for m in difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)]
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        return f"{path}: unknown key '{key}'{hint}"
    if kind == "missing":
        return f"{path}: missing required key '{key}'"
    more = f" ({len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    if not first["loc"]:  # a check across sections (`Recipe`'s own validator): its message names the keys
        return f"{path}: {first['msg'].removeprefix('Value error, ')}{more}"
    got = first.get("input")
    return f"{path}: key '{key}': {first['msg']} (got {got!r}){more}"


def validate_recipe(data: Any, path: str = "<recipe>") -> Recipe:
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe must be a YAML mapping, got {type(data).__name__}")
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise RecipeError(_one_line(err, path)) from None


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read, override and validate a recipe; raise RecipeError with a one-line message."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"{path}: recipe file not found")
    data = _parse_yaml(path.read_text(encoding="utf-8"), str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe must be a YAML mapping, got {type(data).__name__}")
    for override in overrides:
        apply_override(data, override, f"{path}")
    return validate_recipe(data, str(path))


VALIDATION_METRICS = ("loss", "loss_i2t", "loss_t2i", "i2t_acc", "t2i_acc", "hard_negative_acc", "partner_acc")


def check_best_metric(recipe: Recipe, produced: Optional[list[str]] = None) -> None:
    """`checkpoint.best_metric` must name a metric the run produces: `val/<metric>` with validation
    data configured, or `eval/<benchmark>/<metric>` of a benchmark in `eval.benchmarks`. Before the
    run only the benchmark part of an `eval/` name can be checked (benchmarks name their metrics
    when they score); `produced` (the names the first evaluation gave) checks the whole name."""
    name = recipe.checkpoint.best_metric
    if not name:
        return
    d, e = recipe.data, recipe.eval
    if produced is not None:
        known = sorted(produced)
    else:
        known = [f"val/{m}" for m in VALIDATION_METRICS] if (d.val_shards or d.val_fraction) else []
        known += [f"eval/{b}/..." for b in e.benchmarks]
        if name.startswith("eval/") and name.count("/") >= 2 and name.split("/")[1] in e.benchmarks:
            return
    if name in known:
        return
    candidates = [k.removesuffix("/...") for k in known]
    near = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    if not near and name.startswith("eval/") and produced is None:
        near = difflib.get_close_matches("/".join(name.split("/")[:2]), candidates, n=3, cutoff=0.6)
    hint = f"close: {', '.join(near)}" if near else (f"produced: {', '.join(known[:12])}" if known else
                                                    "no eval.benchmarks and no validation data")
    if not known:
        raise RecipeError(f"checkpoint.best_metric '{name}': this run produces no metric ({hint}); add "
                          f"data.val_shards / data.val_fraction or eval.benchmarks, or set checkpoint.best_metric=null")
    raise RecipeError(f"checkpoint.best_metric '{name}' is not a metric this run produces ({hint}); "
                      f"fix the name or set checkpoint.best_metric=null")


def recipe_to_dict(recipe: Recipe) -> dict:
    """Plain data form of a recipe, as stored in checkpoint metadata and run folders."""
    return recipe.model_dump(mode="json")


# --- what a resume may change ------------------------------------------------------------------

# Keys whose value changes what is trained (a section name stands for every key in it). A resume
# whose recipe differs from the checkpoint's in any of them is refused unless
# checkpoint.allow_recipe_change (trainer.loop; docs/trainer.md, "Reruns, crashes and faults").
TRAINING_KEYS = (
    "seed", "precision",
    "model.arch", "model.pretrained", "model.activation", "model.lineage", "model.freeze_image", "model.freeze_text",
    "data.train_shards", "data.source_weights", "data.source_batch", "data.sampling", "data.samples_per_epoch",
    "data.visit_each_negative", "data.batch_size", "data.partner", "data.partners_per_batch",
    "data.train_transform", "data.jpeg_draft", "data.shuffle_buffer", "data.val_fraction",
    "negatives", "loss", "optim", "schedule",
)
# Keys that leave the training itself as it was: they may change on resume, silently.
FREE_KEYS = (
    "name", "model.grad_checkpointing", "model.compile",
    "data.workers", "data.max_bad_fraction", "data.val_shards", "data.val_batches", "data.allow_incomplete",
    "eval", "logging", "checkpoint", "distributed",
)


def _under(key: str, names: tuple[str, ...]) -> bool:
    return any(key == n or key.startswith(n + ".") for n in names)


def is_training_key(key: str) -> bool:
    """Whether a dotted recipe key changes what is trained (a key in neither list counts as one)."""
    return _under(key, TRAINING_KEYS) or not _under(key, FREE_KEYS)


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _default(key: str) -> Any:
    """The value a recipe gets for `key` when it does not set it (None for a required or unknown key)."""
    model: Any = Recipe
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        if part not in fields:
            return None
        info = fields[part]
        if i == len(parts) - 1:
            return None if info.is_required() else info.get_default(call_default_factory=True)
        model = info.annotation
    return None


def training_changes(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
    """{key: (old value, new value)} for every training key that differs between two recipes in
    plain data form (`recipe_to_dict`); a key one of them lacks (a recipe written before the key
    existed) counts as its default (null for a key without one)."""
    a, b = _leaves(old), _leaves(new)
    changes = {}
    for key in sorted(set(a) | set(b)):
        if not is_training_key(key):
            continue
        before, after = a.get(key, _default(key)), b.get(key, _default(key))
        if before != after:
            changes[key] = (before, after)
    return changes


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    """`optim.lr 0.001 -> 0.002, data.batch_size 8 -> 16` (values as JSON)."""
    return ", ".join(f"{key} {json.dumps(old)} -> {json.dumps(new)}" for key, (old, new) in changes.items())
