"""BERT folders both ways: the weights (through the key tables of :mod:`vaswani.interop.bert`),
the WordPiece tokenizer, ``import-hf`` into an ``mlm`` or ``encoder`` run and ``export-hf`` of one
(the config conversion is :mod:`vaswani.interop.bert`'s).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.interop import fields
from vaswani.interop.bert import (
    CONFIG_TABLE,
    DECODER_BIAS,
    HEAD_BIAS,
    HEAD_PREFIX,
    HEAD_TABLE,
    NSP_PREFIX,
    NSP_TABLE,
    OLD_NORM_NAME,
    POOLER_TABLE,
    PREFIX,
    SKIPPED,
    TABLE,
    UNTIED_DECODER,
    VOCAB,
    check_expressible,
    config_from_hf,
    config_to_hf,
    task_of,
)
from vaswani.interop.common import (
    TOKENIZER_CONFIG,
    KeyMap,
    expand,
    fits_vocabulary,
    naming,
    read_hf_weights,
    rename,
    save_run,
    split_qkv,
    write_json,
    write_safetensors,
)
from vaswani.io import read_json, write_file
from vaswani.pipelines.bert import MLM_TASK, TOKENIZER, model_of
from vaswani.rundir import RunDir
from vaswani.tokenizer import WordPieceTokenizer


def _rows(cfg: ModelConfig, mlm_head: bool, nsp: bool = False) -> list[KeyMap]:
    """The table for ``cfg``: with the MLM head, the encoder's rows carry ``bert.`` on both sides;
    ``nsp`` adds the next-sentence head's."""
    rows = expand(TABLE, cfg.n_layers) + (list(POOLER_TABLE) if cfg.pooler else [])
    if not mlm_head:
        return rows
    head = [*HEAD_TABLE, UNTIED_DECODER] if cfg.tie_embeddings == "none" else list(HEAD_TABLE)
    head += NSP_TABLE if nsp else ()
    return [KeyMap(PREFIX + row.hf, PREFIX + row.ours) for row in rows] + head


def _our_shapes(cfg: ModelConfig, mlm_head: bool, nsp: bool = False) -> dict[str, tuple[int, ...]]:
    """The shape of each of our tensors for ``cfg`` with separate q/k/v (on the meta device: no memory)."""
    with torch.device("meta"):
        run = RunConfig(task_of(mlm_head), cfg.replace(fused_qkv=False), data=TextData(nsp=nsp))
        model = model_of(run)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def has_mlm_head(tensors: Mapping[str, Tensor]) -> bool:
    """Whether Hugging Face ``tensors`` hold an MLM head (``cls.predictions.*``)."""
    return any(name.startswith(HEAD_PREFIX) for name in tensors)


def has_nsp_head(tensors: Mapping[str, Tensor]) -> bool:
    """Whether Hugging Face ``tensors`` hold the next-sentence head (``cls.seq_relationship.*``)."""
    return any(name.startswith(NSP_PREFIX) for name in tensors)


def has_pooler(tensors: Mapping[str, Tensor]) -> bool:
    """Whether Hugging Face ``tensors`` hold the [CLS] pooler."""
    return any(name.removeprefix(PREFIX).startswith("pooler.") for name in tensors)


def state_from_hf(
    tensors: Mapping[str, Tensor], cfg: ModelConfig, mlm_head: bool, nsp: bool = False
) -> dict[str, Tensor]:
    """Our state dict (for ``model_of(run).load_state_dict(..., strict=True)``) of BERT
    tensors, named with or without ``bert.``, by the tables. A missing, unexpected or misshapen
    tensor is a :class:`DataError` naming it; the buffers and aliases of the module docstring are
    skipped (the next-sentence head too unless ``nsp``), and an untied head's bias is
    ``cls.predictions.decoder.bias`` when it is there. With a tied head ``head.output.weight`` is
    the word embedding itself."""
    check_expressible(cfg)
    if cfg.fused_qkv:
        raise ConfigError("config field 'model.fused_qkv': BERT weights load into separate q/k/v; got true")
    tied = cfg.tie_embeddings != "none"
    named: dict[str, Tensor] = {}
    for name, tensor in tensors.items():
        if SKIPPED.fullmatch(name) or (tied and name in (UNTIED_DECODER.hf, DECODER_BIAS)):
            continue
        if name.startswith(NSP_PREFIX) and not nsp:
            continue
        if name == DECODER_BIAS:  # untied: the bias the decoder computes with
            name = HEAD_BIAS
        elif name == HEAD_BIAS and DECODER_BIAS in tensors and not tied:
            continue
        old = OLD_NORM_NAME.fullmatch(name)
        if old:
            name = f"{old[1]}.{'weight' if old[2] == 'gamma' else 'bias'}"
        if not name.startswith((HEAD_PREFIX, NSP_PREFIX)):
            name = name.removeprefix(PREFIX)
            name = PREFIX + name if mlm_head else name
        named[name] = tensor
    rows, shapes = _rows(cfg, mlm_head, nsp), _our_shapes(cfg, mlm_head, nsp)
    state = rename(named, rows, to_ours=True, our_shapes=shapes)
    if mlm_head and tied:
        state[UNTIED_DECODER.ours] = state[PREFIX + "embed.token.weight"]
    return state


def state_to_hf(
    state: Mapping[str, Tensor], cfg: ModelConfig, mlm_head: bool, nsp: bool = False
) -> dict[str, Tensor]:
    """BERT tensors (``BertForMaskedLM`` names with ``mlm_head``, ``BertForPreTraining`` names with
    ``nsp`` too, ``BertModel`` names without; contiguous, unshared, safetensors-ready) of our state
    dict: fused projections are split and a tied decoder left out, as ``save_pretrained`` does."""
    check_expressible(cfg)
    state = split_qkv(state, cfg) if cfg.fused_qkv else dict(state)
    if cfg.tie_embeddings != "none":
        state.pop(UNTIED_DECODER.ours, None)
    rows, shapes = _rows(cfg, mlm_head, nsp), _our_shapes(cfg, mlm_head, nsp)
    hf = rename(state, rows, to_ours=False, our_shapes=shapes)
    if mlm_head and cfg.tie_embeddings == "none":
        hf[DECODER_BIAS] = hf[HEAD_BIAS].clone()
    return hf


def read_tokenizer(src: Path, max_len: int) -> tuple[WordPieceTokenizer, Path]:
    """The tokenizer of a BERT folder and the file it came from: ``tokenizer.json`` as it is (its
    padding dropped, its truncation set to ``max_len``), else ``vocab.txt`` with the
    ``do_lower_case`` and ``strip_accents`` of ``tokenizer_config.json`` (lowercasing when that
    file does not say)."""
    path = src / TOKENIZER
    if path.is_file():
        try:
            return WordPieceTokenizer.load(path, max_len), path
        except RunDirError as exc:  # no such special token, or not a tokenizer file
            raise DataError(str(exc)) from None
    path = src / VOCAB
    if not path.is_file():
        raise DataError(f"{src}: no tokenizer ({TOKENIZER} or {VOCAB}); a run directory needs one")
    settings: dict[str, Any] = {}
    config_path = src / TOKENIZER_CONFIG
    if config_path.is_file():
        settings = read_json(config_path)
    lowercase, strip_accents = settings.get("do_lower_case", True), settings.get("strip_accents")
    if not isinstance(lowercase, bool):
        raise ConfigError(f"{config_path}: field 'do_lower_case': expected bool, got {lowercase!r}")
    if strip_accents is not None and not isinstance(strip_accents, bool):
        raise ConfigError(
            f"{config_path}: field 'strip_accents': expected bool or null, got {strip_accents!r}"
        )
    try:
        return WordPieceTokenizer.from_vocab(path, lowercase, strip_accents, max_len), path
    except RunDirError as exc:
        raise DataError(f"{path}: {exc}") from None


def import_folder(src: Path, hf_config: Mapping[str, Any], out: Path) -> None:
    """Write a vaswani run directory into ``out`` from the BERT folder ``src``: task ``mlm`` when
    the weights hold an MLM head, ``encoder`` when they do not (see the module docstring)."""
    with naming(src / RunDir.CONFIG, ConfigError):
        cfg = fields.fitting(config_from_hf(hf_config), CONFIG_TABLE)
    tensors, weights_path = read_hf_weights(src)
    mlm_head = has_mlm_head(tensors)
    nsp = mlm_head and has_nsp_head(tensors)
    cfg = cfg.replace(pooler=has_pooler(tensors))
    if nsp and not cfg.pooler:
        raise DataError(f"{weights_path}: the next-sentence head (cls.seq_relationship) without the pooler")
    tokenizer, tokenizer_path = read_tokenizer(src, cfg.max_len)
    fits_vocabulary(tokenizer_path, tokenizer.vocab_size, "vocab_size", cfg.vocab_size)
    if cfg.pad_id != tokenizer.pad_id:
        raise ConfigError(
            f"{src / RunDir.CONFIG}: field 'pad_token_id': {cfg.pad_id}, but the tokenizer's [PAD] is "
            f"{tokenizer.pad_id}"
        )
    with naming(weights_path, DataError):
        state = state_from_hf(tensors, cfg, mlm_head, nsp)
    data = TextData(source="default", vocab_size=tokenizer.vocab_size, nsp=nsp)
    run = RunConfig(task_of(mlm_head), cfg, TrainConfig(), data)
    save_run(out, run, model_of(run), state)
    write_file(out / TOKENIZER, tokenizer.to_json())


def export_run(run_dir: Path, run: RunConfig, out: Path) -> None:
    """Write a Hugging Face BERT folder into ``out`` from the ``mlm`` or ``encoder`` run
    ``run_dir``: ``config.json``, ``model.safetensors`` (``BertForMaskedLM`` or ``BertModel``),
    ``tokenizer.json``, ``vocab.txt`` and ``tokenizer_config.json``; ``BertForPreTraining`` for an
    ``mlm`` run with the next-sentence head (``data.nsp``). An ``encoder`` run without a
    pooler loads into ``BertModel`` with a freshly initialised pooler (its hidden states are the
    run's); a pooler in an ``mlm`` run is written too (``BertModel`` reads it, ``BertForMaskedLM``
    ignores it)."""
    tokenizer = WordPieceTokenizer.load(run_dir / TOKENIZER, run.model.max_len)
    mlm_head = run.task == MLM_TASK
    if mlm_head:  # export_hf reads the config without its data section, which says whether it has NSP
        run = RunDir(run_dir).read_config(MLM_TASK, TextData)
    nsp = mlm_head and isinstance(run.data, TextData) and run.data.nsp
    with naming(run_dir / RunDir.CONFIG, ConfigError):
        hf_config = config_to_hf(run.model, mlm_head, nsp)
    if run.model.pad_id != tokenizer.pad_id:
        raise ConfigError(
            f"{run_dir / RunDir.CONFIG}: config field 'model.pad_id': {run.model.pad_id}, but the "
            f"tokenizer's [PAD] is {tokenizer.pad_id}"
        )
    model = RunDir(run_dir).load_weights(model_of(run))
    write_json(out / RunDir.CONFIG, hf_config)
    write_safetensors(out / RunDir.WEIGHTS, state_to_hf(model.state_dict(), run.model, mlm_head, nsp))
    write_file(out / TOKENIZER, tokenizer.to_json())
    write_file(out / VOCAB, tokenizer.vocab_text().encode("utf-8"))
    specials = {
        "unk_token": tokenizer.unk_id, "sep_token": tokenizer.sep_id, "pad_token": tokenizer.pad_id,
        "cls_token": tokenizer.cls_id, "mask_token": tokenizer.mask_id,
    }  # fmt: skip
    write_json(
        out / TOKENIZER_CONFIG,
        {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": tokenizer.lowercase,
            "strip_accents": tokenizer.strip_accents,
            "tokenize_chinese_chars": True,
            **{role: str(tokenizer.tokenizer.id_to_token(token_id)) for role, token_id in specials.items()},
            "model_max_length": run.model.max_len,
        },
    )
