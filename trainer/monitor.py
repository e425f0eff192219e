"""Run monitoring on rank 0: TensorBoard scalars, `eval.jsonl`, and a tqdm progress bar per epoch
(`epoch 2/3`: epochs counted from 1, as `eval.jsonl` and the eval lines count them, with the total).

TensorBoard tags: `train/loss`, `train/lr`, `train/logit_scale`, `train/samples_per_s` (global
anchors per second), `train/memory_mb` (peak GPU memory, or peak RSS on CPU), `data/bad_samples`,
the loss's in-batch numbers of the logged step (`train/loss_i2t`, `train/loss_t2i`,
`train/masked_pairs`, `train/i2t_acc`, `train/t2i_acc`, `train/hard_negative_acc`,
`train/partner_acc`, `train/negative_padding`: the share of the global batch's hard-negative
columns that are padding, when the recipe has any), `val/<metric>` for the validation batches, and `eval/<benchmark>/<metric>`
for every evaluation. Each evaluation also appends one JSON line
`{"step", "epoch", "time", "metrics"}` to `<run_dir>/eval.jsonl`, and prints them to stderr as
one compact line. Other ranks get a no-op monitor.

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


def format_metrics(metrics: dict[str, float], step: int, epoch: int) -> str:
    """`eval step 8 (epoch 2): val/i2t_acc 0.512 | sugarcrepe/macro 0.731 ...`, sorted by name."""
    return f"eval step {step} (epoch {epoch}): " + " | ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))


def bar_label(epoch: int, epochs: Optional[int] = None) -> str:
    """The progress bar's label of the 0-based `epoch`: `epoch 1/3` (1-based, with the total)."""
    return f"epoch {epoch + 1}" + (f"/{epochs}" if epochs else "")


class Monitor:
    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, progress: bool,
                 resumed_step: Optional[int] = None, pending_eval: bool = False):
        self.run_dir, self.enabled = run_dir, enabled
        self.writer = None
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

    def evaluation(self, metrics: dict[str, float], step: int, epoch: int, overlap: Optional[dict] = None) -> None:
        """Validation metrics (`val/...`) are logged under their own name, benchmarks under
        `eval/<benchmark>/<metric>`; `overlap` (benchmark -> training images in it, allowed by
        `eval.allow_overlap`) goes into the JSON line beside the numbers it affects."""
        if not self.enabled:
            return
        self.scalars({name if name.startswith("val/") else f"eval/{name}": value for name, value in metrics.items()}, step)
        if self.writer is not None:
            self.writer.flush()
        line = {"step": step, "epoch": epoch, "time": time.time(), "metrics": metrics}
        if overlap:
            line["overlap"] = overlap
        with open(self.run_dir / "eval.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
        if self.bar is not None:
            self.bar.write(format_metrics(metrics, step, epoch), file=sys.stderr)
        else:
            print(format_metrics(metrics, step, epoch), file=sys.stderr, flush=True)

    def close(self) -> None:
        self.end_epoch()
        if self.writer is not None:
            self.writer.close()
