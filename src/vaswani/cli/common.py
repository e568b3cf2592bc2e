"""What the ``vaswani`` commands that read texts or run a model share: standard input, and the
``--device`` flag of every command that decodes or evaluates."""

from __future__ import annotations

import argparse
import sys

from vaswani.errors import DataError


def add_device_flag(p: argparse.ArgumentParser) -> None:
    """``--device``: where the run's model is loaded and runs (its weights are read on the CPU,
    then moved; a device this machine lacks is refused in one line by
    :func:`vaswani.runtime.resolve_device`)."""
    p.add_argument(
        "--device",
        default="auto",
        help="where the model runs: auto (CUDA, else MPS, else the CPU; default), cpu, cuda, cuda:N or mps",
    )


def read_stdin() -> list[str]:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        number = data[: exc.start].count(b"\n") + 1
        raise DataError(f"<stdin>:{number}: not valid UTF-8") from None
