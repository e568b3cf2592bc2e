"""Exceptions that the CLI turns into one-line messages.

Every error a user can cause by bad input (a file, a flag, a config field) is a
``VaswaniError``; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import reprlib
import signal
from pathlib import Path
from typing import Any

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 60, 60, 40
_SHORT.maxlist = _SHORT.maxtuple = 8


def shown(value: Any) -> str:
    """``value`` as an error message shows a user's value: its ``repr``, shortened (``reprlib``)
    so that a huge value (a 10**30, a long string, a deeply nested YAML list) stays one short line."""
    return _SHORT.repr(value)


class VaswaniError(Exception):
    """Base class of the errors caused by the user's input."""


class ConfigError(VaswaniError, ValueError):
    """A config field has an unknown name, a wrong type or an impossible value."""


class DataError(VaswaniError, ValueError):
    """An input file is missing, empty, not UTF-8, or otherwise unusable."""


class InputError(VaswaniError, ValueError):
    """A tensor given to a model through the Python API is unusable: a token or segment id
    outside its embedding, or a sequence longer than the model's ``max_len``."""


class RunDirError(VaswaniError):
    """A directory is not a vaswani run directory, or is an incomplete one."""


class TrainingInterrupted(VaswaniError):
    """SIGINT or SIGTERM during training: the current step was finished and a checkpoint
    written. ``exit_status`` is the shell's convention, 128 + the signal number."""

    def __init__(self, signum: int, step: int, run_dir: Path) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name} at step {step}; checkpoint written in {run_dir / 'checkpoints'}")
        self.exit_status = 128 + signum
        self.run_dir = run_dir
