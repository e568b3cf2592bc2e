"""Checkpoints written atomically and checksummed: a new one appears whole or not at all,
and a damaged one is recognised before it is used.

Layout under a run directory::

    checkpoints/step_00001000/
        model.safetensors     weights (safetensors: never unpickled)
        optimizer.pt          optimizer state, RNG states (Python, NumPy, torch, CUDA; the
                              main process's, and each process's under several) and the
                              fp16 scaler's state, read back with weights_only=True
        trainer_state.json    step, data position (epoch, position), elapsed time, counters
        manifest.json         sha256 and size of each file above; written last

The weights and the optimizer state are whole (not one process's shard), so that a run resumes
on any number of processes. There is no scheduler state: the learning-rate schedules are pure functions of the
step (:mod:`vaswani.training.schedules`), so the saved step restores them.

Every file is serialized in memory, hashed, then written and fsynced into a
temporary folder (``.tmp_step_…``) that is renamed into place; only after that
are older checkpoints beyond the kept number removed. A full disk or another
write failure removes the temporary folder and raises a one-line
:class:`~vaswani.errors.VaswaniError`; the checkpoints already there are untouched. A second
Ctrl-C waits until the write, its rename and the removal of older checkpoints are done
(:func:`vaswani.training.signals.uninterrupted`); a run directory removed during training is
refused, not recreated; a ``checkpoints`` that is a symbolic link is refused in one line, never
followed, and a link or a stray file inside it is never listed, pruned or followed. The
writing itself (fsync, atomic replace, no write through a link, safetensors weights) is
:mod:`vaswani.io`'s.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import random
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vaswani.errors import RunDirError
from vaswani.io import WEIGHTS, first_line, fsync_path, link_refused, write_error, write_file
from vaswani.training.signals import uninterrupted

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
FILES = (WEIGHTS, "optimizer.pt", "trainer_state.json")
STEP_FOLDER = re.compile(r"step_\d+")  # a checkpoint's folder, as write_checkpoint names it


def rng_state(device: torch.device | None = None) -> dict[str, Any]:
    """The global generators' states in types that ``torch.load(weights_only=True)`` reads (with
    the CUDA generator's of ``device``, where training runs on a GPU)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    out = {
        "python": random.getstate(),
        "numpy": (kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)),
        "torch": torch.get_rng_state(),
    }
    if device is not None and device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def set_rng_state(state: dict[str, Any], device: torch.device | None = None) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def write_checkpoint(
    run_dir: Path, weights: bytes, extra: dict[str, Any], state: dict[str, Any], keep: int
) -> Path:
    """Write ``checkpoints/step_N`` atomically: ``weights`` (safetensors bytes), ``extra`` (the
    optimizer state under ``optimizer``, the RNG states under ``rng``, …: plain tensors and
    Python values) and the trainer ``state``, with its manifest; then keep the newest ``keep`` up
    to it (newer ones are damaged leftovers that a resume skipped)."""
    root = run_dir / CHECKPOINTS
    if not run_dir.is_dir():  # never recreated: the run's other files are gone with it
        raise RunDirError(f"{run_dir}: the run directory was removed during training; stopping")
    if root.is_symlink():  # pruning would remove folders wherever it leads
        raise link_refused(root)
    try:
        root.mkdir(exist_ok=True)
    except OSError as exc:
        raise write_error(root, exc) from None
    for stale in root.glob(".tmp_*"):  # left by a crash or a kill during an earlier write
        clear_temporary(stale)
    final = root / f"step_{state['step']:08d}"
    tmp = root / f".tmp_{final.name}"
    optimizer_file = io.BytesIO()
    torch.save(extra, optimizer_file)
    data = (weights, optimizer_file.getvalue(), json.dumps(state, indent=2, allow_nan=False).encode())
    contents = dict(zip(FILES, data, strict=True))
    manifest = {n: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for n, b in contents.items()}
    with uninterrupted():  # a second Ctrl-C waits until the checkpoint is whole, or gone
        try:
            tmp.mkdir()
            for name, content in contents.items():
                write_file(tmp / name, content)
            write_file(tmp / MANIFEST, json.dumps(manifest, indent=2, allow_nan=False).encode())
            fsync_path(tmp)
            if final.exists():  # the same step written again (after a resume): set the old one aside
                os.replace(final, root / f".tmp_replaced_{final.name}")
            os.replace(tmp, final)
            fsync_path(root)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError):
                raise write_error(final, exc, "; older checkpoints are untouched") from None
            raise
        ordered = list_checkpoints(run_dir)
        index = ordered.index(final)
        for old in ordered[: max(0, index + 1 - keep)] + ordered[index + 1 :]:
            shutil.rmtree(old)  # a step_N folder the trainer wrote (list_checkpoints lists no link)
        shutil.rmtree(root / f".tmp_replaced_{final.name}", ignore_errors=True)
    warn_foreign(root, set(ordered))
    return final


_WARNED: set[Path] = set()  # the foreign entries of checkpoints/ this process has warned about


def warn_foreign(root: Path, checkpoints: set[Path]) -> None:
    """Warn, once per entry and process, about what ``checkpoints/`` holds that the trainer did not
    write (a stray file, a link, a folder of another name): pruning leaves it where it is."""
    for entry in sorted(root.iterdir()):
        if entry in checkpoints or entry in _WARNED or entry.name.startswith(".tmp_"):
            continue
        _WARNED.add(entry)
        kind = "a link" if entry.is_symlink() else "not a checkpoint"
        print(f"vaswani: warning: {entry}: {kind}; pruning leaves it alone", file=sys.stderr)


def clear_temporary(path: Path) -> None:
    """Clear the trainer's temporary name ``path`` in ``checkpoints/``: a folder left by an
    interrupted write is removed; a link or a file found there is unlinked itself, with a warning,
    never followed (its target, wherever it is, stays as it was)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
        return
    print(
        f"vaswani: warning: {path}: a link or a file where checkpoints are written; unlinked", file=sys.stderr
    )
    path.unlink()


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint folders, oldest first: ``step_N`` folders (not links to one); temporary folders
    and anything else are not listed. A ``checkpoints`` that is itself a link is refused in one
    line naming it (pruning would remove folders wherever it leads)."""
    root = run_dir / CHECKPOINTS
    if root.is_symlink():
        raise link_refused(root)
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if STEP_FOLDER.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
    )


def checkpoint_problem(path: Path, files: Sequence[str] = FILES) -> str | None:
    """What is wrong with a checkpoint folder (missing manifest or file, wrong size or
    checksum), or None when each of ``files`` (default: all) matches its manifest."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {MANIFEST}: the checkpoint is incomplete"
    except (OSError, ValueError, RecursionError) as exc:
        return f"{MANIFEST} is unreadable ({exc})"
    for name in files:
        entry = manifest.get(name) if isinstance(manifest, dict) else None
        if not isinstance(entry, dict):
            return f"{MANIFEST} does not list {name}"
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        size = file.stat().st_size
        if size != entry.get("size"):
            return f"{name} has {size} bytes, not {entry.get('size')}: truncated or overwritten"
        if hashlib.sha256(file.read_bytes()).hexdigest() != entry.get("sha256"):
            return f"{name} does not match its sha256 checksum: corrupted"
    return None


def newest_intact_checkpoint(run_dir: Path) -> Path:
    """The newest checkpoint that matches its manifest. Each newer, damaged one is reported in
    one line on stderr; none intact is a :class:`~vaswani.errors.RunDirError`."""
    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        raise RunDirError(f"{run_dir}: no checkpoint to resume from")
    damaged: list[tuple[Path, str]] = []
    for path in reversed(checkpoints):
        problem = checkpoint_problem(path)
        if problem is None:
            for bad, why in damaged:
                print(f"vaswani: warning: {bad}: {why}; resuming from {path.name} instead", file=sys.stderr)
            return path
        damaged.append((path, problem))
    newest, why = damaged[0]
    raise RunDirError(
        f"{run_dir / CHECKPOINTS}: no intact checkpoint to resume from "
        f"({len(damaged)} damaged; newest {newest.name}: {why})"
    )


def read_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """What ``optimizer.pt`` holds (see :func:`write_checkpoint`) and the trainer state, read
    without unpickling code (one-line :class:`~vaswani.errors.RunDirError` otherwise)."""
    try:
        extra = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise RunDirError(
            f"{path / 'optimizer.pt'}: refused: not plain tensor data (loading it could run code)"
        ) from None
    except Exception as exc:  # a truncated or foreign file
        raise RunDirError(f"{path / 'optimizer.pt'}: unreadable ({first_line(exc)})") from None
    try:
        state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise RunDirError(f"{path / 'trainer_state.json'}: unreadable ({first_line(exc)})") from None
    return extra, state
