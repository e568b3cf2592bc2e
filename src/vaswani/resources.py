"""Sizes against memory: how many bytes a model of a :class:`~vaswani.config.ModelConfig` needs, and
how many this process may still take, so that a model that cannot fit (``d_model`` 1e9, a
hand-edited vocabulary of 1e9) is refused in one line naming its fields before anything is
allocated, and a run directory's weights are checked against their safetensors header before the
model is built.

The estimate is a lower bound: the parameters every model of the config has (embeddings, attention,
feed-forward, a ViT's patch projection and patch positions, every table of the position scheme as
``config.POSITIONS`` counts it: an absolute table, Shaw et al.'s relative tables, T5's buckets) and
its large buffers (sinusoidal tables, rotary cos/sin tables), 4 bytes an element; training adds
the gradients and Adam's two moments (4 times the parameters in all). A config is refused only
when that much does not fit, so nothing that could train is refused.

The memory available is the least of ``MemAvailable`` (``/proc/meminfo``, else ``os.sysconf``), the
cgroup's limit less its usage (v2 ``memory.max``, v1 ``memory.limit_in_bytes``), the address space
left under ``RLIMIT_AS``, and, for a CUDA device, the device's free memory.

Generation decodes in chunks of :func:`decode_rows` rows. A long native call that holds the GIL
(training a tokenizer on much text) runs in a child process (:func:`run_interruptibly`), so that
Ctrl-C still stops it at once.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import resource
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from vaswani.config import POSITIONS, ModelConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.io import safetensors_header

FLOAT_BYTES = 4
TRAINING_COPIES = 4  # parameters, gradients, Adam's first and second moments
CGROUP_FILES = (
    (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
    (
        Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        Path("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ),
)


@dataclass(frozen=True)
class Term:
    """A part of a model's size: its element count, the config fields it grows with, and whether
    it is stored in the weights file (a sinusoidal table is a buffer that is not)."""

    elements: int
    fields: tuple[str, ...]
    stored: bool = True


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure to allocate memory (Python's, CUDA's or the CPU allocator's)."""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


def _int_file(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _proc_kib(path: Path, key: str) -> int | None:
    """A ``key: N kB`` line of ``/proc/meminfo`` or ``/proc/self/status``, in bytes."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name == key and value.split() and value.split()[0].isdigit():
            return int(value.split()[0]) * 1024
    return None


def host_memory_available() -> int:
    """Bytes this process may still allocate on the host (see the module docstring)."""
    found = [_proc_kib(Path("/proc/meminfo"), "MemAvailable")]
    if found[0] is None and hasattr(os, "sysconf"):
        try:
            found = [os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
        except (OSError, ValueError):
            found = []
    for limit_file, usage_file in CGROUP_FILES:
        limit, usage = _int_file(limit_file), _int_file(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            found.append(max(0, limit - usage))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        found.append(max(0, soft - (_proc_kib(Path("/proc/self/status"), "VmSize") or 0)))
    known = [n for n in found if n is not None]
    return min(known) if known else 1 << 62


def memory_available(device: torch.device | None = None) -> int:
    """Bytes available where a model on ``device`` lives: the host's, and for CUDA also the device's."""
    host = host_memory_available()
    if device is not None and device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return min(host, free)
    return host


def model_terms(cfg: ModelConfig) -> dict[str, Term]:
    """The parts of the parameters and large buffers every model of ``cfg`` has (a lower bound)."""
    d, heads = cfg.d_model, cfg.n_heads
    d_kv = d * (cfg.n_kv_heads or heads) // heads
    attention = 2 * d * d + 2 * d * d_kv
    block = attention + (3 if cfg.ffn == "gated" else 2) * d * cfg.d_ff
    layer_fields = ("d_model", "d_ff", "n_layers")
    vocab = cfg.vocab_size
    terms: dict[str, Term] = {}
    if cfg.arch == "encoder_decoder":
        src, tgt = cfg.src_vocab_size or vocab, cfg.tgt_vocab_size or vocab
        enc, dec = cfg.n_encoder_layers or cfg.n_layers, cfg.n_decoder_layers or cfg.n_layers
        layers = Term(enc * block + dec * (block + attention), layer_fields)
        tables = tgt * (1 + (cfg.tie_embeddings == "none")) + src * (cfg.tie_embeddings != "all")
        embeddings = Term(tables * d, ("vocab_size", "d_model"))
    elif cfg.arch == "rnn":  # two stacks of LSTM layers: 4 gates of input and recurrent weights
        layers = Term(2 * cfg.n_layers * 8 * d * d, ("d_model", "n_layers"))
        src, tgt = cfg.src_vocab_size or vocab, cfg.tgt_vocab_size or vocab
        tables = tgt * (1 + (cfg.tie_embeddings == "none")) + src * (cfg.tie_embeddings != "all")
        embeddings = Term(tables * d, ("vocab_size", "d_model"))
    elif cfg.arch == "vit":  # the patch projection; [CLS] and the positions of the patches
        layers = Term(cfg.n_layers * block, layer_fields)
        embeddings = Term(cfg.channels * cfg.patch_size**2 * d, ("patch_size", "channels", "d_model"))
        patches = (cfg.image_size // cfg.patch_size) ** 2
        terms["patch positions"] = Term((patches + 2) * d, ("image_size", "patch_size", "d_model"))
    else:
        layers = Term(cfg.n_layers * block, layer_fields)
        tables = vocab * (1 + (cfg.arch == "decoder_only" and cfg.tie_embeddings == "none"))
        segments = cfg.type_vocab_size if cfg.arch == "encoder_only" else 0
        embeddings = Term((tables + segments) * d, ("vocab_size", "d_model"))
    terms |= {"layers": layers, "embeddings": embeddings}
    kind = POSITIONS[cfg.position]  # a ViT's blocks build a scheme of its scores or its queries and keys
    if cfg.arch != "rnn" and (cfg.arch != "vit" or kind.acts != "embedding") and kind.elements(cfg):
        terms["positions"] = Term(kind.elements(cfg), kind.fields, kind.stored)
    return terms


def parameter_elements(cfg: ModelConfig, stored_only: bool = False) -> int:
    """A lower bound of the elements of a model of ``cfg``: parameters and large buffers, or with
    ``stored_only`` those its weights file holds."""
    return sum(t.elements for t in model_terms(cfg).values() if t.stored or not stored_only)


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def _largest_fields(cfg: ModelConfig, names: Mapping[str, str] | None = None) -> str:
    """``model.FIELD=VALUE, ...`` of the largest part of the model's size (a field spelled as
    ``names`` has it where it does: another format's name for it)."""
    term = max(model_terms(cfg).values(), key=lambda t: t.elements)
    names = names or {}
    return ", ".join(f"{names.get(name, 'model.' + name)}={getattr(cfg, name)}" for name in term.fields)


def check_fits(
    cfg: ModelConfig,
    training: bool = False,
    device: torch.device | None = None,
    where: str = "",
    names: Mapping[str, str] | None = None,
) -> None:
    """Refuse ``cfg`` in one line naming its largest fields (as ``names`` spells them, where it
    does) when its estimate (with the gradients and optimizer state when ``training``) passes
    :func:`memory_available`; ``where`` prefixes the line."""
    need = parameter_elements(cfg) * FLOAT_BYTES * (TRAINING_COPIES if training else 1)
    available = memory_available(device)
    if need > available:
        what = "parameters, gradients and optimizer state" if training else "parameters and buffers"
        raise ConfigError(
            f"{where}the model does not fit in memory: at least {_gib(need)} of {what} "
            f"({_largest_fields(cfg, names)}), {_gib(available)} available"
        )


MAX_DECODE_ROWS = 256


def decode_rows(cfg: ModelConfig, device: torch.device | None = None) -> int:
    """How many rows to decode at once with a model of ``cfg``: those whose KV cache (keys and
    values of every layer over the whole context) and logits fit in a quarter of the memory
    available, between 1 and :data:`MAX_DECODE_ROWS`."""
    d_kv = cfg.d_model * (cfg.n_kv_heads or cfg.n_heads) // cfg.n_heads
    layers = (cfg.n_decoder_layers or cfg.n_layers) * (2 if cfg.arch == "encoder_decoder" else 1)
    cache = 2 * layers * cfg.max_len * d_kv
    per_row = FLOAT_BYTES * (cache + 4 * cfg.vocab_size + 4 * cfg.max_len * cfg.d_model)
    return max(1, min(MAX_DECODE_ROWS, memory_available(device) // 4 // per_row))


def check_weights(path: Path, cfg: ModelConfig) -> None:
    """Check the weights file ``path`` against ``cfg`` from its safetensors header alone, before a
    model is built: refused in one line when the config needs far more elements than the file holds
    (a hand-edited vocabulary: more than twice the lower bound, naming the fields), or when the
    tensors do not fit in memory."""
    header = safetensors_header(path)
    elements = sum(math.prod(shape) for _, shape, _ in header.values())
    stored = sum(size for _, _, size in header.values())
    needed = parameter_elements(cfg, stored_only=True)
    if needed > 2 * elements:
        raise RunDirError(
            f"{path}: holds {elements} weights, but config.json ({_largest_fields(cfg)}) needs at least "
            f"{needed}: the weights and config.json do not match"
        )
    available = memory_available()
    if stored > available:
        raise RunDirError(f"{path}: {_gib(stored)} of weights do not fit in the {_gib(available)} available")


INTERRUPTIBLE_CHARS = 1 << 20


def _work_in_child(send: Connection, work: Callable[..., str], args: tuple[Any, ...]) -> None:
    try:
        send.send(("done", work(*args)))
    except Exception as exc:  # handed to the parent, which raises it
        send.send(("failed", f"{type(exc).__name__}: {exc}"))


def run_interruptibly(work: Callable[..., str], *args: Any) -> str:
    """``work(*args)`` (a long native call that holds the GIL, such as training a tokenizer) in a
    child process, forked where the system can, while the main thread waits on it in steps of
    0.1 s: Ctrl-C stops the wait at once and kills the child. Its result is a string (JSON...)."""
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_work_in_child, args=(send, work, args), daemon=True)
    child.start()
    send.close()
    try:
        while not receive.poll(0.1):
            if not child.is_alive() and not receive.poll(0):
                raise RuntimeError(f"the worker process ended with no result (exit status {child.exitcode})")
        kind, value = receive.recv()
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
    if kind == "failed":
        raise RuntimeError(value)
    return value


def _trained_json(tokenizer: Tokenizer, texts: list[str], trainer: Any) -> str:
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer.to_str()


def train_tokenizer(tokenizer: Tokenizer, texts: Iterable[str], trainer: Any) -> Tokenizer:
    """``tokenizer`` (Hugging Face ``tokenizers``) trained on ``texts``; past
    :data:`INTERRUPTIBLE_CHARS` characters in a child process (:func:`run_interruptibly`), so that
    Ctrl-C stops a long training at once: the native call holds the GIL, and no signal handler runs
    until it returns."""
    texts = list(texts)
    if sum(len(text) for text in texts) <= INTERRUPTIBLE_CHARS:
        tokenizer.train_from_iterator(texts, trainer=trainer)
        return tokenizer
    return Tokenizer.from_str(run_interruptibly(_trained_json, tokenizer, texts, trainer))
