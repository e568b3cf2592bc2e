"""Writing and reading the files of a run: every write is flushed to disk, replaced atomically
where a reader could see it half written, and fails with one line; weights are read from
safetensors only, never unpickled.

A full disk or another write failure surfaces as an ``OSError`` at :func:`write_file` and is
turned into a one-line :class:`~vaswani.errors.VaswaniError` by :func:`write_error`, e.g.
``runs/x/model.safetensors: cannot write: no space left on device``.

Every file vaswani writes is opened by :func:`open_for_write`, through :func:`write_file`,
:func:`atomic_write` (a temporary file in the same folder, created exclusively, then renamed) or
:func:`append_text`: never through a symbolic link (``O_NOFOLLOW``) and only as a regular file. A
link planted where a file is written is refused in one line naming it (:func:`link_refused`), and
its target, wherever it is, is never touched.

Every file the user names is read through :func:`read_bytes_bounded` (standard input through
:func:`read_stream_bounded`), which opens it with :func:`open_input`: a regular file, or a pipe
that has a writer (``<(…)``, ``/dev/fd/N``, a named FIFO), opened without blocking so that a FIFO
without a writer is refused at once instead of hanging; a directory, a device or a socket is
refused from its type, before it is opened. It is read in chunks and refused once it passes
:func:`max_input_bytes` (``VASWANI_MAX_INPUT_BYTES``, default 1 GiB), and every ``OSError`` becomes
one line naming the path. A path naming a descriptor (``/dev/fd/63``) is never resolved to the
name of its link (:func:`absolute_path`).
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save
from torch import Tensor, nn

from vaswani.errors import ConfigError, DataError, RunDirError, VaswaniError

WEIGHTS = "model.safetensors"
"""The weights file of a run directory, of a checkpoint and of a Hugging Face model folder."""


MAX_INPUT_ENV = "VASWANI_MAX_INPUT_BYTES"
DEFAULT_MAX_INPUT_BYTES = 1 << 30
MAX_LINE_ENV = "VASWANI_MAX_LINE_CHARS"
DEFAULT_MAX_LINE_CHARS = 100_000
CHUNK = 1 << 20


def env_limit(name: str, default: int) -> int:
    """The positive integer of the environment variable ``name``, else ``default``."""
    given = os.environ.get(name)
    if given is None:
        return default
    try:
        value = int(given)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {given[:40]!r}")
    return value


def max_input_bytes() -> int:
    """The most bytes read from one input file or from standard input: ``VASWANI_MAX_INPUT_BYTES``,
    else 1 GiB."""
    return env_limit(MAX_INPUT_ENV, DEFAULT_MAX_INPUT_BYTES)


def max_line_chars() -> int:
    """The longest line of a text file, in characters: ``VASWANI_MAX_LINE_CHARS``, else 100,000
    (a tokenizer's training time grows faster than linearly in the length of a word)."""
    return env_limit(MAX_LINE_ENV, DEFAULT_MAX_LINE_CHARS)


def os_reason(exc: OSError) -> str:
    """The operating system's words for ``exc``, in lower case (``permission denied``)."""
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def read_error(path: Path, exc: OSError) -> DataError:
    """A one-line error for a failed read, e.g. ``…: cannot read: permission denied``."""
    if exc.errno == errno.ENOENT:
        if path.is_symlink():
            return DataError(f"{path}: a dangling symbolic link (to {os.readlink(path)})")
        return DataError(f"{path}: no such file")
    if exc.errno == errno.ELOOP:
        return DataError(f"{path}: a loop of symbolic links")
    if exc.errno == errno.ENOTDIR:
        return DataError(f"{path}: no such file (a part of the path is a file, not a folder)")
    return DataError(f"{path}: cannot read: {os_reason(exc)}")


def absolute_path(value: str | Path) -> str:
    """``value`` made absolute, its symbolic links resolved; a dangling link or a loop of links is
    refused in one line naming it (a missing file is left to its reader, which names it). A pipe
    (``/dev/fd/63`` from ``<(…)``, a named FIFO) is made absolute without resolving its links: the
    link of a descriptor names no file (``pipe:[123]``)."""
    path = Path(value)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if path.is_symlink():
            raise read_error(path, exc) from None
    else:
        if stat.S_ISFIFO(mode) or is_descriptor_path(path):
            return os.path.abspath(path)
    try:
        return str(path.resolve())
    except (RuntimeError, OSError):  # a loop further up the path
        raise DataError(f"{path}: a loop of symbolic links") from None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def not_regular(path: str | Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a directory (``a device``,
    ``a FIFO (named pipe)``, ``a socket``), else None: for readers that open paths themselves."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else _kind(mode)


DESCRIPTOR_FOLDERS = ("/dev/fd/", "/proc/self/fd/")
"""Where a path names a descriptor the process already holds (``<(…)``, a shell's process
substitution, gives ``/dev/fd/63``): such a path is read as given, never resolved."""


def is_descriptor_path(path: str | Path) -> bool:
    """Whether ``path`` names an open descriptor of this process (``/dev/fd/N``,
    ``/proc/self/fd/N``, ``/dev/stdin``), whose link must not be resolved to a name."""
    text = str(path)
    return text == "/dev/stdin" or any(text.startswith(folder) for folder in DESCRIPTOR_FOLDERS)


def _refuse_kind(path: Path, mode: int, expected: str) -> None:
    """A directory, a device or a socket is refused from its type (a FIFO is :func:`open_input`'s)."""
    if stat.S_ISDIR(mode):
        raise DataError(f"{path}: is a directory, expected {expected}")
    if not stat.S_ISREG(mode) and not stat.S_ISFIFO(mode):
        raise DataError(f"{path}: is {_kind(mode)}, expected {expected}")


def open_input(path: Path, expected: str = "a file") -> BinaryIO:
    """``path`` opened for reading: a regular file, or a pipe (``<(…)``, ``/dev/fd/N``,
    ``/dev/stdin``, a named FIFO) that has a writer. A directory, a device or a socket is refused
    from its type before it is opened; the file is opened without blocking, so that a FIFO
    without a writer is refused at once (``is a FIFO (named pipe) without a writer``: Linux reads
    end-of-file from it, where a pipe with a writer has data or would block) instead of hanging,
    then read blocking. Errors name the path."""
    try:
        _refuse_kind(path, os.stat(path).st_mode, expected)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise read_error(path, exc) from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode):
        try:
            first = os.read(fd, CHUNK)
        except BlockingIOError:  # a writer that has not written yet
            first = b""
        except OSError as exc:
            os.close(fd)
            raise read_error(path, exc) from None
        else:
            if not first:
                os.close(fd)
                raise DataError(f"{path}: is a FIFO (named pipe) without a writer, expected {expected}")
        os.set_blocking(fd, True)
        return io.BufferedReader(Replayed(first, os.fdopen(fd, "rb")))
    if not stat.S_ISREG(mode):  # replaced between the check and the open
        os.close(fd)
        raise DataError(f"{path}: not a regular file, expected {expected}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


class Replayed(io.RawIOBase):
    """A stream whose first bytes were read already (a pipe, by :func:`open_input`, to see its
    writer; a file's head, to detect its format): those bytes, then the rest of the stream."""

    def __init__(self, first: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self.first = first
        self.rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.first:
            n = min(len(buffer), len(self.first))
            buffer[:n] = self.first[:n]
            self.first = self.first[n:]
            return n
        return self.rest.readinto(buffer)  # type: ignore[attr-defined]

    def fileno(self) -> int:
        return self.rest.fileno()

    def close(self) -> None:
        self.rest.close()
        super().close()


def open_regular(path: Path, expected: str = "a file") -> BinaryIO:
    """``path`` opened for reading, once it is seen to be a regular file: a directory, a device, a
    FIFO or a socket is refused from its type before it is opened (and checked again on the open
    file, opened without blocking); errors name the path. For files that are read by position
    (weights); text inputs are :func:`open_input`'s."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISFIFO(mode):
            raise DataError(f"{path}: is {_kind(mode)}, expected {expected}")
        _refuse_kind(path, mode, expected)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise read_error(path, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the check and the open
        os.close(fd)
        raise DataError(f"{path}: not a regular file, expected {expected}")
    return os.fdopen(fd, "rb")


def too_large(name: str, limit: int) -> DataError:
    """The one line for an input past the limit."""
    return DataError(f"{name}: more than {limit} bytes, the input limit; raise it with {MAX_INPUT_ENV}")


def read_stream_bounded(stream: BinaryIO, name: str, limit: int | None = None) -> bytes:
    """The bytes of ``stream`` (standard input...), read in chunks and refused once they pass
    ``limit`` (default :func:`max_input_bytes`), naming ``name``."""
    limit = max_input_bytes() if limit is None else limit
    chunks: list[bytes] = []
    size = 0
    try:
        while chunk := stream.read(min(CHUNK, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise too_large(name, limit)
    except OSError as exc:
        raise DataError(f"{name}: cannot read: {os_reason(exc)}") from None
    return b"".join(chunks)


def read_bytes_bounded(path: str | Path, expected: str = "a file", limit: int | None = None) -> bytes:
    """The bytes of the file or pipe ``path`` (see :func:`open_input`), refused in one line once
    they pass ``limit`` (default :func:`max_input_bytes`): read in chunks, never whole first."""
    path = Path(path)
    limit = max_input_bytes() if limit is None else limit
    with open_input(path, expected) as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise too_large(str(path), limit)
        return read_stream_bounded(f, str(path), limit)


def fsync_path(path: Path) -> None:
    """Flush ``path`` (a file or a folder, after a rename in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def link_refused(path: Path) -> RunDirError:
    """The one line for a symbolic link where vaswani writes a file: never followed."""
    return RunDirError(f"{path}: a symbolic link; vaswani writes no file of a run through a link (remove it)")


def open_for_write(path: Path, flags: int = os.O_TRUNC) -> int:
    """A descriptor of ``path`` opened for writing (created if missing, with ``flags``: ``O_TRUNC``,
    ``O_APPEND``, ``O_EXCL``), never through a symbolic link (``O_NOFOLLOW``: a link is refused in
    one line naming it, its target untouched) and only as a regular file (a FIFO or a device is
    refused, without blocking on it). Other failures are the ``OSError``, for :func:`write_error`."""
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | flags, 0o666
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise link_refused(path) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunDirError(f"{path}: not a regular file; vaswani writes only regular files (remove it)")
    os.set_blocking(fd, True)
    return fd


def write_file(path: Path, data: bytes, flags: int = os.O_TRUNC) -> None:
    """Write ``data`` and flush it to disk, never through a link (:func:`open_for_write`). Every
    file of a run goes through here, so that a full disk surfaces as an ``OSError`` (safetensors
    and ``torch.save`` writing to a path would raise their own, less clear errors)."""
    with os.fdopen(open_for_write(path, flags), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def append_text(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` (created if missing), never through a link
    (:func:`open_for_write` with ``O_APPEND``); a failure is one line naming the file."""
    try:
        with os.fdopen(open_for_write(path, os.O_APPEND), "a", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as exc:
        raise write_error(path, exc) from None


def write_error(path: Path, exc: OSError, note: str = "") -> VaswaniError:
    """A one-line error for a failed write, e.g. ``…: cannot write: no space left on device``."""
    return VaswaniError(f"{path}: cannot write: {os_reason(exc)}{note}")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _no_constant(name: str) -> Any:
    """Refuse ``NaN`` and ``Infinity``, which Python's json reads by default but JSON does not have."""
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: Path, error: type[VaswaniError] = DataError, invalid: str = "not valid JSON") -> Any:
    """The JSON value of the file ``path``. Anything that is not JSON (a syntax error, bytes that are
    not UTF-8, ``NaN`` or ``Infinity``, nesting too deep for Python's parser, a 100000-deep
    ``[[[[...``) is one line of ``error`` naming the file and saying ``invalid``. The file is read
    by :func:`read_bytes_bounded` (a device, a FIFO, a file past the input limit or one that cannot
    be read is its one-line :class:`DataError`)."""
    raw = read_bytes_bounded(path)
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise error(f"{path}: {invalid} (nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, NaN or Infinity
        raise error(f"{path}: {invalid} ({first_line(exc)})") from None


def json_text(value: Any, ensure_ascii: bool = True) -> str:
    """``value`` as indented JSON text and a newline; a NaN or an infinity (which JSON does not have,
    and :func:`read_json` refuses) is a ``ValueError``, never written."""
    return json.dumps(value, indent=2, ensure_ascii=ensure_ascii, allow_nan=False) + "\n"


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder (created exclusively,
    never through a link) and a rename: on failure ``path`` keeps its old content and the temporary
    file is removed. A symbolic link at ``path`` is refused in one line naming it (a rename would
    replace the link itself, never its target, were one planted meanwhile), and so is anything else
    that is not a regular file (``--out /dev/null`` is never replaced by a file)."""
    if path.is_symlink():
        raise link_refused(path)
    if path.exists() and not path.is_file():
        raise RunDirError(f"{path}: not a regular file; vaswani writes only regular files (remove it)")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if os.path.lexists(tmp):  # left by a crash (a link planted there is unlinked, not followed)
            tmp.unlink()
        write_file(tmp, data, os.O_EXCL)
        os.replace(tmp, path)
    except BaseException as exc:  # KeyboardInterrupt too: no temporary file is left
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write` of ``text`` encoded as UTF-8."""
    atomic_write(path, text.encode("utf-8"))


def model_bytes(model: nn.Module, metadata: dict[str, str] | None = None) -> bytes:
    """The weights as safetensors bytes (with ``metadata`` in the header); a parameter shared by
    several names (tied embeddings) is stored once, under its first name, and :func:`load_weights`
    restores the ties. A sharded parameter (a DTensor, under FSDP) is gathered whole first: every
    process must call this then."""
    tensors: dict[str, Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            whole = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            tensors[name] = whole.detach().cpu().contiguous()
    return save(tensors, metadata)


def atomic_save_model(model: nn.Module, path: Path) -> None:
    """Save weights as safetensors (tied weights stored once) through a temporary file."""
    atomic_write(path, model_bytes(model))


DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit


def safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """name → (dtype, shape, bytes) of every tensor of the safetensors file ``path``, from its
    header alone (the file's first 8 + N bytes; nothing else is read)."""
    with open_regular(path, "a safetensors file") as f:
        head = f.read(8)
        size = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < size <= MAX_HEADER_BYTES:
            raise RunDirError(f"{path}: not a readable safetensors file (no header)")
        raw = f.read(size)
    try:
        header = json.loads(raw.decode("utf-8"))
        tensors = {
            name: (str(entry["dtype"]), tuple(int(n) for n in entry["shape"]))
            for name, entry in header.items()
            if name != "__metadata__"
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RunDirError(f"{path}: not a readable safetensors file (header: {first_line(exc)})") from None
    return {
        name: (dtype, shape, math.prod(shape) * DTYPE_BYTES.get(dtype, 8))
        for name, (dtype, shape) in tensors.items()
    }


def safetensors_metadata(path: Path) -> dict[str, str]:
    """The metadata of the safetensors file ``path``'s header ({} when it has none)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as exc:  # safetensors raises its own error types on foreign or corrupt files
        raise RunDirError(f"{path}: not a readable safetensors file ({first_line(exc)})") from None


def _dtype(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def tensor_problem(tensor: Tensor, expected: Tensor | None = None) -> str | None:
    """What is wrong with a weight read from a file, or None: a dtype the model's tensor of that
    name (``expected``) cannot take (a floating tensor loads into a floating one; any other, such
    as a quantized run's int8, only into its own dtype), a dtype that is not floating point when no
    model tensor is given, or NaN or infinite values (one pass over a floating tensor)."""
    if expected is None:
        if not tensor.is_floating_point():
            return f"has dtype {_dtype(tensor)}, expected a floating-point type"
    elif tensor.dtype != expected.dtype and not (tensor.is_floating_point() and expected.is_floating_point()):
        return f"has dtype {_dtype(tensor)}, the model expects {_dtype(expected)}"
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        return f"has non-finite values ({'nan' if bool(torch.isnan(tensor).any()) else 'inf'})"
    return None


def load_weights(model: nn.Module, path: Path) -> None:
    """Load safetensors weights, refusing a file that is not safetensors and tensors that are
    missing, unexpected, of another shape or dtype than the model's, or not finite (the first
    offender is named, with the file)."""
    if not path.is_file():
        raise RunDirError(f"{path}: no such weights file")
    expected = model.state_dict()
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118
                shape = tuple(f.get_slice(name).get_shape())
                if name not in expected:
                    continue
                if tuple(expected[name].shape) != shape:
                    raise RunDirError(
                        f"{path}: tensor '{name}' has shape {list(shape)}, the model expects "
                        f"{list(expected[name].shape)}: weights and config.json do not match"
                    )
                problem = tensor_problem(f.get_tensor(name), expected[name])
                if problem:
                    raise RunDirError(f"{path}: tensor '{name}' {problem}")
    except RunDirError:
        raise
    except Exception as exc:  # safetensors raises its own error types on foreign or corrupt files
        raise RunDirError(f"{path}: not a readable safetensors file ({first_line(exc)})") from None
    try:
        missing, unexpected = load_model(model, str(path), strict=False)
    except Exception as exc:
        raise RunDirError(f"{path}: cannot load weights ({first_line(exc)})") from None
    if missing or unexpected:
        raise RunDirError(
            f"{path}: weights do not fit the model (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]})"
        )
