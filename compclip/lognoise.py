"""Log records of third-party libraries that say nothing wrong but read like faults, dropped.

Two records, each matched by the start of its message on the one logger that emits it; every
other record of those loggers passes unchanged:

| record | logger | dropped when |
|---|---|---|
| DeepSpeed's `Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.` | `DeepSpeed` | torch sees no CUDA device (the CPU is then the only accelerator; with a GPU present the line is a real warning and is kept) |
| open_clip's `No pretrained weights loaded for model '...'. Model initialized randomly.` | the root logger | only inside `models.load.load_model` called with `pretrained=None` (random weights were asked for) |

`install()` adds the DeepSpeed filter (idempotent; the trainer calls it before anything imports
DeepSpeed; the logger object DeepSpeed later configures is the same one). `random_weights_asked()`
is the context manager `load_model` wraps open_clip's constructor in. Not a change to either
library (so not in `compclip.compat`): a filter on a logger, matched by message; a changed
message passes. Tests: tests/test_newcomer.py.
"""
from __future__ import annotations

import contextlib
import logging

DEEPSPEED_CPU = "Setting accelerator to CPU"
OPEN_CLIP_RANDOM = "No pretrained weights loaded for model"


class DropMessage(logging.Filter):
    """Drops the records whose message starts with `prefix` while `when()` is true."""

    def __init__(self, prefix: str, when=lambda: True):
        super().__init__()
        self.prefix, self.when = prefix, when

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith(self.prefix) and self.when())


def _no_cuda() -> bool:
    import torch
    return not torch.cuda.is_available()


def install() -> None:
    """Drop DeepSpeed's CPU-accelerator note on a machine without CUDA (once per process)."""
    logger = logging.getLogger("DeepSpeed")
    if not any(isinstance(f, DropMessage) and f.prefix == DEEPSPEED_CPU for f in logger.filters):
        logger.addFilter(DropMessage(DEEPSPEED_CPU, _no_cuda))


@contextlib.contextmanager
def random_weights_asked():
    """Within: open_clip's "No pretrained weights loaded" record is dropped (the caller asked for
    random weights); every other root-logger record passes."""
    root, drop = logging.getLogger(), DropMessage(OPEN_CLIP_RANDOM)
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)
