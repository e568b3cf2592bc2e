"""What every Hugging Face family shares: reading a model folder, key-mapping tables applied in
both directions, and output folders that appear whole or not at all.

A family module (``gpt2.py``, ``marian.py``, ``bert.py``, ...) states its weights' mapping as a
table of :class:`KeyMap` rows and converts with :func:`rename` (its config's mapping is a table of
:mod:`vaswani.interop.fields`); it reads the Hugging Face folder with :func:`read_hf_config` and
:func:`read_hf_weights` and writes into the folder that :func:`new_folder` gives it.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save
from torch import Tensor, nn

from vaswani.config import ModelConfig, RunConfig
from vaswani.data.config import TextData
from vaswani.errors import DataError, RunDirError, VaswaniError
from vaswani.io import (
    first_line,
    fsync_path,
    json_text,
    read_json,
    tensor_problem,
    write_error,
    write_file,
)
from vaswani.models.gpt import GPT
from vaswani.pipelines.chat import TEMPLATE_FILE, template_of
from vaswani.pipelines.lm import TASK as LM_TASK
from vaswani.pipelines.lm import TOKENIZER as LM_TOKENIZER
from vaswani.rundir import RunDir
from vaswani.tasks import registry
from vaswani.tokenizer import LMTokenizer

TOKENIZER_CONFIG = "tokenizer_config.json"

PICKLED = "pytorch_model.bin"


@dataclass(frozen=True)
class KeyMap:
    """One row of a key-mapping table: a Hugging Face tensor name and ours.

    ``{i}`` in both names stands for the layer number (see :func:`expand`). ``transposed``
    says that the Hugging Face tensor is stored as the transpose of ours: GPT-2's ``Conv1D``
    keeps its weight as (in, out), where ``nn.Linear`` keeps (out, in).
    """

    hf: str
    ours: str
    transposed: bool = False


def expand(table: Sequence[KeyMap], n_layers: int) -> list[KeyMap]:
    """The rows of ``table`` with each ``{i}`` row repeated for layers 0 … n_layers - 1."""
    rows: list[KeyMap] = []
    for row in table:
        if "{i}" in row.hf:
            rows.extend(
                KeyMap(row.hf.format(i=i), row.ours.format(i=i), row.transposed) for i in range(n_layers)
            )
        else:
            rows.append(row)
    return rows


def rename(
    tensors: Mapping[str, Tensor],
    rows: Sequence[KeyMap],
    to_ours: bool,
    our_shapes: Mapping[str, tuple[int, ...]],
) -> dict[str, Tensor]:
    """Apply a table to ``tensors``: Hugging Face names → ours with ``to_ours``, ours → Hugging
    Face names without. Transposed rows are transposed; every result is contiguous.

    Each row's tensor must be present and have the shape that ``our_shapes`` (in our naming and
    orientation) implies (read into ours, also a floating-point dtype and finite values: an int8,
    bool, NaN or infinite weight), and no tensor may be left over: the first offender is named in
    a one-line :class:`~vaswani.errors.DataError`.
    """
    converted: dict[str, Tensor] = {}
    for row in rows:
        source, target = (row.hf, row.ours) if to_ours else (row.ours, row.hf)
        if source not in tensors:
            raise DataError(f"tensor '{source}' is missing")
        expected = our_shapes[row.ours]
        if row.transposed and to_ours:
            expected = expected[::-1]
        tensor = tensors[source]
        if tuple(tensor.shape) != expected:
            raise DataError(
                f"tensor '{source}' has shape {list(tensor.shape)}, the config expects {list(expected)}"
            )
        problem = tensor_problem(tensor) if to_ours else None
        if problem:
            raise DataError(f"tensor '{source}' {problem}")
        converted[target] = (tensor.t() if row.transposed else tensor).contiguous()
    known = {row.hf if to_ours else row.ours for row in rows}
    extra = sorted(set(tensors) - known)
    if extra:
        raise DataError(f"unexpected tensor '{extra[0]}' ({len(extra)} in all)")
    return converted


def decoder_state_from_hf(
    tensors: Mapping[str, Tensor],
    cfg: ModelConfig,
    rows: Sequence[KeyMap],
    our_shapes: Mapping[str, tuple[int, ...]],
    prefix: str,
    head: KeyMap,
    buffers: re.Pattern[str],
) -> dict[str, Tensor]:
    """Our GPT state dict of a decoder-only family's ``tensors`` (GPT-2's, Llama's) by ``rows``:
    the stored buffers that are no weights (``buffers``: attention masks, rotary tables) dropped,
    the base model's names (without ``prefix``) read as the head model's, and with a tied head the
    output projection ``head.ours`` is the token embedding itself (a stored ``head.hf`` is ignored,
    as Hugging Face does). A missing, unexpected or misshapen tensor is a :class:`DataError`."""
    tied = cfg.tie_embeddings != "none"
    named: dict[str, Tensor] = {}
    for name, tensor in tensors.items():
        if buffers.fullmatch(name) or (tied and name == head.hf):
            continue
        named[name if name.startswith(prefix) or name == head.hf else prefix + name] = tensor
    state = rename(named, rows, to_ours=True, our_shapes=our_shapes)
    if tied:
        state[head.ours] = state["embed.token.weight"]
    return state


@contextmanager
def naming(path: Path, *kinds: type[VaswaniError]) -> Iterator[None]:
    """An error of one of ``kinds`` raised in the block, raised again as that kind with ``path`` (the
    file the refused value came from) before its message."""
    try:
        yield
    except kinds as exc:
        kind = next(kind for kind in kinds if isinstance(exc, kind))
        raise kind(f"{path}: {exc}") from None


def fits_vocabulary(path: Path, vocab_size: int, field: str, size: int) -> None:
    """Refuse, naming the tokenizer file ``path``, a vocabulary of ``vocab_size`` larger than the
    model's ``field`` of ``size``."""
    if vocab_size > size:
        raise DataError(f"{path}: vocabulary of {vocab_size} does not fit the model's {field} of {size}")


def save_run(out: Path, run: RunConfig, model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Write the run directory ``out``: ``run`` as its config, ``model`` holding ``state`` (every
    weight, strictly) as its weights."""
    model.load_state_dict(state, strict=True)
    folder = RunDir(out)
    folder.write_config(run)
    folder.save_weights(model)


def write_lm_run(
    src: Path,
    out: Path,
    cfg: ModelConfig,
    tokenizer: LMTokenizer,
    tokenizer_path: Path,
    state_from_hf: Callable[[Mapping[str, Tensor], ModelConfig], dict[str, Tensor]],
    data: TextData,
) -> None:
    """Write a vaswani ``lm`` run directory into ``out`` from a decoder-only folder ``src`` (GPT-2's,
    Llama's) whose config is ``cfg`` and tokenizer ``tokenizer`` (read from ``tokenizer_path``):
    its weights converted by ``state_from_hf`` into a GPT, the default recipe's training settings
    and ``data``. A vocabulary larger than the model's, or a weight that does not fit, is a
    :class:`DataError` naming the file."""
    fits_vocabulary(tokenizer_path, tokenizer.vocab_size, "vocab_size", cfg.vocab_size)
    tensors, weights_path = read_hf_weights(src)
    with naming(weights_path, DataError):
        state = state_from_hf(tensors, cfg)
    save_run(out, RunConfig(LM_TASK, cfg, registry.configure(LM_TASK).train, data), GPT(cfg), state)
    write_file(out / LM_TOKENIZER, tokenizer.tokenizer.to_str(pretty=True).encode("utf-8"))
    template = read_chat_template(src)
    if template is not None:
        write_file(out / TEMPLATE_FILE, template.encode("utf-8"))


def read_chat_template(src: Path) -> str | None:
    """The chat template of the Hugging Face folder ``src``: its ``chat_template.jinja``, else
    ``tokenizer_config.json``'s ``chat_template``; None when it has neither."""
    if (src / TEMPLATE_FILE).is_file():
        return (src / TEMPLATE_FILE).read_text(encoding="utf-8")
    if (src / TOKENIZER_CONFIG).is_file():
        return template_of(read_json(src / TOKENIZER_CONFIG))
    return None


def chat_template_setting(run_dir: Path) -> dict[str, str]:
    """``{"chat_template": ...}`` for an exported ``tokenizer_config.json`` when the run has a
    chat template, else nothing."""
    path = run_dir / TEMPLATE_FILE
    return {"chat_template": path.read_text(encoding="utf-8")} if path.is_file() else {}


def write_lm_folder(
    run_dir: Path,
    run: RunConfig,
    out: Path,
    hf_config: Mapping[str, Any],
    state_to_hf: Callable[[Mapping[str, Tensor], ModelConfig], dict[str, Tensor]],
    tokenizer: LMTokenizer,
) -> None:
    """Write the weights of the ``lm`` run ``run_dir`` (GPT-2's, Llama's family) into the folder
    ``out`` as ``state_to_hf`` names them, with ``hf_config`` as ``config.json`` and the run's
    ``tokenizer.json``; the family writes its tokenizer settings beside them."""
    model = GPT(run.model)
    RunDir(run_dir).load_weights(model)
    write_json(out / RunDir.CONFIG, hf_config)
    write_safetensors(out / RunDir.WEIGHTS, state_to_hf(model.state_dict(), run.model))
    write_file(out / LM_TOKENIZER, tokenizer.tokenizer.to_str(pretty=True).encode("utf-8"))


def split_qkv(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """``state`` with each layer's fused ``qkv_proj`` split into ``q_proj``, ``k_proj`` and
    ``v_proj`` (rows d_model, d_kv, d_kv: the key/value heads of ``cfg``), in place of it."""
    d_kv = (cfg.n_kv_heads or cfg.n_heads) * (cfg.d_model // cfg.n_heads)
    split: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if ".self_attn.qkv_proj." in name:
            for part, chunk in zip("qkv", tensor.split([cfg.d_model, d_kv, d_kv]), strict=True):
                split[name.replace(".qkv_proj.", f".{part}_proj.")] = chunk
        else:
            split[name] = tensor
    return split


def read_hf_config(src: Path) -> dict[str, Any]:
    """The ``config.json`` of a Hugging Face model folder, as a mapping."""
    if not src.is_dir():
        raise DataError(f"{src}: no such folder")
    path = src / RunDir.CONFIG
    if not path.is_file():
        raise DataError(f"{src}: no {RunDir.CONFIG}: not a Hugging Face model folder")
    config = read_json(path)
    if not isinstance(config, dict):
        raise DataError(f"{path}: expected a JSON object")
    return config


def read_hf_weights(src: Path) -> tuple[dict[str, Tensor], Path]:
    """The tensors of a Hugging Face model folder and the file they came from.

    ``model.safetensors`` is preferred; ``pytorch_model.bin`` is read with
    ``torch.load(weights_only=True)``, which refuses anything but plain tensor data, so that
    a file carrying code is never run.
    """
    path = src / RunDir.WEIGHTS
    if path.is_file():
        try:
            return load_file(str(path)), path
        except Exception as exc:  # safetensors raises its own error types on foreign or corrupt files
            raise DataError(f"{path}: not a readable safetensors file ({first_line(exc)})") from None
    path = src / PICKLED
    if not path.is_file():
        raise DataError(f"{src}: no weights ({RunDir.WEIGHTS} or {PICKLED})")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise DataError(f"{path}: refused: not plain tensor data (loading it could run code)") from None
    except Exception as exc:  # a truncated or foreign file
        raise DataError(f"{path}: unreadable ({first_line(exc)})") from None
    if not isinstance(loaded, dict) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in loaded.items()
    ):
        raise DataError(f"{path}: expected a mapping of tensor names to tensors")
    return loaded, path


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    write_file(path, json_text(payload, ensure_ascii=False).encode("utf-8"))


def write_safetensors(path: Path, tensors: Mapping[str, Tensor]) -> None:
    """Contiguous, unshared ``tensors`` as safetensors with ``{"format": "pt"}`` metadata, the
    marker that ``transformers`` expects of PyTorch weights."""
    write_file(path, save(dict(tensors), metadata={"format": "pt"}))


@contextmanager
def new_folder(out: Path) -> Iterator[Path]:
    """A temporary folder beside ``out``, renamed to ``out`` when the block succeeds and removed
    when it fails, so that ``out`` appears complete or not at all.

    An existing ``out`` that is not an empty folder is refused before anything is written, and
    never overwritten (also when it is filled in the meantime).
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunDirError(f"{out}: already exists and is not empty; choose another output folder")
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a crash of a process with the same id
        tmp.mkdir()
    except OSError as exc:
        raise write_error(out, exc) from None
    try:
        yield tmp
        fsync_path(tmp)
        try:
            os.replace(tmp, out)
        except OSError as exc:
            if out.exists():
                raise RunDirError(f"{out}: was filled by someone else meanwhile; nothing written") from None
            raise write_error(out, exc) from None
        fsync_path(out.parent)
    except OSError as exc:
        raise write_error(out, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
