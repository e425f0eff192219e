"""Run monitoring on rank 0: TensorBoard scalars, other trackers, `eval.jsonl`, and a tqdm progress bar
per epoch (`epoch 2/3`: epochs counted from 1, as `eval.jsonl` and the eval lines count them, with the total).

Trackers (`logging.report_to`, accelerate's `log_with` names): `tensorboard` is this module's own
SummaryWriter in `<run_dir>/tensorboard` (written only while `logging.tensorboard` is also true);
every other name is accelerate's tracker of that name (`accelerate.tracking`), started with the
recipe as its configuration (flattened to dotted keys), the recipe's name as its project and the
run folder's name as its run (W&B: files under `<run_dir>/wandb`). Every tracker gets the same
scalars at the same steps. `check_trackers` (pre-flight) refuses an unknown name or one whose
package is not installed.

TensorBoard tags: `train/loss`, `train/lr`, `train/logit_scale`, `train/samples_per_s` (global
anchors per second), `train/memory_mb` (peak GPU memory, or peak RSS on CPU), `data/bad_samples`,
the loss's in-batch numbers of the logged step (`train/loss_i2t`, `train/loss_t2i`,
`train/masked_pairs`, `train/i2t_acc`, `train/t2i_acc`, `train/hard_negative_acc`,
`train/partner_acc`, `train/negative_padding`: the share of the global batch's hard-negative
columns that are padding, when the recipe has any), `val/<metric>` for the validation batches, and `eval/<benchmark>/<metric>`
for every evaluation, with `eval_ci/<benchmark>/<metric>` beside it: the half-width of its 95 %
bootstrap interval (`compclip.eval.stats`), for the metrics that have one. Each evaluation also appends one JSON line
`{"step", "epoch", "time", "metrics", "intervals"}` (`intervals`: name -> [low, high]) to
`<run_dir>/eval.jsonl`, and prints them to stderr as one compact line. Other ranks get a no-op monitor.

A resumed run (`resumed_step`) keeps one point per step: the writer purges the events a killed
run logged after that step (TensorBoard's `purge_step`), and `eval.jsonl` loses its lines after
it (`trim_eval_log`; with `pending_eval`, the line of that step too, which is written again).
"""
from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm


def memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def trim_eval_log(path: Path, last_step: int) -> int:
    """Drop the lines of `eval.jsonl` whose step is after `last_step` (atomically); returns how many."""
    if not path.is_file():
        return 0
    from compclip.fileio import atomic_write
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            step = json.loads(line).get("step", 0)
        except ValueError:
            step = last_step + 1  # a torn last line
        if isinstance(step, int) and step <= last_step:
            kept.append(line + "\n")
        else:
            dropped += 1
    if dropped:
        atomic_write(path, lambda f: f.writelines(kept), "w")
    return dropped


def format_metrics(metrics: dict[str, float], step: int, epoch: int, intervals: Optional[dict] = None) -> str:
    """`eval step 8 (epoch 2): val/i2t_acc 0.5120 | sugarcrepe/macro 0.7310 ±0.0150 ...`, sorted by
    name; ± the half-width of the metric's 95 % interval where `intervals` has one."""
    intervals = intervals or {}

    def one(k: str, v: float) -> str:
        return f"{k} {v:.4f}" + (f" ±{(intervals[k][1] - intervals[k][0]) / 2:.4f}" if k in intervals else "")
    return f"eval step {step} (epoch {epoch}): " + " | ".join(one(k, v) for k, v in sorted(metrics.items()))


def tracker_names() -> list[str]:
    """The tracker names accelerate's `log_with` takes (without `all`)."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS
    return sorted(LOGGER_TYPE_TO_CLASS)


def check_trackers(names: list[str]) -> None:
    """ValueError (one line naming `logging.report_to`) for a name accelerate does not know or
    whose package is missing."""
    from accelerate.utils import imports
    known = tracker_names()
    for name in names:
        if name not in known:
            raise ValueError(f"logging.report_to: unknown tracker '{name}'; accelerate's trackers are "
                             f"{', '.join(known)}")
        available = getattr(imports, f"is_{name}_available", None)
        if available is not None and not available():
            extra = " (pip install 'compclip[wandb]')" if name == "wandb" else ""
            raise ValueError(f"logging.report_to: tracker '{name}' needs the package {name}, which is not "
                             f"installed; install it{extra} or drop it from logging.report_to")


def flat_config(data, prefix: str = "") -> dict:
    """A nested recipe dump as {dotted key: value}; lists and None as text (every tracker takes these)."""
    out = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_config(value, name + "."))
        else:
            out[name] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


def start_trackers(names: list[str], project: str, run_dir: Path, config: dict) -> list:
    """accelerate's trackers for `names` other than tensorboard, started, the configuration stored."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS
    trackers = []
    for name in names:
        if name == "tensorboard":
            continue
        cls = LOGGER_TYPE_TO_CLASS[name]
        kwargs = {"name": run_dir.name, "dir": str(run_dir)} if name == "wandb" else {}
        if cls.requires_logging_directory:
            tracker = cls(project, str(run_dir), **kwargs)
        else:
            tracker = cls(project, **kwargs)
        tracker.start()
        tracker.store_init_configuration(config)
        trackers.append(tracker)
    return trackers


def bar_label(epoch: int, epochs: Optional[int] = None) -> str:
    """The progress bar's label of the 0-based `epoch`: `epoch 1/3` (1-based, with the total)."""
    return f"epoch {epoch + 1}" + (f"/{epochs}" if epochs else "")


class Monitor:
    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, progress: bool,
                 resumed_step: Optional[int] = None, pending_eval: bool = False,
                 trackers: tuple[str, ...] = ("tensorboard",), project: str = "compclip",
                 config: Optional[dict] = None):
        self.run_dir, self.enabled = run_dir, enabled
        self.writer = None
        self.trackers = (start_trackers(list(trackers), project, run_dir, flat_config(config or {}))
                         if enabled else [])
        tensorboard = tensorboard and "tensorboard" in trackers
        if enabled and resumed_step is not None:
            trim_eval_log(run_dir / "eval.jsonl", resumed_step - 1 if pending_eval else resumed_step)
        if enabled and tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            purge = None if resumed_step is None else resumed_step + (0 if pending_eval else 1)
            self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge)
        self.progress = progress and enabled
        self.bar: Optional[tqdm] = None

    def start_epoch(self, epoch: int, total: int, done: int, epochs: Optional[int] = None) -> None:
        """A bar for the 0-based `epoch` of `epochs`, labelled from 1 as `eval.jsonl` and the eval
        lines count epochs: `epoch 1/3`."""
        if self.progress:
            self.bar = tqdm(total=total, initial=done, desc=bar_label(epoch, epochs), unit="step",
                            dynamic_ncols=True, file=sys.stderr)

    def advance(self, loss: float, samples_per_s: float) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4f}", samples_s=f"{samples_per_s:.1f}")

    def end_epoch(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def scalars(self, values: dict[str, float], step: int) -> None:
        if self.writer is not None:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)
        for tracker in self.trackers:
            tracker.log(dict(values), step=step)

    def evaluation(self, metrics: dict[str, float], step: int, epoch: int, overlap: Optional[dict] = None,
                   intervals: Optional[dict] = None) -> None:
        """Validation metrics (`val/...`) are logged under their own name, benchmarks under
        `eval/<benchmark>/<metric>`, and the half-width of a benchmark metric's 95 % interval
        (`intervals`: name -> (low, high)) under `eval_ci/<benchmark>/<metric>`; the JSON line holds
        the intervals as `intervals`; `overlap` (benchmark -> training images in it, allowed by
        `eval.allow_overlap`) goes into the JSON line beside the numbers it affects."""
        if not self.enabled:
            return
        intervals = intervals or {}
        self.scalars({name if name.startswith("val/") else f"eval/{name}": value for name, value in metrics.items()}
                     | {f"eval_ci/{name}": (hi - lo) / 2 for name, (lo, hi) in intervals.items()}, step)
        if self.writer is not None:
            self.writer.flush()
        line = {"step": step, "epoch": epoch, "time": time.time(), "metrics": metrics}
        if intervals:
            line["intervals"] = {name: [lo, hi] for name, (lo, hi) in intervals.items()}
        if overlap:
            line["overlap"] = overlap
        with open(self.run_dir / "eval.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
        if self.bar is not None:
            self.bar.write(format_metrics(metrics, step, epoch, intervals), file=sys.stderr)
        else:
            print(format_metrics(metrics, step, epoch, intervals), file=sys.stderr, flush=True)

    def close(self) -> None:
        self.end_epoch()
        if self.writer is not None:
            self.writer.close()
        for tracker in self.trackers:
            tracker.finish()
        self.trackers = []
