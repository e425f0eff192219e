"""Entry point: `python -m trainer RECIPE [key.sub=value ...]` (the same as `python trainer/train.py`),
or `accelerate launch trainer/train.py RECIPE [...]` for several processes.

Runs single-process, multi-process DDP (NCCL on GPU, gloo on CPU) and DeepSpeed ZeRO-1/2 from
the same code; the launcher decides which. DeepSpeed ZeRO-3 is refused in the pre-flight
(`check_zero_stage`): its parameters are sharded, which the checkpoints and resume do not handle.
Order of work:

1. pre-flight (`preflight`, also `--check` alone): the launcher's DeepSpeed stage (not 3);
   recipe + overrides validated; the model's architecture and pretrained weights exist (an
   open_clip tag's cached, or fetchable when not offline); training and validation shard sets found, finished
   (`data.allow_incomplete`) and checked against the recipe (partners, negatives; with
   `negatives.rules`, negatives made by those rules); the evaluation data of every benchmark
   present; no training image in an evaluation set (unless `eval.allow_overlap`);
   `checkpoint.best_metric` names a metric the run produces; the run folder writable, not in use
   by another run (`run.lock`) and free of another run's checkpoints (unless resuming or
   `checkpoint.overwrite`); the checkpoint a resume starts from trained with this recipe's values
   of the training keys (unless `checkpoint.allow_recipe_change`). Any problem -> one line on
   stderr, exit 2, before any model is built; `--check` runs every check and prints one
   `error:` line per problem found.
   A warning line (no exit) when more than 1 % of the negative columns would be padding, as
   estimated on each source's first 1,000 samples;
2. model, optimiser, schedule, data streams; resume from the latest usable checkpoint if asked
   (`trainer.loop.Trainer`);
3. steps: compose -> forward -> global masked InfoNCE -> backward -> clip -> AdamW -> schedule ->
   logit-scale clamp; logging, evals and checkpoints as the recipe says (epoch ends, every N
   steps, every M minutes). At the end of an epoch the checkpoint is written first, then
   validation and the benchmarks run (their metrics printed on stderr), then `best` moves;
4. a non-finite loss, non-finite weights at a checkpoint (not written), too much bad data, a
   failed checkpoint write (disk full) or a collective that waited longer than
   `distributed.timeout_minutes` for another rank stops the run: one line, exit 3. SIGTERM or
   SIGUSR1 (`trainer.stopsignals`) stops it at the next step boundary, every rank, after a
   checkpoint of that step: `stopped by SIGTERM at step N ...`, exit 75. The last lines on stdout
   name the last and the best checkpoint.

Nothing heavy is imported before the arguments are parsed (`--help` answers at once).
`accelerate launch` itself always exits 1 when its script fails (its launcher does not pass the
script's code on); the message on stderr is the trainer's. Run `python -m trainer RECIPE --check`
first where the exit code matters (job scripts): it runs step 1 alone.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

# Run as a script (`accelerate launch trainer/train.py RECIPE`, `python trainer/train.py`),
# Python puts trainer/ first on sys.path: its modules (data.py, loss.py, transforms.py, ...)
# would then shadow any top-level module of those names, so trainer/ comes off. The repository
# root goes on instead, so `compclip` (and through it `compclip.trainer`, `compclip.models`, ...)
# imports from this checkout, not from whatever copy is installed (an editable install of another
# checkout included). Imported as a module (`python -m compclip.trainer`), sys.path[0] is not
# trainer/; only the root is put first. Not a change to any library (compclip.compat).
ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "trainer":
    sys.path.pop(0)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compclip import cli  # noqa: E402  (light: argparse and the standard library)

PROG = "python -m trainer"
_LOOP_NAMES = ("Trainer", "TrainingError", "make_accelerator", "using_deepspeed",
               "one_dim_logit_scale")


def __getattr__(name: str):
    """`train.Trainer` and friends live in `trainer.loop`, imported on first use."""
    if name in _LOOP_NAMES:
        from compclip.trainer import loop
        return getattr(loop, name)
    raise AttributeError(f"module 'compclip.trainer.train' has no attribute '{name}'")


def one_line(err: BaseException) -> str:
    """The message of an error, one line (DataLoader workers wrap theirs in a traceback)."""
    last = cli.one_line(err)
    for prefix in ("compclip.errors.DataError: ", "trainer.data.DataError: ", "DataError: "):
        last = last.removeprefix(prefix)
    return last


def run_dir(recipe) -> Path:
    return Path(recipe.logging.output_dir) / (recipe.logging.run_name or recipe.name)


def zero_stage() -> tuple[int, str] | None:
    """The DeepSpeed ZeRO stage `accelerate launch` asked for and where it was set, or None without
    DeepSpeed (or with a DeepSpeed config file this cannot read: DeepSpeed then says why)."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return None
    config = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")
    if config != "none":  # a DeepSpeed JSON config: its zero_optimization.stage decides (0 when absent)
        import json
        try:
            stage = json.loads(Path(config).read_text(encoding="utf-8")).get("zero_optimization", {}).get("stage", 0)
            return int(stage), f"zero_optimization.stage in the DeepSpeed config {config}"
        except (OSError, ValueError, TypeError, AttributeError):
            return None
    return int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")), "zero_stage of the accelerate launch config"


def check_zero_stage() -> None:
    """Refuse DeepSpeed ZeRO-3 (one line, before anything is built): its parameters are sharded
    across ranks, and the trainer's checkpoints, resume and evaluation read whole parameters."""
    found = zero_stage()
    if found and found[0] == 3:
        raise cli.InputError(f"DeepSpeed ZeRO stage 3 ({found[1]}) is not supported: checkpoints, resume and "
                             f"evaluation need whole parameters on every rank; launch with ZeRO stage 1 or 2 "
                             f"(launch/accelerate_cpu2_zero2.yaml, launch/gpu_8_zero2_bf16.yaml) or DDP")


def check_model(recipe) -> None:
    """`model.arch` is a known architecture and `model.pretrained` readable weights or one of its tags
    (`models.load.resolve_model`: nothing is built; a compclip checkpoint's sidecar must agree), a
    tag's weights in the local cache or fetchable (`models.load.tag_weights_problem`)."""
    from compclip.models.load import ArchitectureMismatch, UnknownArchitecture, resolve_model, tag_weights_problem
    from compclip.trainer.recipe import RecipeError
    m = recipe.model
    try:
        arch, weights = resolve_model(m.arch, m.pretrained)
    except (UnknownArchitecture, ArchitectureMismatch) as err:
        raise RecipeError(f"model.arch '{m.arch}': {cli.one_line(err)}".replace(
            "leave the architecture out", "set model.arch=null")) from None
    except (ValueError, LookupError, OSError) as err:
        if type(err) is cli.InputError:  # "no architecture given ...": its message names the weights and the fix
            raise
        raise RecipeError(f"model.pretrained '{m.pretrained}': {cli.describe(err)}") from None
    problem = tag_weights_problem(arch, weights) if weights and not os.path.isfile(weights) else None
    if problem:
        raise RecipeError(f"model.pretrained '{m.pretrained}': the weights of open_clip tag '{weights}' of {arch} "
                          f"are not available: {problem}; fetch them once where the hub is reachable (open_clip "
                          f"caches them), or give a local weights file: model.pretrained=/path/to/weights.pt")


def check_trackers(recipe) -> None:
    """`logging.report_to` names trackers accelerate knows, their packages installed."""
    from compclip.trainer.monitor import check_trackers as check
    try:
        check(recipe.logging.report_to)
    except ValueError as err:
        raise cli.InputError(str(err)) from None


def check_writable(folder: Path) -> None:
    """The run folder (or the nearest existing parent it would be made in) accepts new files."""
    import tempfile
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    targets = [probe] + [probe / sub for sub in ("checkpoints", "tensorboard") if (probe / sub).is_dir()]
    for target in targets:
        try:
            with tempfile.TemporaryFile(dir=target):
                pass
        except OSError as err:
            raise cli.InputError(f"logging.output_dir: cannot write in {target} ({err.strerror or err}); make it "
                                 f"writable or choose another logging.output_dir / logging.run_name") from None


def warn_padding(recipe, sources) -> None:
    """A warning line on stderr for each source whose first samples say that more than 1 % of its
    negative columns would be padding (`trainer.data.padding_warning`). With
    `data.visit_each_negative` every visit carries its negative: nothing to estimate."""
    from compclip.trainer.data import carries_partner, padding_warning
    n, d = recipe.negatives, recipe.data
    if not (n.per_image or n.per_partner) or d.visit_each_negative:
        return
    share = 1.0 if d.partners_per_batch is None else min(1.0, d.partners_per_batch / d.batch_size)
    for i, src in enumerate(sources):
        partners = share if n.per_partner and carries_partner(src, "neighbour") else 0.0
        line = padding_warning(i, src, n.kinds, n.subkinds, n.per_image, n.per_partner, partners)
        if line:
            print(line, file=sys.stderr, flush=True)


class PreflightProblems(Exception):
    """Several pre-flight problems, each an error of its own (`errors`), reported together."""

    def __init__(self, errors: list[BaseException]):
        super().__init__(f"{len(errors)} problems: " + "; ".join(cli.describe(e) for e in errors))
        self.errors = errors


class _Problems:
    """Runs the pre-flight's checks; with `collect`, a failing check is kept and the next one runs
    (`--check` lists every problem of a recipe in one run), else the first failure raises."""

    def __init__(self, collect: bool):
        self.collect, self.errors = collect, []

    def check(self, fn, *args, **kwargs):
        """`fn(*args, **kwargs)`; its result, or None when it failed and problems are collected."""
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 -- each is reported as its own `error:` line
            if not self.collect:
                raise
            self.errors.append(err)
            return None

    def ok(self, since: int) -> bool:
        """No problem found since `since` problems had been found."""
        return len(self.errors) == since

    def raise_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise PreflightProblems(self.errors)


def preflight(recipe, collect: bool = False):
    """Every check that needs no model (step 1 of the module docstring); raises on a problem
    (with `collect`, after running every check: one error, or `PreflightProblems` holding each;
    a check that needs what a failed one gives is skipped). Returns (training sources, validation
    sources or None, overlap {benchmark: images})."""
    from compclip import runlock
    from compclip.trainer import checkpointing, evaluation, streams
    from compclip.trainer.data import DataError, check_features, resolve_sources
    from compclip.trainer.recipe import RecipeError, check_best_metric
    d, c, n = recipe.data, recipe.checkpoint, recipe.negatives
    p = _Problems(collect)
    p.check(check_zero_stage)
    p.check(check_model, recipe)
    p.check(check_trackers, recipe)
    p.check(check_best_metric, recipe)
    folder = run_dir(recipe)
    p.check(check_writable, folder)
    if os.environ.get("RANK", "0") == "0":  # the other ranks would see their own run's lock
        def locked():
            try:
                runlock.check(folder)
            except runlock.RunLocked as err:
                raise cli.InputError(str(err)) from None
        p.check(locked)
    before = len(p.errors)
    sources = p.check(resolve_sources, d.train_shards, allow_incomplete=d.allow_incomplete)
    if sources is not None:
        p.check(check_features, sources, d.partner, n.per_image, mixed=d.source_batch is not None,
                negatives_per_partner=n.per_partner, rules=n.rules)
    val_sources = (p.check(resolve_sources, d.val_shards, "data.val_shards", allow_incomplete=d.allow_incomplete)
                   if d.val_shards else None)
    if sources is not None and (d.sampling == "exact" or d.val_fraction):
        p.check(streams.require_folders, sources, "data.train_shards")
    if val_sources:
        p.check(streams.require_folders, val_sources, "data.val_shards")
    sources_ok = p.ok(before) and sources is not None
    before = len(p.errors)
    p.check(evaluation.check_available, recipe.eval)
    if p.ok(before):
        p.check(evaluation.check_data, recipe.eval)
    overlap = {}
    if sources_ok and p.ok(before):
        overlap = p.check(evaluation.overlap_with_benchmarks, recipe.eval, sources) or {}
        if overlap and not recipe.eval.allow_overlap:
            listed = ", ".join(f"{name}: {k} image(s)" for name, k in sorted(overlap.items()))
            p.check(_raise, DataError(f"training images are in evaluation sets ({listed}); rebuild the shard set "
                                      f"with benchmark images excluded (docs/data_prep.md) or set "
                                      f"eval.allow_overlap=true (the numbers are then flagged)"))
    if c.resume is None and not c.overwrite and checkpointing.existing_checkpoints(folder):
        p.check(_raise, RecipeError(f"{folder / 'checkpoints'} already holds checkpoints of another run; continue "
                                    f"it with checkpoint.resume=auto, or start over with checkpoint.overwrite=true"))
    candidate = p.check(checkpointing.resume_candidate, c.resume, folder)
    if candidate is not None:  # the training keys of its recipe must be this one's (allow_recipe_change)
        p.check(checkpointing.check_recipe, candidate, recipe)
    p.raise_any()
    if os.environ.get("RANK", "0") == "0":  # every check passed: warnings only
        warn_padding(recipe, sources)
    return sources, val_sources, overlap


def _raise(err: BaseException) -> None:
    raise err


def build_parser():
    parser = cli.make_parser(PROG, __doc__.split("\n\n")[0].replace("\n", " "),
                             epilog="Every recipe key is documented in docs/recipes.md; the trainer in docs/trainer.md. "
                                    "python -m trainer export CHECKPOINT --out DIR writes open_clip's local-dir form.")
    parser.add_argument("recipe", help="the recipe YAML file (recipes/*.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value",
                        help="recipe overrides, each value parsed as YAML (e.g. optim.lr=1e-5 checkpoint.resume=auto)")
    parser.add_argument("--check", action="store_true",
                        help="run the pre-flight checks only (recipe, model, data, evaluation data, overlap, run folder)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the full traceback of an error")
    return parser


def _train(args) -> int:
    from compclip.trainer.recipe import load_recipe
    from compclip import lognoise as noise
    noise.install()  # DeepSpeed's "Setting accelerator to CPU" on a machine without CUDA
    recipe = load_recipe(args.recipe, args.overrides)
    try:
        sources, val_sources, overlap = preflight(recipe, collect=args.check)
    except PreflightProblems as problems:  # --check: one `error:` line per problem
        for err in problems.errors:
            print(f"error: {cli.describe(err)}", file=sys.stderr, flush=True)
        print(f"{args.recipe}: {len(problems.errors)} pre-flight problems", file=sys.stderr, flush=True)
        return max(cli.exit_status(err) for err in problems.errors)
    if args.check:
        print(f"{args.recipe}: pre-flight checks passed", file=sys.stderr)
        return 0
    from compclip.trainer import stopsignals
    previous = stopsignals.install()
    try:
        return _fit(recipe, sources, val_sources, overlap)
    except RuntimeError as err:
        from compclip.trainer.loop import collective_timed_out, collective_timeout_message
        if not collective_timed_out(err):
            raise
        rank = int(os.environ.get("RANK", "0"))
        raise cli.RunFault(collective_timeout_message(recipe, rank)) from err
    finally:
        stopsignals.restore(previous)


def _fit(recipe, sources, val_sources, overlap) -> int:
    """Build the `Trainer` and run it; 0 when done, 75 when stopped by a signal after a checkpoint."""
    from compclip.trainer.data import DataError
    from compclip.trainer.loop import Stopped, Trainer, TrainingError
    from compclip.trainer.stopsignals import EXIT_STOPPED
    try:
        trainer = Trainer(recipe, sources, val_sources, overlap)
    except DataError as err:
        raise DataError(one_line(err)) from err
    try:
        trainer.fit()
    except Stopped as stop:
        if trainer.acc.is_main_process:
            print(stop, file=sys.stderr, flush=True)
        return EXIT_STOPPED
    except (TrainingError, DataError) as err:  # found during the run: a fault, exit 3
        raise cli.RunFault(one_line(err)) from err
    finally:
        trainer.release()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)  # options may come after overrides
    return cli.run(lambda: _train(args), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
