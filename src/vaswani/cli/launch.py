"""``vaswani train ... --nproc N``: the same command on N processes of this machine.

Each process gets the variables ``torchrun`` would set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` on a free port of this machine) and, unless
``OMP_NUM_THREADS`` is set, an equal share of the CPU cores. As torchrun's agent does, this launcher
hosts the processes' rendezvous store (a ``TCPStore`` on that port; ``TORCHELASTIC_USE_AGENT_STORE``
tells torch.distributed to join it as a client in every process) and keeps it until all have ended:
the main process, when it hosted the store, could abort at exit while a peer was still connected
("terminate called without an active exception"). Ctrl-C reaches every process from the terminal
(each finishes its step, and the checkpoint is written); a SIGTERM to this launcher is
passed on to them. When one process fails the others are stopped; the exit status is the main
process's, else the first failing one's. For several machines use ``torchrun`` (see docs/training.md).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from torch.distributed import TCPStore

GRACE_SECONDS = 20.0  # for the others to stop after one failed, before they are killed


def wanted(nproc: int | None) -> bool:
    """Whether this command should launch processes: ``--nproc`` above 1, and not already one of
    a launched (or torchrun's) group."""
    return nproc is not None and nproc > 1 and "WORLD_SIZE" not in os.environ


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def without_nproc(argv: Sequence[str]) -> list[str]:
    """``argv`` less its ``--nproc N`` (or ``--nproc=N``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def launch(argv: Sequence[str], nproc: int) -> int:
    """Run ``vaswani ARGV`` (less ``--nproc``) on ``nproc`` processes; their exit status."""
    port = free_port()
    store = TCPStore("127.0.0.1", port, nproc, is_master=True, wait_for_workers=False)
    env = {
        **os.environ, "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True",
    }  # fmt: skip
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    command = [sys.executable, "-m", "vaswani", *without_nproc(argv)]
    procs = [
        subprocess.Popen(command, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(nproc)
    ]

    def forward(signum: int, frame: Any) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}  # the terminal tells them
    previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, forward)
    try:
        return _wait(procs)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        del store  # only once every process has ended


def _wait(procs: list[subprocess.Popen[bytes]]) -> int:
    """Wait for every process; once one fails, stop the others (SIGTERM, then SIGKILL)."""
    failed_at = None
    while any(p.poll() is None for p in procs):
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        if failed_at is not None and time.monotonic() - failed_at > GRACE_SECONDS:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.05)
    codes = [p.returncode for p in procs]
    if codes[0] != 0:
        return codes[0] if codes[0] > 0 else 128 - codes[0]
    bad = next((c for c in codes if c != 0), 0)
    return bad if bad >= 0 else 128 - bad
