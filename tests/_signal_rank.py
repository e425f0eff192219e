"""`trainer/train.py` where one rank sends itself a signal after a step (tests only).

`tests/test_trainer_multiproc_faults.py` launches `tests/_signal_rank.py STEP RECIPE ...` in 2
processes with `COMPCLIP_TEST_SIGNAL=<name>` and `COMPCLIP_TEST_SIGNAL_RANK=R`: after step STEP
rank R sends itself the signal (SIGTERM: a stop request reaching one rank only; SIGSTOP: a
stalled rank) and the other ranks go on at once (`tests.fixtures.faults.after_step`).
"""
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.faults import after_step  # noqa: E402
from compclip.trainer.train import main  # noqa: E402


def send_signal(step: int) -> None:
    if os.environ.get("RANK", "0") == os.environ["COMPCLIP_TEST_SIGNAL_RANK"]:
        print(f"rank {os.environ.get('RANK', '0')} sends itself {os.environ['COMPCLIP_TEST_SIGNAL']} after step "
              f"{step}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), getattr(signal, os.environ["COMPCLIP_TEST_SIGNAL"]))


if __name__ == "__main__":
    after_step(int(sys.argv.pop(1)), send_signal)
    sys.exit(main())
