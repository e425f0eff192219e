"""`trainer/train.py` that pauses after a step (tests only): `python tests/_paused_train.py STEP RECIPE
[key=value ...]` (or under `accelerate launch`) runs the trainer's `main` on the rest of the
arguments; after training step STEP every rank prints `paused at step STEP` on stderr and sleeps
until a stop signal arrives (`tests.fixtures.faults.pause_until_stopped`), so a test kills
(SIGKILL) or signals (SIGTERM, SIGUSR1) the run at a known point by watching its output.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.faults import after_step, pause_until_stopped  # noqa: E402
from compclip.trainer.train import main  # noqa: E402

if __name__ == "__main__":
    after_step(int(sys.argv.pop(1)), pause_until_stopped)
    sys.exit(main())
