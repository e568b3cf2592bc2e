"""What the ``vaswani`` command prints for an exception that is not a :class:`~vaswani.errors.VaswaniError`:
one line on standard error, never a traceback (``--debug`` shows it).

- An ``OSError`` from the operating system names its path and the system's words (``permission
  denied``, ``read-only file system``, ``no space left on device``...): exit status 2.
- Running out of memory (``MemoryError``, ``torch.OutOfMemoryError``, the CPU allocator's failure):
  exit status 2, with what to lower.
- A number out of range for torch or numpy (``OverflowError``, ``ValueError``, torch's errors that
  say "overflow"): exit status 2.
- Anything else is a bug: ``internal error: …; rerun with --debug for the traceback``, exit status 1.

A broken pipe (the reader of standard output went away, as in ``vaswani translate … | head -1``)
is not an error: the command stops quietly, as Unix tools do, with the status of a process ended by
SIGPIPE, 141 (128 + 13), and standard output is pointed at ``/dev/null`` so that nothing more is
said at exit.
"""

from __future__ import annotations

import os
import sys

from vaswani.io import first_line, os_reason
from vaswani.resources import is_out_of_memory

BROKEN_PIPE_STATUS = 141
INTERNAL_ERROR_STATUS = 1
OOM_ADVICE = "lower --batch-size (or --batch-tokens, --num-samples) or free memory"


def broken_pipe() -> int:
    """Stop quietly after a broken pipe on standard output: the status of a process ended by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # a standard output without a descriptor (captured in tests)
        pass
    return BROKEN_PIPE_STATUS


def os_error_line(exc: OSError) -> str:
    """``PATH: reason`` (``A -> B: reason`` for a rename), or the reason alone without a path."""
    reason = os_reason(exc)
    if exc.filename is None:
        return reason
    if exc.filename2 is not None:
        return f"{exc.filename} -> {exc.filename2}: {reason}"
    return f"{exc.filename}: {reason}"


def failure(exc: Exception) -> tuple[str, int]:
    """The line to print (after ``vaswani: ``) and the exit status for ``exc``."""
    if is_out_of_memory(exc):
        return f"error: out of memory ({first_line(exc)[:200]}); {OOM_ADVICE}", 2
    if isinstance(exc, OSError):
        return f"error: {os_error_line(exc)}", 2
    overflow = isinstance(exc, (RuntimeError, TypeError)) and "overflow" in str(exc).lower()
    if overflow or isinstance(exc, (OverflowError, ValueError)):
        return f"error: a value out of range: {first_line(exc)[:300]}", 2
    return (
        f"internal error: {type(exc).__name__}: {first_line(exc)[:300]}; "
        "rerun with --debug for the traceback",
        INTERNAL_ERROR_STATUS,
    )
