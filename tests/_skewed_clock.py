"""`trainer/train.py` with the main process's checkpoint clock running a million times fast (tests only).

`tests/test_trainer_multiproc.py` launches this in 2 processes: by rank 0's clock a time-based
checkpoint is due after every step, by rank 1's never; the checkpoint save is collective, so the
run finishes only if every rank follows rank 0's decision.
"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compclip.trainer import loop  # noqa: E402
from compclip.trainer.train import main  # noqa: E402

if os.environ.get("RANK", "0") == "0":
    START = time.monotonic()
    loop.clock = lambda: START + (time.monotonic() - START) * 1_000_000

if __name__ == "__main__":
    sys.exit(main())
