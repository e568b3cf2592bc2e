"""What the ``vaswani`` commands that read texts share: standard input."""

from __future__ import annotations

import sys

from vaswani.errors import DataError


def read_stdin() -> list[str]:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        number = data[: exc.start].count(b"\n") + 1
        raise DataError(f"<stdin>:{number}: not valid UTF-8") from None
