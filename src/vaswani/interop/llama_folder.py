"""Llama model folders (``LlamaForCausalLM``) read into ``lm`` run directories and written from them.

The configs and the key table are :mod:`vaswani.interop.llama`'s. The tokenizer is the folder's
``tokenizer.json``, read as it is by Hugging Face's ``tokenizers`` (Llama 3's byte-level BPE,
Llama 2's and TinyLlama's SentencePiece-style BPE with byte fallback); the ids of BOS and EOS
come from ``config.json``. The run keeps their tokens (``data.bos_token``, ``data.eos_token``):
EOS ends generation, and BOS starts every text when the tokenizer's own post-processor puts it
there, as Llama's does (so that ``vaswani generate`` reads a prompt as ``AutoTokenizer`` encodes it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from vaswani.config import RunConfig
from vaswani.data.config import LMData, TextData
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.interop import fields
from vaswani.interop.common import (
    TOKENIZER_CONFIG,
    chat_template_setting,
    naming,
    write_json,
    write_lm_folder,
    write_lm_run,
)
from vaswani.interop.llama import CONFIG_TABLE, config_from_hf, config_to_hf, state_from_hf, state_to_hf
from vaswani.io import first_line
from vaswani.pipelines.lm import TASK, TOKENIZER
from vaswani.pipelines.lm_text import run_tokenizer
from vaswani.rundir import RunDir
from vaswani.tokenizer import LM_UNK, LMTokenizer

# LlamaConfig's special ids, for a config.json that leaves them out.
DEFAULT_IDS = {"bos_token_id": 1, "eos_token_id": 2}


def special_token(tokenizer: Tokenizer, hf: Mapping[str, Any], name: str, vocab_size: int) -> str | None:
    """The token of the config's ``name`` (``bos_token_id``, ``eos_token_id``; of a list of ids,
    the first: generation ends at one EOS here); None when the config sets it to null. An id that
    is no integer, or not below the model's ``vocab_size``, is refused naming the field."""
    value = hf.get(name, DEFAULT_IDS[name])
    if isinstance(value, list) and value:
        value = value[0]
    if value is None:
        return None
    value = fields.of_kind(name, value, int)
    if not 0 <= value < vocab_size:
        raise ConfigError(f"field '{name}': must be a token id in [0, vocab_size={vocab_size}), got {value}")
    token = tokenizer.id_to_token(value)
    if token is None:
        raise DataError(f"field '{name}': id {value} is not a token of {TOKENIZER}")
    return token


def prepends(tokenizer: Tokenizer, token: str) -> bool:
    """Whether the post-processor of ``tokenizer`` starts every text with ``token``."""
    token_id = tokenizer.token_to_id(token)
    plain = tokenizer.encode("a", add_special_tokens=False).ids
    processed = tokenizer.encode("a", add_special_tokens=True).ids
    return processed[:1] == [token_id] and plain[:1] != [token_id]


def read_tokenizer(src: Path, hf: Mapping[str, Any], vocab_size: int) -> LMTokenizer:
    """The ``tokenizer.json`` of a Llama folder, as it is (truncation and padding dropped), with
    the config's EOS and, when the tokenizer prepends it, BOS (ids of the model's ``vocab_size``)."""
    path = src / TOKENIZER
    if not path.is_file():
        raise DataError(
            f"{src}: no {TOKENIZER} (a folder with only tokenizer.model: save its LlamaTokenizerFast "
            "with transformers first)"
        )
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise DataError(f"{path}: not a readable tokenizer ({first_line(exc)})") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    with naming(src / RunDir.CONFIG, ConfigError, DataError):
        eos = special_token(tokenizer, hf, "eos_token_id", vocab_size)
        if eos is None:
            raise ConfigError("field 'eos_token_id': a language model needs one, got null")
        bos = special_token(tokenizer, hf, "bos_token_id", vocab_size)
    try:
        return LMTokenizer(tokenizer, eos, bos if bos is not None and prepends(tokenizer, bos) else None)
    except RunDirError as exc:  # two tokens of one id
        raise DataError(f"{path}: {exc}") from None


def import_folder(src: Path, hf_config: Mapping[str, Any], out: Path) -> None:
    """Write a vaswani ``lm`` run directory into ``out`` from the Llama folder ``src``."""
    with naming(src / RunDir.CONFIG, ConfigError):
        cfg = fields.fitting(config_from_hf(hf_config), CONFIG_TABLE)
    tokenizer = read_tokenizer(src, hf_config, cfg.vocab_size)
    ids = (tokenizer.eos_id, tokenizer.bos_id)
    eos, bos = (None if i is None else tokenizer.tokenizer.id_to_token(i) for i in ids)
    assert eos is not None  # an LMTokenizer always has its EOS
    data = TextData(
        source="default", tokenizer="bpe", vocab_size=tokenizer.vocab_size, eos_token=eos, bos_token=bos
    )
    write_lm_run(src, out, cfg, tokenizer, src / TOKENIZER, state_from_hf, data)


def export_run(run_dir: Path, run: RunConfig, out: Path) -> None:
    """Write a ``LlamaForCausalLM`` folder into ``out`` from the ``lm`` run ``run_dir``:
    ``config.json``, ``model.safetensors``, ``tokenizer.json`` as the run has it and a
    ``tokenizer_config.json`` (``PreTrainedTokenizerFast``, which reads ``tokenizer.json`` as it
    is). BOS is the run's, else its EOS (as GPT-2's exports have it).

    The embedding may be larger than the tokenizer (vaswani pads it to a multiple of 64);
    vaswani never generates the padding ids, a Hugging Face model may.
    """
    data = RunDir(run_dir).read_config(TASK, LMData).data  # export_hf reads the config without it
    assert isinstance(data, TextData)
    try:
        tokenizer = run_tokenizer(run_dir / TOKENIZER, data)
    except RunDirError as exc:
        raise RunDirError(f"{run_dir}: {exc}") from None
    bos_id = tokenizer.eos_id if tokenizer.bos_id is None else tokenizer.bos_id
    with naming(run_dir / RunDir.CONFIG, ConfigError):
        hf_config = config_to_hf(run.model, bos_id, tokenizer.eos_id)
    write_lm_folder(run_dir, run, out, hf_config, state_to_hf, tokenizer)
    names = {"bos_token": bos_id, "eos_token": tokenizer.eos_id}
    settings: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    settings.update({key: tokenizer.tokenizer.id_to_token(i) for key, i in names.items()})
    if tokenizer.tokenizer.token_to_id(LM_UNK) is not None:
        settings["unk_token"] = LM_UNK
    settings.update(chat_template_setting(run_dir))
    write_json(out / TOKENIZER_CONFIG, {**settings, "model_max_length": run.model.max_len})
