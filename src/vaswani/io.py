"""Writing and reading the files of a run: every write is flushed to disk, replaced atomically
where a reader could see it half written, and fails with one line; weights are read from
safetensors only, never unpickled.

A full disk or another write failure surfaces as an ``OSError`` at :func:`write_file` and is
turned into a one-line :class:`~vaswani.errors.VaswaniError` by :func:`write_error`, e.g.
``runs/x/model.safetensors: cannot write: no space left on device``.
"""

from __future__ import annotations

import os
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import load_model, save
from torch import Tensor, nn

from vaswani.errors import RunDirError, VaswaniError

WEIGHTS = "model.safetensors"
"""The weights file of a run directory, of a checkpoint and of a Hugging Face model folder."""


def fsync_path(path: Path) -> None:
    """Flush ``path`` (a file or a folder, after a rename in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` and flush it to disk. Every file of a run goes through here, so that a
    full disk surfaces as an ``OSError`` (safetensors and ``torch.save`` writing to a path
    would raise their own, less clear errors)."""
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_error(path: Path, exc: OSError, note: str = "") -> VaswaniError:
    """A one-line error for a failed write, e.g. ``…: cannot write: no space left on device``."""
    reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    return VaswaniError(f"{path}: cannot write: {reason}{note}")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: on failure ``path``
    keeps its old content and the temporary file is removed."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write_file(tmp, data)
        os.replace(tmp, path)
    except BaseException as exc:  # KeyboardInterrupt too: no temporary file is left
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write` of ``text`` encoded as UTF-8."""
    atomic_write(path, text.encode("utf-8"))


def model_bytes(model: nn.Module) -> bytes:
    """The weights as safetensors bytes; a parameter shared by several names (tied embeddings)
    is stored once, under its first name, and :func:`load_weights` restores the ties. A sharded
    parameter (a DTensor, under FSDP) is gathered whole first: every process must call this then."""
    tensors: dict[str, Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            whole = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            tensors[name] = whole.detach().cpu().contiguous()
    return save(tensors)


def atomic_save_model(model: nn.Module, path: Path) -> None:
    """Save weights as safetensors (tied weights stored once) through a temporary file."""
    atomic_write(path, model_bytes(model))


def load_weights(model: nn.Module, path: Path) -> None:
    """Load safetensors weights, refusing a file that is not safetensors and tensors that are
    missing, unexpected or of another shape (the first offender is named)."""
    if not path.is_file():
        raise RunDirError(f"{path}: no such weights file")
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except Exception as exc:  # safetensors raises its own error types on foreign or corrupt files
        raise RunDirError(f"{path}: not a readable safetensors file ({first_line(exc)})") from None
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    for name, shape in shapes.items():
        if name in expected and expected[name] != shape:
            raise RunDirError(
                f"{path}: tensor '{name}' has shape {list(shape)}, the model expects "
                f"{list(expected[name])}: weights and config.json do not match"
            )
    try:
        missing, unexpected = load_model(model, str(path), strict=False)
    except Exception as exc:
        raise RunDirError(f"{path}: cannot load weights ({first_line(exc)})") from None
    if missing or unexpected:
        raise RunDirError(
            f"{path}: weights do not fit the model (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]})"
        )
