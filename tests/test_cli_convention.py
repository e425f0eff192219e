"""docs/cli.md, checked on every command's parser: each option has help, help shows defaults
(compclip.cli.HelpFormatter), and usage errors are one line with exit 2 (compclip.cli.Parser)."""
import argparse

import pytest

from compclip.cli import HelpFormatter, Parser


def _parsers():
    from compclip.datagen.__main__ import build_parser as datagen
    from compclip.datagen.negatives.__main__ import build_parser as negatives
    from compclip.datagen.world.cli import build_parser as world
    from compclip.eval.cli import make_main_parser as evaluation
    from compclip.trainer.export import build_parser as export
    from compclip.trainer.train import build_parser as trainer
    return {"trainer": trainer(), "trainer export": export(), "datagen": datagen(), "negatives": negatives(), "world": world(),
            "eval": evaluation()}


def _walk(name, parser):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _walk(f"{name} {sub_name}", sub)


def _all():
    return [pair for name, parser in _parsers().items() for pair in _walk(name, parser)]


@pytest.mark.parametrize("name,parser", _all(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_option_has_help_and_shows_defaults(name, parser):
    assert isinstance(parser, Parser) and issubclass(parser.formatter_class, HelpFormatter), name
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or not action.option_strings:
            continue
        if action.help == argparse.SUPPRESS:  # a deprecated alias, hidden on purpose
            continue
        assert action.help, f"{name} {action.option_strings[0]} has no help"


@pytest.mark.parametrize("name,parser", _all(), ids=lambda v: v if isinstance(v, str) else "")
def test_usage_errors_are_one_line(name, parser, capsys):
    if name.split()[-1] in ("negatives", "world") and name != name.split()[-1]:
        return  # `datagen negatives|world` hand their arguments to their own parser (tested above)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--no-such-option"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err


def test_exit_program_keeps_the_status_and_the_atexit_handlers(tmp_path):
    import subprocess
    import sys
    code = ("import atexit, gc; from compclip.cli import exit_program; "
            f"atexit.register(lambda: open({str(tmp_path / 'ran')!r}, 'w').write(str(gc.get_freeze_count() > 0))); "
            "print('buffered', end=''); exit_program(3)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 3 and done.stdout == "buffered", done.stderr
    assert (tmp_path / "ran").read_text() == "True"  # handlers ran, after the heap was frozen
