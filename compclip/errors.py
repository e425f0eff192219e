"""The project's exceptions: one base, `CompclipError`, and the kinds every package raises.

    CompclipError
    |-- InputError    bad input (a file, key, option or sample); the message names it and the fix
    |-- RunFault      a fault during the run (I/O, a failed step, corrupt data met mid-run)
    |-- DataError     data that is there but unusable (training shards, a benchmark file)
    `-- SchemaError   a shard sample or manifest that does not follow the shard schema

Each package's own errors (`RecipeError`, `CheckpointError`, `BadImage`, `MissingImage`, ...)
derive from `CompclipError` too, most of them through one of these kinds. `InputError`,
`DataError` and `SchemaError` are also `ValueError`s, so code that treats a ValueError as bad
input keeps doing so. The command lines map them to exit statuses in one place
(`compclip.cli.exit_status`): 2 for bad input (`InputError`, `ValueError`, ...), 3 for a
`RunFault`. Importing this module imports nothing else.
"""
from __future__ import annotations


class CompclipError(Exception):
    """Base of every error this project raises on purpose."""


class InputError(CompclipError, ValueError):
    """Bad input (a file, key, option or sample): exit 2. The message names it and the fix."""


class RunFault(CompclipError):
    """A fault during the run (I/O, a failed step, corrupt data met mid-run): exit 3."""


class DataError(CompclipError, ValueError):
    """Data that is present but unusable: training data (the message is one line naming the
    source, key or sample) or a malformed benchmark file (naming file, key and sample)."""


class SchemaError(CompclipError, ValueError):
    """A sample that does not follow the shard schema; the message names the key and member."""


__all__ = ["CompclipError", "InputError", "RunFault", "DataError", "SchemaError"]
