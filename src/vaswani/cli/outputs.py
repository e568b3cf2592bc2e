"""Where the ``vaswani`` commands write: one check of every output location, made before any data
or model is loaded, so that an output never overwrites an input.

An output (a file, or a folder: a new run, an exported model) is refused, in one line naming its
flag, when

- it is a dangling symbolic link or a loop of them, or its parent is not an existing, writable
  folder (a new run's parents are made, so for it only a link is refused);
- it is one of the command's inputs (the same path once links are resolved, or the same file:
  ``os.path.samefile``, hard links included), or a file of an input folder;
- it lies inside a run directory, unless the command writes into its own run (``evaluate``,
  ``plot``, ``attention``, ``average``), and even then it is never one of the run's own files
  (:meth:`vaswani.rundir.RunDir.owns`: its config, weights, tokenizers, metrics, log, checkpoints);
- it is a file that exists, unless ``--force`` is given (a folder output must be new or empty,
  as the command says).

A command's default output (``plot``'s ``RUN_DIR/loss_curves.png``, ``evaluate``'s hypotheses in
the run) is its own and is written again without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from vaswani.errors import ConfigError
from vaswani.rundir import RunDir

Inputs = Mapping[str, Path | Sequence[Path] | None]
"""The inputs of a command, by flag (``--src``, ``--text``...): a path, several, or None."""

CONFIG_BYTES = 1 << 20  # a run's config.json is a few kilobytes: a larger one is not a run's


def add_force_flag(p: argparse.ArgumentParser) -> None:
    """``--force``: overwrite an output file that exists (never an input or a run's own file)."""
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite an existing output file (never an input or a run's file)",
    )


def resolved(path: Path, flag: str) -> Path:
    """``path`` with every link resolved; a dangling link or a loop is refused."""
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{flag} {path}: a symbolic link to nothing (dangling, or a loop of links)")
    try:
        return path.resolve(strict=False)
    except (OSError, RuntimeError):  # a loop of links above it
        raise ConfigError(f"{flag} {path}: a loop of symbolic links") from None


def check_parent(path: Path, flag: str, make_parents: bool = False) -> None:
    """The folder ``path`` is written in exists and this process may write there; with
    ``make_parents`` (a new run directory, made as ``mkdir -p`` would), the nearest folder of its
    path that exists."""
    parent = path.parent
    while make_parents and not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.exists():
        raise ConfigError(f"{flag} {path}: cannot write: no such folder {parent}")
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: cannot write: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot write: permission denied in {parent}")


def same(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` (resolved) are one file or folder, hard links included."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def check_not_input(out: Path, flag: str, inputs: Inputs) -> None:
    """``out`` (resolved) is none of ``inputs``, nor a file that exists in an input folder (one
    that the command reads)."""
    for name, given in inputs.items():
        paths = [given] if isinstance(given, Path) else list(given or ())
        for path in paths:
            source = path.resolve(strict=False)
            if same(out, source):
                raise ConfigError(f"{flag} {out}: is also an input ({name} {path}); write it elsewhere")
            try:
                folder = source.is_dir()
            except OSError:  # not a path at all (a long sentence given where a file may be)
                folder = False
            if folder and out.is_relative_to(source) and out.exists():
                raise ConfigError(
                    f"{flag} {out}: is a file of the input folder {name} {path}; write it elsewhere"
                )


def is_run(folder: Path) -> bool:
    """Whether ``folder`` is a vaswani run directory (its ``config.json`` names a format and a task)."""
    config = folder / RunDir.CONFIG
    try:
        if not config.is_file() or config.stat().st_size > CONFIG_BYTES:
            return False
        payload = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(payload, dict) and "format_version" in payload and "task" in payload


def enclosing_run(out: Path) -> Path | None:
    """The nearest run directory that holds ``out`` (resolved)."""
    return next((folder for folder in out.parents if is_run(folder)), None)


def check_not_in_run(out: Path, flag: str, own_run: Path | None) -> None:
    """``out`` (resolved) lies in no run directory but ``own_run``, and is none of its files."""
    run = enclosing_run(out)
    if run is None:
        return
    if own_run is None or not same(run, own_run.resolve()):
        raise ConfigError(f"{flag} {out}: lies inside the run directory {run}; write it elsewhere")
    if RunDir(run).owns(out):
        raise ConfigError(f"{flag} {out}: is one of the files of the run {run}; write it elsewhere")


def check_output(
    path: Path | None,
    flag: str,
    inputs: Inputs | None = None,
    own_run: Path | None = None,
    force: bool = False,
    folder: bool = False,
    make_parents: bool = False,
) -> None:
    """Refuse the output ``path`` of option ``flag`` where writing it could lose data (see the
    module docstring); None (not given) passes. ``own_run`` is the run that the command may
    write into; ``folder``: the output is a folder, which the command requires new or empty;
    ``make_parents``: its missing parent folders are made (a new run directory, as ``--out``)."""
    if path is None:
        return
    out = resolved(path, flag)
    check_parent(out, flag, make_parents)
    check_not_input(out, flag, inputs or {})
    check_not_in_run(out, flag, own_run)
    if folder or not (path.exists() or path.is_symlink()):
        return
    if out.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; name a file")
    if not force:
        raise ConfigError(f"{flag} {path}: already exists; give --force to overwrite it")


def check_new_run(path: Path | None, flag: str = "--out") -> None:
    """A new run directory ``path`` (its missing parents are made): no dangling link, and not
    inside another run."""
    if path is not None:
        check_not_in_run(resolved(path, flag), flag, None)
