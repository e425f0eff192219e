"""`trainer/train.py` where one rank sends itself a signal after a step (tests only).

`tests/test_trainer_multiproc_faults.py` launches this in 2 processes with
`COMPCLIP_TEST_PAUSE_AT_STEP=K`, `COMPCLIP_TEST_SIGNAL=<name>` and `COMPCLIP_TEST_SIGNAL_RANK=R`:
after step K rank R sends itself the signal (SIGTERM: a stop request reaching one rank only;
SIGSTOP: a stalled rank) and the other ranks go on at once (the pause hook is replaced).
"""
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer import loop  # noqa: E402
from trainer.train import main  # noqa: E402


def pause(step: int) -> None:
    if os.environ.get("RANK", "0") == os.environ["COMPCLIP_TEST_SIGNAL_RANK"]:
        print(f"rank {os.environ.get('RANK', '0')} sends itself {os.environ['COMPCLIP_TEST_SIGNAL']} after step "
              f"{step}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), getattr(signal, os.environ["COMPCLIP_TEST_SIGNAL"]))


loop.pause = pause

if __name__ == "__main__":
    sys.exit(main())
