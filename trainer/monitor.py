"""Run monitoring on rank 0: TensorBoard scalars, `eval.jsonl`, and a tqdm progress bar.

TensorBoard tags: `train/loss`, `train/lr`, `train/logit_scale`, `train/samples_per_s` (global
anchors per second), `train/memory_mb` (peak GPU memory, or peak RSS on CPU), `data/bad_samples`,
the loss's in-batch numbers of the logged step (`train/loss_i2t`, `train/loss_t2i`,
`train/masked_pairs`, `train/i2t_acc`, `train/t2i_acc`, `train/hard_negative_acc`,
`train/partner_acc`), `val/<metric>` for the validation batches, and `eval/<benchmark>/<metric>`
for every evaluation. Each evaluation also appends one JSON line
`{"step", "epoch", "time", "metrics"}` to `<run_dir>/eval.jsonl`. Other ranks get a no-op monitor.
"""
from __future__ import annotations

import json
import resource
import time
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm


def memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class Monitor:
    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, progress: bool):
        self.run_dir, self.enabled = run_dir, enabled
        self.writer = None
        if enabled and tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(run_dir / "tensorboard"))
        self.progress = progress and enabled
        self.bar: Optional[tqdm] = None

    def start_epoch(self, epoch: int, total: int, done: int) -> None:
        if self.progress:
            self.bar = tqdm(total=total, initial=done, desc=f"epoch {epoch}", unit="step", dynamic_ncols=True)

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

    def close(self) -> None:
        self.end_epoch()
        if self.writer is not None:
            self.writer.close()
