"""The training run: `Trainer` builds the model, optimiser, schedule and data streams from a
validated recipe, resumes, and runs the loop (module docstring of `trainer/train.py`, steps 2-4).

Set-up order: the run folder's lock (`compclip.runlock`, taken by the main process and the outcome
broadcast, so every rank stops with the same one line); model, optimiser, schedule, streams; the
checkpoint to resume from (chosen by the main process, `checkpointing.find_resume`, broadcast;
its recipe compared with this one, `checkpointing.check_recipe`) and its state; the monitor (which
drops what a killed run logged after the resumed step). `recipe.precision` fp16 / bf16 runs as fp32
without a GPU (a note says so; the sidecars record what ran).

Checkpoints: every epoch end, every `checkpoint.every_n_steps`, and when `checkpoint.every_minutes`
have passed since the last one, by the main process's clock, broadcast each step so every rank
takes part in the same (collective) save.

Stop signals (`trainer.stopsignals`: SIGTERM, SIGUSR1): at every step boundary the ranks agree
through an all-reduce whether any of them received one; if so, every rank takes part in a
checkpoint of that step (an epoch's last step: the epoch's checkpoint, its evaluation left to the
rerun) and `Stopped` is raised. Collectives wait at most `distributed.timeout_minutes`; a rank
that waited longer raises, and `collective_timeout_message` turns that into one line.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Optional

import torch

from compclip.cli import InputError, note
from compclip.compat.torch import one_dim_logit_scale
from compclip.models import CheckpointMeta, load_model
from compclip.models.token_cache import CachedTokenizer
from compclip import runlock
from compclip.trainer import checkpointing, evaluation, stopsignals, streams
from compclip.trainer.data import make_loader
from compclip.trainer.loss import ContrastiveLoss, Layout
from compclip.trainer.monitor import Monitor, memory_mb
from compclip.trainer.optim import build_optimizer, build_scheduler
from compclip.trainer.recipe import Recipe, RecipeError, check_best_metric, describe_changes, recipe_to_dict
from compclip.trainer.transforms import split_normalize, to_model_input
from compclip.errors import CompclipError
from compclip.fileio import atomic_write

OPTIMIZER_SETTINGS = ("lr", "initial_lr", "betas", "eps", "weight_decay")  # what a recipe sets per group


class TrainingError(CompclipError, RuntimeError):
    """A fault that stops the run (non-finite loss); the message is one line."""


class Stopped(CompclipError):
    """The run stopped on a stop signal after writing the checkpoint of `step`; the message is the
    line to print."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


_GLOO_TIMEOUT = re.compile(r"Timed out waiting \d+ms for (send|recv) operation")


def collective_timed_out(err: BaseException) -> bool:
    """A collective gave up waiting for another rank: gloo's `Timed out waiting <N>ms for recv
    operation` (a RuntimeError), or torch's DistBackendError saying it timed out."""
    import torch.distributed as dist
    text = str(err)
    if isinstance(err, getattr(dist, "DistBackendError", ())) and "timed out" in text.lower():
        return True
    return isinstance(err, RuntimeError) and bool(_GLOO_TIMEOUT.search(text))


def collective_timeout_message(recipe: Recipe, rank: int) -> str:
    minutes = recipe.distributed.timeout_minutes
    return (f"rank {rank}: a collective timed out after {minutes:g} min (another rank stalled or died); "
            f"rerun with checkpoint.resume=auto to continue from the last checkpoint; if a rank legitimately "
            f"works alone longer (an evaluation on rank 0), raise distributed.timeout_minutes")


def using_deepspeed() -> bool:
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def ran_precision(recipe: Recipe) -> str:
    """The precision training runs in: the recipe's on a GPU; fp32 on CPU (mixed precision is used
    on a GPU only)."""
    return recipe.precision if torch.cuda.is_available() else "fp32"


def make_accelerator(recipe: Recipe):
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs
    gpu = torch.cuda.is_available()
    precision = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[ran_precision(recipe)]
    multi = int(os.environ.get("WORLD_SIZE", "1")) > 1 or using_deepspeed()
    timeout = timedelta(minutes=recipe.distributed.timeout_minutes)  # every collective waits at most this
    handlers = [InitProcessGroupKwargs(backend="nccl" if gpu else "gloo", timeout=timeout)] if multi else []
    # the recipe owns accumulation; a launcher config may export "auto", which Accelerator cannot parse
    os.environ["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] = str(recipe.optim.accum_steps)
    # on CPU: DDP needs cpu=True (else a gloo allgather length error); DeepSpeed needs it off
    accelerator = Accelerator(cpu=not gpu and not using_deepspeed(), mixed_precision=precision,
                              gradient_accumulation_steps=recipe.optim.accum_steps, kwargs_handlers=handlers)
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None:  # no prepared DataLoader tells DeepSpeed the micro-batch size
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = recipe.data.batch_size
        plugin.deepspeed_config["gradient_accumulation_steps"] = recipe.optim.accum_steps
        plugin.deepspeed_config["gradient_clipping"] = recipe.optim.grad_clip or 0.0  # 0: no clipping
    return accelerator


def clock() -> float:
    """Seconds for `checkpoint.every_minutes` (a module function, so a test can skew one rank's)."""
    return time.monotonic()


def from_main(accelerator, value):
    """The main process's `value`, on every rank."""
    from accelerate.utils import broadcast_object_list
    return broadcast_object_list([value])[0] if accelerator.num_processes > 1 else value


def say(accelerator, message: str) -> None:
    """A line on stderr from the main process (warnings and progress lines)."""
    if accelerator.is_main_process:
        print(message, file=sys.stderr, flush=True)


class Trainer:
    def __init__(self, recipe: Recipe, sources, val_sources=None, overlap: Optional[dict] = None):
        from accelerate.utils import set_seed
        self.recipe, self.sources, self.val_sources = recipe, sources, val_sources
        self.overlap = overlap or {}  # benchmark -> training images in it (eval.allow_overlap)
        self.eval_tokenizer: Optional[CachedTokenizer] = None  # made at the first evaluation
        self.acc = make_accelerator(recipe)
        self.precision = ran_precision(recipe)
        if self.precision != recipe.precision:
            say(self.acc, f"note: precision={recipe.precision} runs as fp32 on CPU (the trainer uses mixed precision "
                          f"on a GPU only); the checkpoints' sidecars record precision: fp32")
        set_seed(recipe.seed)
        self.run_dir = run_dir(recipe)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.lock: Optional[Path] = None
        problem = None
        if self.acc.is_main_process:
            try:
                self.lock = runlock.acquire(self.run_dir, note=note)
            except runlock.RunLocked as err:
                problem = str(err)
        problem = from_main(self.acc, problem)
        if problem:
            raise InputError(problem)
        try:
            self._set_up()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Give the run folder's lock back (main process; safe to call twice)."""
        runlock.release(self.lock)
        self.lock = None

    def _set_up(self) -> None:
        recipe = self.recipe
        m = recipe.model
        self.loaded = load_model(m.arch, m.pretrained, activation=m.activation, lineage=m.lineage)
        model = self.loaded.model
        if m.pretrained is None:
            with torch.no_grad():
                model.logit_scale.fill_(recipe.loss.logit_scale_init)
        model.logit_scale.requires_grad_(recipe.loss.learn_logit_scale)
        if m.freeze_image:
            model.lock_image_tower()
        if m.freeze_text:
            model.lock_text_tower()
        if m.grad_checkpointing:
            model.set_grad_checkpointing(True)
        if using_deepspeed():
            one_dim_logit_scale(model)
        if m.compile:  # in place: the module, its state dict and checkpoints stay plain open_clip
            model.compile()

        world, d = self.acc.num_processes, recipe.data
        self.accum = recipe.optim.accum_steps
        rank, progress = self.acc.process_index, recipe.logging.progress and self.acc.is_main_process
        with self.acc.main_process_first():  # rank 0 builds and caches the sample indexes
            self.stream = streams.train_stream(recipe, self.sources, self.loaded, rank, world, progress)
            self.val_stream = streams.val_stream(recipe, self.sources, self.val_sources, self.loaded, rank, world,
                                                 progress)
        if d.sampling == "exact":
            self.steps_per_epoch = self.stream.available_batches // self.accum
            if self.steps_per_epoch == 0:
                raise RecipeError(f"data: one pass over the training data is {self.stream.available_batches} "
                                  f"batch(es) of {d.batch_size} per process, less than one step "
                                  f"(accum_steps {self.accum}, {world} processes)")
        else:
            self.steps_per_epoch = d.samples_per_epoch // (d.batch_size * world * self.accum)
            if self.steps_per_epoch == 0:
                raise RecipeError(f"data.samples_per_epoch={d.samples_per_epoch} is less than one step "
                                  f"(batch_size {d.batch_size} x {world} processes x accum_steps {self.accum})")
        self.stream.batches_per_epoch = self.steps_per_epoch * self.accum
        self.total_steps = self.steps_per_epoch * recipe.schedule.epochs
        if recipe.schedule.warmup_steps > self.total_steps:
            say(self.acc, f"warning: schedule.warmup_steps={recipe.schedule.warmup_steps} is longer than the "
                          f"run ({self.total_steps} steps); the learning rate never reaches optim.lr")
        optimizer = build_optimizer(model, recipe.optim)
        self.scheduler = build_scheduler(optimizer, self.total_steps, recipe.schedule)
        self.model, self.optimizer = self.acc.prepare(model, optimizer)
        _, normalize = split_normalize(self.loaded.preprocess_train)  # workers send uint8 images
        self.to_input = to_model_input(normalize, next(self.model.parameters()).dtype)
        self.loss_fn = ContrastiveLoss(recipe.loss.logit_scale_max, recipe.loss.gather_with_grad,
                                       recipe.loss.mask_same_image, clamp_in_forward=using_deepspeed())
        self.state = checkpointing.TrainState()
        self.data_layout = {"world_size": world, "workers": d.workers}
        if d.source_batch:  # positions are then counted per source
            self.data_layout["source_batch"] = d.source_batch
        if d.sampling == "exact":
            self.data_layout["sampling"] = "exact"
        self.local_streams: dict = {}
        if recipe.checkpoint.overwrite and recipe.checkpoint.resume is None:
            checkpointing.clear_run(self.run_dir, self.acc)
        self.pending_eval = self._resume()
        self.monitor = Monitor(self.run_dir, self.acc.is_main_process, recipe.logging.tensorboard,
                               recipe.logging.progress, resumed_step=self.state.step, pending_eval=self.pending_eval,
                               trackers=tuple(recipe.logging.report_to), project=recipe.name,
                               config=recipe.model_dump(mode="json"))
        self.last_checkpoint_time = clock()
        self.best_metric_checked = False
        self.best_choice: Optional[dict] = None  # the last `_judge_best`

    def _resume(self) -> bool:
        """Restore the checkpoint the recipe asks for (chosen on the main process, an unusable
        `latest` falling back to an earlier one; a changed training key refused unless
        `checkpoint.allow_recipe_change`, which then takes the new optimiser settings and records the
        changes); returns whether its evaluation is still to do."""
        r = self.recipe
        found, problem, changes = None, None, {}
        if self.acc.is_main_process:
            try:
                found = checkpointing.find_resume(r.checkpoint.resume, self.run_dir, note=note)
                changes = checkpointing.check_recipe(found, r) if found else {}
            except InputError as err:
                problem = str(err)
        found, problem, changes = from_main(self.acc, (str(found) if found else None, problem, changes))
        if problem:
            raise InputError(problem)
        pending_eval = False
        if found is not None:
            resume = Path(found)
            settings = self._optimizer_settings()
            self.local_streams = checkpointing.restore(self.acc, resume, self.model, self.scheduler, self.state)
            say(self.acc, f"resumed from {resume} (step {self.state.step}, epoch {self.state.epoch})")
            if changes:
                self._take_optimizer_settings(settings)
                self.state.recipe_changes = list(self.state.recipe_changes) + [
                    {"step": self.state.step, "changes": changes}]
                say(self.acc, f"note: resuming with a changed recipe (checkpoint.allow_recipe_change): "
                              f"{describe_changes({k: tuple(v) for k, v in changes.items()})}; recorded in the "
                              f"checkpoints' sidecars (recipe_changes)")
            self.state.metrics, self.state.best = checkpointing.recorded_metrics(resume, r.checkpoint.best_metric)
            # killed between an epoch's checkpoint and its evaluation: evaluate it now
            pending_eval = self.state.batch_in_epoch == 0 and self.state.step > 0 and not self.state.metrics
            if self.state.layout and self.state.layout != self.data_layout:
                say(self.acc, f"warning: checkpoint data layout {self.state.layout} != {self.data_layout}; "
                              "the rest of this epoch is drawn from fresh streams (data order differs)")
                self.local_streams = {}
        return pending_eval

    def _optimizer_settings(self) -> list[dict]:
        """The recipe's AdamW settings of each parameter group, as built (before a resume loads the saved ones)."""
        return [{k: v for k, v in group.items() if k in OPTIMIZER_SETTINGS} for group in self.optimizer.param_groups]

    def _take_optimizer_settings(self, settings: list[dict]) -> None:
        """After a resume with `checkpoint.allow_recipe_change`: this recipe's lr, betas, eps and weight
        decay replace the saved ones (the optimiser's moments stay), and the schedule continues from
        the restored step with this recipe's lr."""
        for group, built in zip(self.optimizer.param_groups, settings):
            group.update({k: v for k, v in built.items() if k != "lr"})
        self.scheduler.base_lrs = [built["initial_lr"] for built in settings]
        step = self.scheduler.last_epoch
        lrs = [base * factor(step) for base, factor in zip(self.scheduler.base_lrs, self.scheduler.lr_lambdas)]
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self.scheduler._last_lr = lrs

    # --- one optimiser step ---------------------------------------------------------------------
    def step(self, batches, details: bool = False):
        """Forward/backward over `accum_steps` micro-batches as ONE contrastive batch.

        accum_steps = 1: plain. accum_steps > 1: feature caching (open_clip's accum_freq): a
        no-grad pass embeds every micro-batch, then each micro-batch is re-embedded with grad and
        the loss of the *whole* accumulated batch is computed with the others' cached features;
        the gradients summed over micro-batches equal those of the big batch (the logit scale
        takes its gradient from the last micro-batch only, so it is counted once).
        Returns the loss, and with `details` also the loss's in-batch numbers (`trainer.loss`).
        """
        layouts = [Layout.from_batch(b, self.recipe.loss.partners_as_positives) for b in batches]
        if self.accum == 1:
            cached, layout = None, layouts[0]
        else:
            with torch.no_grad():
                cached = [self.model(image=self.to_input(b.images), text=b.texts)[:2] for b in batches]
            layout = Layout.cat(layouts)
        value, info = None, {}
        for m, batch in enumerate(batches):
            with self.acc.accumulate(self.model):
                img, txt, scale = self.model(image=self.to_input(batch.images), text=batch.texts)
                if cached is not None:
                    img = torch.cat([img if k == m else c[0] for k, c in enumerate(cached)])
                    txt = torch.cat([txt if k == m else c[1] for k, c in enumerate(cached)])
                    scale = scale if m == len(batches) - 1 else scale.detach()
                if details and value is None:
                    loss, info = self.loss_fn(img, txt, scale, layout, details=True)
                else:
                    loss = self.loss_fn(img, txt, scale, layout)
                if value is None:
                    value = loss.item()
                    if not math.isfinite(value):
                        self._non_finite(value, batches)
                self.acc.backward(loss * self.accum)  # accelerate divides by accum_steps
                if self.acc.sync_gradients and self.recipe.optim.grad_clip and not using_deepspeed():
                    self.acc.clip_grad_norm_(self.model.parameters(), self.recipe.optim.grad_clip)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        if not self.acc.optimizer_step_was_skipped:
            self.scheduler.step()
        cap = self.recipe.loss.logit_scale_max
        if cap is not None and not using_deepspeed():  # as open_clip / NegCLIP: clamp the parameter after the step
            with torch.no_grad():
                self.acc.unwrap_model(self.model).logit_scale.clamp_(0, math.log(cap))
        return (value, info) if details else value

    def _non_finite(self, value: float, batches) -> None:
        from accelerate.utils import gather_object
        keys = gather_object([k for b in batches for k in b.keys])
        shown = ", ".join(keys[:16]) + (f", ... ({len(keys)} in all)" if len(keys) > 16 else "")
        raise TrainingError(f"loss is {value} at step {self.state.step + 1} (epoch {self.state.epoch}); "
                            f"batch sample keys: {shown}")

    # --- evaluation and checkpoints ---------------------------------------------------------------
    def validate(self) -> dict[str, float]:
        """Loss and in-batch accuracies on the validation batches (every rank takes part)."""
        if self.val_stream is None:
            return {}
        with torch.no_grad():
            return self._validate()

    def _validate(self) -> dict[str, float]:
        self.model.eval()
        totals: dict[str, float] = {}
        counts: dict[str, int] = {}
        for batch, _ in make_loader(self.val_stream, 0, self.recipe.seed, 0):
            batch = batch.to(self.acc.device)
            img, txt, scale = self.model(image=self.to_input(batch.images), text=batch.texts)
            loss, info = self.loss_fn(img, txt, scale, Layout.from_batch(batch, self.recipe.loss.partners_as_positives),
                                      details=True)
            for name, value in {"loss": float(loss), **info}.items():
                totals[name] = totals.get(name, 0.0) + value
                counts[name] = counts.get(name, 0) + 1
        self.model.train()
        return {f"val/{name}": totals[name] / counts[name] for name in totals
                if name not in ("masked_pairs", "negative_padding")}  # training-step numbers only

    def evaluate(self) -> dict[str, float]:
        """Validation, then the recipe's benchmarks; the metrics go to the monitor and the state."""
        cfg = self.recipe.eval
        metrics, intervals = self.validate(), {}
        if cfg.benchmarks and (cfg.distributed or self.acc.is_main_process):
            if self.eval_tokenizer is None:  # the benchmarks' texts, tokenized once per run
                self.eval_tokenizer = CachedTokenizer(self.loaded.tokenizer)
            scored, intervals, tables = evaluation.evaluate_model(
                self.acc.unwrap_model(self.model), self.loaded.preprocess, self.eval_tokenizer, cfg,
                self.acc.device, self.recipe.name, progress=self.recipe.logging.progress)
            metrics.update(scored)
            if self.acc.is_main_process:
                evaluation.save_items(self.run_dir, self.state.step, tables)
        self.acc.wait_for_everyone()
        if metrics:
            self.monitor.evaluation(metrics, self.state.step, self.state.epoch, self.overlap, intervals)
        self.state.metrics = metrics
        self._check_best_metric(metrics)
        return metrics

    def _check_best_metric(self, metrics: dict[str, float]) -> None:
        """At the first evaluation: `checkpoint.best_metric` must be among the metrics it gave (the
        benchmarks' metric names are known only once they score). The epoch's checkpoint is
        already written, so stopping here loses no training."""
        if self.best_metric_checked or not self.recipe.checkpoint.best_metric:
            return
        problem = None
        if self.acc.is_main_process and metrics:
            produced = [k if k.startswith("val/") else f"eval/{k}" for k in metrics]
            try:
                check_best_metric(self.recipe, produced)
            except RecipeError as err:
                kept = checkpointing.latest_step(self.ckpt_dir)
                problem = str(err) + (f" (the checkpoint of step {kept} is kept; rerun with checkpoint.resume=auto "
                                      f"to continue from it)" if kept else "")
        problem = from_main(self.acc, problem)
        if problem:
            raise InputError(problem)
        self.best_metric_checked = True

    def checkpoint(self) -> None:
        """Write the checkpoint of the current step; its metrics come with `record_metrics`."""
        info = self.loaded.info
        self.state.metrics = {}
        meta = CheckpointMeta(arch=info.arch, activation=info.activation, lineage=info.lineage,
                              pretrained=self.recipe.model.pretrained, step=self.state.step,
                              epoch=self.state.epoch, recipe=recipe_to_dict(self.recipe),
                              overlap=dict(self.overlap), precision=self.precision,
                              recipe_changes=list(self.state.recipe_changes))
        checkpointing.save(self.acc, self.ckpt_dir, self.model, self.scheduler, self.state, self.local_streams,
                           meta, False, self.recipe.checkpoint.keep_last)
        self.last_checkpoint_time = clock()
        self.saved_step = self.state.step

    def stop_agreed(self) -> int:
        """The stop signal every rank acts on at this step boundary: the largest signal number any
        rank received (an all-reduce each step: a signal may reach some ranks only, or reach them at
        different steps), 0 when none did."""
        received = stopsignals.received()
        if self.acc.num_processes > 1:
            import torch.distributed as dist
            flag = torch.tensor([received], device=self.acc.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            received = int(flag.item())
        return received

    def stop(self, signum: int) -> None:
        """Checkpoint this step (unless it has one already), close the logs, name the checkpoints on
        stdout (as a finished run does) and raise `Stopped`."""
        if self.saved_step != self.state.step:
            self.checkpoint()
        self.monitor.close()
        self.acc.end_training()
        self.report_checkpoints()
        latest = self.ckpt_dir / (checkpointing.latest_name(self.ckpt_dir) or "?")
        raise Stopped(f"stopped by {stopsignals.name(signum)} at step {self.state.step} (epoch "
                      f"{self.state.epoch}); checkpoint {latest}; rerun the same command to continue",
                      self.state.step)

    def checkpoint_due(self) -> bool:
        """`checkpoint.every_minutes` passed since the last checkpoint, by the main process's clock
        (broadcast: the save is collective, so every rank must agree on the step)."""
        minutes = self.recipe.checkpoint.every_minutes
        if not minutes:
            return False
        due = clock() - self.last_checkpoint_time >= minutes * 60
        if self.acc.num_processes > 1:
            from accelerate.utils import broadcast
            flag = torch.tensor([int(due)], device=self.acc.device)
            due = bool(broadcast(flag, from_process=0).item())
        return due

    def record_metrics(self) -> None:
        """After an evaluation at a step that has a checkpoint: its sidecar gets the metrics, and
        `best` moves to it when `checkpoint.best_metric` improved (an evaluation between
        checkpoints is logged only: there is no checkpoint to point at)."""
        c, metrics = self.recipe.checkpoint, self.state.metrics
        if self.acc.is_main_process and metrics and checkpointing.latest_step(self.ckpt_dir) == self.state.step:
            name = c.best_metric.removeprefix("eval/") if c.best_metric else None
            value = metrics.get(name) if name else None
            better = value is not None and (self.state.best is None or
                                            (value > self.state.best if c.best_mode == "max" else value < self.state.best))
            if better:
                self.state.best = value
            checkpointing.record_metrics(self.ckpt_dir, metrics, best=better)
            self.best_choice = self._judge_best(name)
        self.acc.wait_for_everyone()

    def _judge_best(self, name: Optional[str]) -> Optional[dict]:
        """Main process: whether the best checkpoint is within noise of other evaluations
        (`evaluation.within_noise`): printed, and written to `<run_dir>/best.json`."""
        best_step = checkpointing.pointer_step(self.ckpt_dir, "best")
        if not name or best_step is None:
            return None
        choice = evaluation.within_noise(self.run_dir / "eval.jsonl", name, best_step)
        if choice is not None:
            print(evaluation.noise_line(choice), file=sys.stderr, flush=True)
            atomic_write(self.run_dir / "best.json", lambda f: json.dump(choice, f, indent=1), "w")
        return choice

    # --- the loop --------------------------------------------------------------------------------
    def fit(self) -> None:
        r = self.recipe
        pending_eval = self.pending_eval
        self.last_checkpoint_time = clock()
        self.saved_step, stop = None, 0
        self.state.layout = self.data_layout
        if self.acc.is_main_process:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        if pending_eval and (r.eval.every_epoch and (r.eval.benchmarks or self.val_stream is not None)):
            self.evaluate()
            self.record_metrics()
        global_batch = r.data.batch_size * self.acc.num_processes * self.accum
        batches_per_epoch = self.steps_per_epoch * self.accum
        loader = make_loader(self.stream, r.data.workers, r.seed, persistent=True)
        for epoch in range(self.state.epoch, r.schedule.epochs):
            self.stream.set_position(epoch, self.state.batch_in_epoch, self.local_streams)
            batches = iter(loader)
            self.monitor.start_epoch(epoch, self.steps_per_epoch, self.state.batch_in_epoch // self.accum,
                                     r.schedule.epochs)
            tick, tick_samples = time.perf_counter(), 0
            while self.state.batch_in_epoch < batches_per_epoch:
                micro = [next(batches) for _ in range(self.accum)]
                for _, info in micro:
                    self.local_streams[info["stream"]] = {k: v for k, v in info.items() if k != "stream"}
                log_now = (self.state.step + 1) % r.logging.every_n_steps == 0
                on_device = [b.to(self.acc.device, non_blocking=True) for b, _ in micro]
                loss, info = self.step(on_device, details=True) if log_now else (self.step(on_device), {})
                self.state.batch_in_epoch += self.accum
                self.state.step += 1
                self.state.samples_seen += global_batch
                tick_samples += global_batch
                rate = tick_samples / max(time.perf_counter() - tick, 1e-9)
                self.monitor.advance(loss, rate)
                if log_now:
                    model = self.acc.unwrap_model(self.model)
                    bad = sum(s.get("bad", 0) for s in self.local_streams.values())
                    self.monitor.scalars({
                        "train/loss": loss, "train/lr": self.scheduler.get_last_lr()[0],
                        "train/logit_scale": float(model.logit_scale.detach().exp().reshape(-1)[0]),
                        "train/samples_per_s": rate, "train/memory_mb": memory_mb(),
                        "data/bad_samples": bad, **{f"train/{k}": v for k, v in info.items()}}, self.state.step)
                    tick, tick_samples = time.perf_counter(), 0
                mid_epoch = self.state.batch_in_epoch < batches_per_epoch
                by_steps = r.checkpoint.every_n_steps and self.state.step % r.checkpoint.every_n_steps == 0
                if mid_epoch and (self.checkpoint_due() or by_steps):
                    self.checkpoint()
                step_eval = r.eval.every_n_steps and self.state.step % r.eval.every_n_steps == 0
                if step_eval and (mid_epoch or not r.eval.every_epoch):  # else the epoch end evaluates
                    self.evaluate()
                    self.record_metrics()
                stop = self.stop_agreed()
                if stop and mid_epoch:
                    self.stop(stop)
            self.monitor.end_epoch()
            self.state.epoch, self.state.batch_in_epoch, self.local_streams = epoch + 1, 0, {}
            self.checkpoint()  # before evaluation: a crash in an evaluation loses no training
            if stop:  # the rerun evaluates this epoch first (pending_eval)
                self.stop(stop)
            if r.eval.every_epoch:
                self.evaluate()
                self.record_metrics()
        self.monitor.close()
        self.check_replicas()
        self.acc.end_training()
        self.report_checkpoints()
        self.release()

    def report_checkpoints(self) -> None:
        """The run's last words: where its last and best checkpoints are."""
        if not self.acc.is_main_process:
            return
        last = checkpointing.latest_name(self.ckpt_dir)
        print(f"last checkpoint: {self.ckpt_dir / last if last else 'none'}", flush=True)
        c, best = self.recipe.checkpoint, checkpointing.latest_name(self.ckpt_dir, "best")
        if not c.best_metric:
            print("best checkpoint: none (checkpoint.best_metric is not set)", flush=True)
        elif best is None:
            print(f"best checkpoint: none ({c.best_metric} was never measured)", flush=True)
        else:
            value = f"{self.state.best:.4f}" if self.state.best is not None else "?"
            choice = self.best_choice
            noise = ""
            if choice and choice["within_noise_of"]:
                steps = ", ".join(f"{o['step']} (epoch {o['epoch']})" for o in choice["within_noise_of"])
                noise = f"; within noise of step(s) {steps}: 95 % intervals overlap, see {self.run_dir / 'best.json'}"
            print(f"best checkpoint: {self.ckpt_dir / best} ({c.best_metric} {value}{noise})", flush=True)

    def check_replicas(self) -> None:
        """Every rank must end with the same parameters; print their digest (rank 0)."""
        import hashlib
        from accelerate.utils import gather_object
        digest = hashlib.sha256()
        for _, p in sorted(self.acc.unwrap_model(self.model).state_dict().items()):
            digest.update(p.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        digests = gather_object([digest.hexdigest()])
        if len(set(digests)) != 1:
            raise TrainingError(f"parameters differ across ranks after training: {digests}")
        self.acc.print(f"parameters identical across {len(digests)} rank(s): sha256 {digests[0][:16]}")




def run_dir(recipe: Recipe) -> Path:
    return Path(recipe.logging.output_dir) / (recipe.logging.run_name or recipe.name)
