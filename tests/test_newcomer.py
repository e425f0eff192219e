"""What a newcomer meets first: the README's commands run from a fresh clone without an activated
environment; the trainer's `--check` lists every pre-flight problem in one run; its progress bars
count epochs from 1 with their total; two library notes that read like faults (DeepSpeed's CPU
accelerator, open_clip's random weights) are dropped. The demo's side: tests/test_demo.py."""
import logging
import re
from pathlib import Path

import pytest

from tests.fixtures.trainer_data import train_in_process as run
from tests.test_trainer import recipe, shards  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("python", "python3", "accelerate", "tensorboard", "pytest", "pip", "torchrun")


def test_readme_opens_with_its_two_commands_and_names_the_venv_in_every_later_one():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"```bash\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert len(first) == 2 and first[0].endswith("&& bash launch/demo.sh")
    assert first[1].endswith("&& .venv/bin/python -m pytest -q")
    after = text[text.index("```", text.index("```bash") + 3) + 3:]
    bare = [span for span in re.findall(r"`([^`\n]+)`", after) if span.split()[0] in TOOLS]
    assert not bare, f"commands that fail without an activated .venv: {bare}"
    assert "source .venv/bin/activate" in after
    assert "`.venv/bin/accelerate launch trainer/train.py" in after and "`.venv/bin/tensorboard --logdir" in after
    demo = after[:after.index("it builds")]  # the demo's time: its conditions and the record
    assert "no other job" in demo and "`bench/results/demo_wall_time.md`" in demo
    assert (ROOT / "bench" / "results" / "demo_wall_time.md").is_file()


def test_check_lists_every_problem_in_one_run(recipe, shards, capsys):
    argv = [recipe, "model.arch=no-such-arch", "data.partner=neighbour", "checkpoint.best_metric=nothing/acc"]
    assert run(argv + ["--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 3, err
    assert "no-such-arch" in errors[0] and "nothing/acc" in errors[1] and "features.neighbours" in errors[2]
    assert err[-1].endswith("3 pre-flight problems")
    assert run(argv) == 2  # a run without --check stops at the first, one line
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no-such-arch" in err


def test_progress_bars_count_epochs_from_one_with_the_total(recipe, capsys):
    assert run([recipe, "logging.progress=true"]) == 0
    err = capsys.readouterr().err
    assert "epoch 1/2:" in err and "epoch 2/2:" in err, err[-2000:]
    assert "epoch 0:" not in err and "epoch 0/" not in err
    assert "eval step" not in err or "(epoch 0)" not in err


def test_deepspeeds_cpu_note_is_dropped_only_without_cuda(monkeypatch):
    import torch

    from compclip import lognoise as noise
    noise.install()
    noise.install()  # once: a second call adds no second filter
    logger = logging.getLogger("DeepSpeed")
    assert sum(isinstance(f, noise.DropMessage) for f in logger.filters) == 1
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    logger.addHandler(handler)
    try:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        logger.warning("Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.")
        logger.warning("a real DeepSpeed warning")
        assert [r.getMessage() for r in seen] == ["a real DeepSpeed warning"]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU it missed: a real warning
        logger.warning("Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.")
        assert len(seen) == 2
    finally:
        logger.removeHandler(handler)


def test_open_clips_random_weights_note_is_dropped_when_random_weights_were_asked(caplog):
    from compclip.models.load import load_model
    with caplog.at_level(logging.WARNING):
        load_model("micro-vit-32", None)
        logging.warning("No pretrained weights loaded for model 'x'. Model initialized randomly.")  # outside: kept
    messages = [r.getMessage() for r in caplog.records]
    assert sum("No pretrained weights loaded" in m for m in messages) == 1, messages
