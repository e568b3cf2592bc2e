"""Command-line runs as benchmark jobs: each ``vaswani ARGS`` in a child process with its output in a
log, started once the runs it needs have finished, a few at a time (one thread each is the caller's
choice, through ``--threads 1`` in the arguments)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Job:
    """One ``vaswani`` run: its name (its run directory and log under OUT), arguments, and the jobs
    it needs finished first; ``program`` is what the interpreter runs the arguments with (a script
    of its own where the job is not a ``vaswani`` command)."""

    name: str
    args: list[str]
    after: list[str] = field(default_factory=list)
    program: list[str] = field(default_factory=lambda: ["-m", "vaswani.cli"])

    def command(self) -> list[str]:
        """The job as a command line to show: ``vaswani ARGS`` or ``python SCRIPT ARGS``."""
        if self.program == ["-m", "vaswani.cli"]:
            return ["vaswani", *self.args]
        return ["python", *(shown(Path(p)) if Path(p).is_file() else p for p in self.program), *self.args]


def shown(path: Path) -> str:
    """``path`` relative to the repository, whose root the commands run from."""
    return os.path.relpath(path.resolve(), ROOT)


def run_job(job: Job, out: Path) -> None:
    """The job with this interpreter (``vaswani ARGS``: with this interpreter's package), from the
    repository root, its output in ``out/NAME.log``."""
    with open(out / f"{job.name}.log", "w", encoding="utf-8") as log:
        done = subprocess.run(
            [sys.executable, *job.program, *job.args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
        )
    if done.returncode != 0:
        raise SystemExit(f"{job.name} failed (exit {done.returncode}): see {shown(out / job.name)}.log")


def run_all(jobs: list[Job], out: Path, workers: int) -> None:
    """Each job once what it needs has finished, ``workers`` at a time, in the order given."""
    finished: set[str] = set()
    waiting = list(jobs)
    running: dict[Future[None], Job] = {}
    with ThreadPoolExecutor(workers) as pool:
        while waiting or running:
            for job in [j for j in waiting if set(j.after) <= finished][: workers - len(running)]:
                waiting.remove(job)
                print(f"{datetime.datetime.now():%H:%M:%S} start {job.name}", flush=True)
                running[pool.submit(run_job, job, out)] = job
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                future.result()
                finished.add(job.name)
                print(f"{datetime.datetime.now():%H:%M:%S} done {job.name}", flush=True)


def write_table(path: Path, lines: list[str]) -> None:
    """A results table: ``lines`` into the markdown file ``path`` (its folder made), and on stdout."""
    table = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table, encoding="utf-8")
    print(table)
