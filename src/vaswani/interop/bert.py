"""BERT checkpoints in Hugging Face's format (``BertModel``, ``BertForMaskedLM``), both ways.

BERT is our :class:`~vaswani.models.bert.Bert`: post-LN blocks with separate q/k/v projections and
biases everywhere, learned positions, segment embeddings and a LayerNorm on the embedding sum,
unscaled embeddings, the [CLS] pooler when the checkpoint has one. The key mapping (:data:`TABLE`,
:data:`POOLER_TABLE` and :data:`HEAD_TABLE`, used in both directions; ``{i}`` is the layer, ``*``
is ``weight`` and ``bias``, nothing is transposed):

================================================  ==========================================
Hugging Face                                      vaswani
================================================  ==========================================
embeddings.word_embeddings.weight                 embed.token.weight
embeddings.position_embeddings.weight             embed.positions.embedding.weight
embeddings.token_type_embeddings.weight           embed.segment.weight
embeddings.LayerNorm.*                            embed.norm.*
encoder.layer.{i}.attention.self.query.*          blocks.layers.{i}.self_attn.q_proj.*
encoder.layer.{i}.attention.self.key.*            blocks.layers.{i}.self_attn.k_proj.*
encoder.layer.{i}.attention.self.value.*          blocks.layers.{i}.self_attn.v_proj.*
encoder.layer.{i}.attention.output.dense.*        blocks.layers.{i}.self_attn.out_proj.*
encoder.layer.{i}.attention.output.LayerNorm.*    blocks.layers.{i}.self_attn_norm.*
encoder.layer.{i}.intermediate.dense.*            blocks.layers.{i}.ffn.linear1.*
encoder.layer.{i}.output.dense.*                  blocks.layers.{i}.ffn.linear2.*
encoder.layer.{i}.output.LayerNorm.*              blocks.layers.{i}.ffn_norm.*
pooler.dense.* (when present)                     pooler.dense.*
cls.predictions.transform.dense.*                 head.dense.*
cls.predictions.transform.LayerNorm.*             head.norm.*
cls.predictions.bias                              head.output.bias
cls.predictions.decoder.weight (untied only)      head.output.weight
cls.predictions.decoder.bias (untied only)        head.output.bias
================================================  ==========================================

The decoder's bias is ``cls.predictions.bias`` in a tied head, which ``decoder.bias`` only aliases.
An untied head (``tie_word_embeddings`` false) of transformers 5 unties the bias too and computes
with ``decoder.bias``: it is read when present, and written beside ``cls.predictions.bias`` (as
its copy, which older versions read).

Run directories: a checkpoint with an MLM head (``cls.predictions.*``, as ``BertForMaskedLM``
and ``BertForPreTraining`` have) becomes a run of task ``mlm`` (:data:`MLM_TASK`), whose model is
:class:`~vaswani.models.bert.MaskedLM` (:class:`Bert` as ``bert.`` plus the head as ``head.``,
Hugging Face's own layout); one without (``BertModel``, such as the sentence-transformers
checkpoint all-MiniLM-L6-v2) becomes a run of task ``encoder`` (:data:`ENCODER_TASK`), whose
model is :class:`Bert` alone, so that a command that needs the head (fill-mask) refuses it by its
task. The ``pooler`` config field records whether the pooler came with the checkpoint. The run's
``tokenizer.json`` is a :class:`~vaswani.tokenizer.WordPieceTokenizer`'s. An ``mlm`` run exports as
``BertForMaskedLM`` (its tensors under ``bert.``), an ``encoder`` run as ``BertModel`` (no prefix).

Keys are read with or without the ``bert.`` prefix; the ``position_ids`` and ``token_type_ids``
buffers, a tied head's ``cls.predictions.decoder.weight`` and ``.bias`` (aliases of the word
embedding and ``cls.predictions.bias``) and ``BertForPreTraining``'s next-sentence head
(``cls.seq_relationship.*``, which vaswani has no use for) are skipped; the ``gamma``/``beta``
names of TensorFlow-era checkpoints read as ``weight``/``bias``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.interop.common import (
    KeyMap,
    expand,
    hf_field,
    read_hf_weights,
    rename,
    write_json,
    write_safetensors,
)
from vaswani.io import first_line, write_file
from vaswani.models.bert import POOLER_KEYS
from vaswani.rundir import RunDir
from vaswani.tasks.bert import ENCODER_TASK, MLM_TASK, TOKENIZER, model_of
from vaswani.tokenizer import WordPieceTokenizer

MODEL_TYPE = "bert"
PREFIX = "bert."
VOCAB = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"

# Hugging Face's module inside a layer → ours; each has a weight and a bias.
LAYER_MODULES = {
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "self_attn_norm",
    "intermediate.dense": "ffn.linear1",
    "output.dense": "ffn.linear2",
    "output.LayerNorm": "ffn_norm",
}
KINDS = ("weight", "bias")
TABLE = (
    KeyMap("embeddings.word_embeddings.weight", "embed.token.weight"),
    KeyMap("embeddings.position_embeddings.weight", "embed.positions.embedding.weight"),
    KeyMap("embeddings.token_type_embeddings.weight", "embed.segment.weight"),
    *(KeyMap(f"embeddings.LayerNorm.{kind}", f"embed.norm.{kind}") for kind in KINDS),
    *(
        KeyMap(f"encoder.layer.{{i}}.{hf}.{kind}", f"blocks.layers.{{i}}.{ours}.{kind}")
        for hf, ours in LAYER_MODULES.items()
        for kind in KINDS
    ),
)
HEAD_BIAS, DECODER_BIAS = "cls.predictions.bias", "cls.predictions.decoder.bias"
POOLER_TABLE = tuple(KeyMap(key, key) for key in POOLER_KEYS)
HEAD_TABLE = (
    *(KeyMap(f"cls.predictions.transform.dense.{kind}", f"head.dense.{kind}") for kind in KINDS),
    *(KeyMap(f"cls.predictions.transform.LayerNorm.{kind}", f"head.norm.{kind}") for kind in KINDS),
    KeyMap(HEAD_BIAS, "head.output.bias"),
)
UNTIED_DECODER = KeyMap("cls.predictions.decoder.weight", "head.output.weight")
HEAD_PREFIX = "cls.predictions."
SKIPPED = re.compile(
    r"(bert\.)?embeddings\.(position_ids|token_type_ids)"  # buffers, not weights
    r"|cls\.seq_relationship\..*"  # BertForPreTraining's next-sentence head
)
OLD_NORM_NAME = re.compile(r"(.*LayerNorm)\.(gamma|beta)")

# Hugging Face activation name → ours (gelu is the exact erf form; gelu_new, gelu_pytorch_tanh and
# gelu_fast its tanh approximation; swish and silu are x · sigmoid(x)), and back.
ACTIVATIONS_FROM_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
ACTIVATIONS_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}

# BertConfig's defaults (BERT-base), for the fields a config.json leaves out.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
    "intermediate_size": 3072, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
    "layer_norm_eps": 1e-12, "pad_token_id": 0, "tie_word_embeddings": True,
    "position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False,
}  # fmt: skip

# Settings whose other values change the computation in a way Bert does not: the value it needs.
REQUIRED = {"position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False}


def _hf_field(hf: Mapping[str, Any], name: str, kind: type) -> Any:
    """``hf[name]`` (or BertConfig's default), refused when it is not a ``kind``."""
    return hf_field(hf, name, kind, HF_DEFAULTS)


def config_from_hf(hf: Mapping[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` of a BERT ``config.json``.

    vocab_size → vocab_size, hidden_size → d_model, num_attention_heads → n_heads,
    intermediate_size → d_ff, num_hidden_layers → n_layers, max_position_embeddings →
    max_len, type_vocab_size → type_vocab_size, hidden_act → activation, layer_norm_eps →
    norm_eps, hidden_dropout_prob → dropout, attention_probs_dropout_prob → attn_dropout,
    pad_token_id → pad_id, tie_word_embeddings → tie_embeddings "output" or "none"; post-LN,
    learned positions, unscaled embeddings and separate q/k/v are BERT's design. The pooler is
    assumed present (:func:`import_folder` corrects it from the weights). A field that Bert
    cannot reproduce (relative ``position_embedding_type``, ``is_decoder``,
    ``add_cross_attention``, another activation) is refused with a :class:`ConfigError` naming it.
    """
    model_type = hf.get("model_type", MODEL_TYPE)
    if model_type != MODEL_TYPE:
        raise ConfigError(f"field 'model_type': expected {MODEL_TYPE!r}, got {model_type!r}")
    for name, needed in REQUIRED.items():
        found = _hf_field(hf, name, type(needed))
        if found != needed:
            raise ConfigError(
                f"field '{name}': {json.dumps(found)} is not supported (only {json.dumps(needed)})"
            )
    names = (
        "vocab_size", "hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers",
        "max_position_embeddings", "type_vocab_size",
    )  # fmt: skip
    sizes = {name: _hf_field(hf, name, int) for name in names}
    for name, value in sizes.items():
        if value < 1:
            raise ConfigError(f"field '{name}': must be >= 1, got {value}")
    if sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise ConfigError(
            f"field 'num_attention_heads': must divide hidden_size={sizes['hidden_size']}, "
            f"got {sizes['num_attention_heads']}"
        )
    activation = _hf_field(hf, "hidden_act", str)
    if activation not in ACTIVATIONS_FROM_HF:
        raise ConfigError(
            f"field 'hidden_act': {activation!r} is not supported; "
            f"supported: {', '.join(ACTIVATIONS_FROM_HF)}"
        )
    rates = {
        name: _hf_field(hf, name, float) for name in ("hidden_dropout_prob", "attention_probs_dropout_prob")
    }
    for name, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ConfigError(f"field '{name}': must be in [0, 1), got {rate}")
    eps = _hf_field(hf, "layer_norm_eps", float)
    if not eps > 0:
        raise ConfigError(f"field 'layer_norm_eps': must be > 0, got {eps}")
    pad_id = 0 if hf.get("pad_token_id", 0) is None else _hf_field(hf, "pad_token_id", int)
    if not 0 <= pad_id < sizes["vocab_size"]:
        raise ConfigError(f"field 'pad_token_id': must be a token id, got {pad_id}")
    return ModelConfig(
        arch="encoder_only",
        vocab_size=sizes["vocab_size"],
        d_model=sizes["hidden_size"],
        n_heads=sizes["num_attention_heads"],
        d_ff=sizes["intermediate_size"],
        n_layers=sizes["num_hidden_layers"],
        dropout=float(rates["hidden_dropout_prob"]),
        attn_dropout=float(rates["attention_probs_dropout_prob"]),
        activation=ACTIVATIONS_FROM_HF[activation],
        norm="layernorm",
        norm_placement="post",
        norm_eps=float(eps),
        position="learned",
        max_len=sizes["max_position_embeddings"],
        fused_qkv=False,
        bias=True,
        scale_embeddings=False,
        tie_embeddings="output" if _hf_field(hf, "tie_word_embeddings", bool) else "none",
        pad_id=pad_id,
        type_vocab_size=sizes["type_vocab_size"],
        pooler=True,
    )


def check_expressible(cfg: ModelConfig) -> None:
    """Refuse, naming the field, a config that BERT cannot express. Sizes, dropout, activation,
    eps, ties, the pooler and fused q/k/v are free; everything else must be BERT's."""
    needed = {
        "arch": "encoder_only", "norm": "layernorm", "norm_placement": "post", "position": "learned",
        "attn_window": None, "bias": True, "scale_embeddings": False,
    }  # fmt: skip
    for name, value in needed.items():
        found = getattr(cfg, name)
        if found != value:
            raise ConfigError(
                f"config field 'model.{name}': BERT needs {json.dumps(value)}, got {json.dumps(found)}"
            )
    if cfg.type_vocab_size < 1:
        raise ConfigError("config field 'model.type_vocab_size': BERT needs segment embeddings (>= 1), got 0")


def config_to_hf(cfg: ModelConfig, mlm_head: bool) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` as a ``BertForMaskedLM`` (``mlm_head``) or a ``BertModel``
    (the inverse of :func:`config_from_hf`)."""
    check_expressible(cfg)
    return {
        "model_type": MODEL_TYPE,
        "architectures": ["BertForMaskedLM" if mlm_head else "BertModel"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.d_ff,
        "hidden_act": ACTIVATIONS_TO_HF[cfg.activation],
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attn_dropout,
        "max_position_embeddings": cfg.max_len,
        "type_vocab_size": cfg.type_vocab_size,
        "layer_norm_eps": cfg.norm_eps,
        "initializer_range": 0.02,
        "pad_token_id": cfg.pad_id,
        "tie_word_embeddings": cfg.tie_embeddings != "none",
        **REQUIRED,
    }


def task_of(mlm_head: bool) -> str:
    """The task of a BERT run: ``mlm`` with the MLM head, ``encoder`` without."""
    return MLM_TASK if mlm_head else ENCODER_TASK


def _rows(cfg: ModelConfig, mlm_head: bool) -> list[KeyMap]:
    """The table for ``cfg``: with the MLM head, the encoder's rows carry ``bert.`` on both sides."""
    rows = expand(TABLE, cfg.n_layers) + (list(POOLER_TABLE) if cfg.pooler else [])
    if not mlm_head:
        return rows
    head = [*HEAD_TABLE, UNTIED_DECODER] if cfg.tie_embeddings == "none" else list(HEAD_TABLE)
    return [KeyMap(PREFIX + row.hf, PREFIX + row.ours) for row in rows] + head


def _our_shapes(cfg: ModelConfig, mlm_head: bool) -> dict[str, tuple[int, ...]]:
    """The shape of each of our tensors for ``cfg`` with separate q/k/v (on the meta device: no memory)."""
    with torch.device("meta"):
        model = model_of(RunConfig(task_of(mlm_head), cfg.replace(fused_qkv=False)))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def has_mlm_head(tensors: Mapping[str, Tensor]) -> bool:
    """Whether Hugging Face ``tensors`` hold an MLM head (``cls.predictions.*``)."""
    return any(name.startswith(HEAD_PREFIX) for name in tensors)


def has_pooler(tensors: Mapping[str, Tensor]) -> bool:
    """Whether Hugging Face ``tensors`` hold the [CLS] pooler."""
    return any(name.removeprefix(PREFIX).startswith("pooler.") for name in tensors)


def state_from_hf(tensors: Mapping[str, Tensor], cfg: ModelConfig, mlm_head: bool) -> dict[str, Tensor]:
    """Our state dict (for ``model_of(run).load_state_dict(..., strict=True)``) of BERT
    tensors, named with or without ``bert.``, by the tables. A missing, unexpected or misshapen
    tensor is a :class:`DataError` naming it; the buffers and aliases of the module docstring are
    skipped, and an untied head's bias is ``cls.predictions.decoder.bias`` when it is there. With a
    tied head ``head.output.weight`` is the word embedding itself."""
    check_expressible(cfg)
    if cfg.fused_qkv:
        raise ConfigError("config field 'model.fused_qkv': BERT weights load into separate q/k/v; got true")
    tied = cfg.tie_embeddings != "none"
    named: dict[str, Tensor] = {}
    for name, tensor in tensors.items():
        if SKIPPED.fullmatch(name) or (tied and name in (UNTIED_DECODER.hf, DECODER_BIAS)):
            continue
        if name == DECODER_BIAS:  # untied: the bias the decoder computes with
            name = HEAD_BIAS
        elif name == HEAD_BIAS and DECODER_BIAS in tensors and not tied:
            continue
        old = OLD_NORM_NAME.fullmatch(name)
        if old:
            name = f"{old[1]}.{'weight' if old[2] == 'gamma' else 'bias'}"
        if not name.startswith(HEAD_PREFIX):
            name = name.removeprefix(PREFIX)
            name = PREFIX + name if mlm_head else name
        named[name] = tensor
    state = rename(named, _rows(cfg, mlm_head), to_ours=True, our_shapes=_our_shapes(cfg, mlm_head))
    if mlm_head and tied:
        state[UNTIED_DECODER.ours] = state[PREFIX + "embed.token.weight"]
    return state


def _split_qkv(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Each fused ``qkv_proj`` split into BERT's separate ``q_proj``, ``k_proj`` and ``v_proj``."""
    split: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if ".self_attn.qkv_proj." in name:
            for part, chunk in zip("qkv", tensor.chunk(3), strict=True):
                split[name.replace(".qkv_proj.", f".{part}_proj.")] = chunk
        else:
            split[name] = tensor
    return split


def state_to_hf(state: Mapping[str, Tensor], cfg: ModelConfig, mlm_head: bool) -> dict[str, Tensor]:
    """BERT tensors (``BertForMaskedLM`` names with ``mlm_head``, ``BertModel`` names without;
    contiguous, unshared, safetensors-ready) of our state dict: fused projections are split and a
    tied decoder left out, as ``save_pretrained`` does."""
    check_expressible(cfg)
    state = _split_qkv(state) if cfg.fused_qkv else dict(state)
    if cfg.tie_embeddings != "none":
        state.pop(UNTIED_DECODER.ours, None)
    hf = rename(state, _rows(cfg, mlm_head), to_ours=False, our_shapes=_our_shapes(cfg, mlm_head))
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
        try:
            settings = json.loads(config_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise DataError(f"{config_path}: not valid JSON ({first_line(exc)})") from None
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
    try:
        cfg = config_from_hf(hf_config)
    except ConfigError as exc:
        raise ConfigError(f"{src / RunDir.CONFIG}: {exc}") from None
    tensors, weights_path = read_hf_weights(src)
    mlm_head = has_mlm_head(tensors)
    cfg = cfg.replace(pooler=has_pooler(tensors))
    tokenizer, tokenizer_path = read_tokenizer(src, cfg.max_len)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise DataError(
            f"{tokenizer_path}: vocabulary of {tokenizer.vocab_size} does not fit the model's "
            f"vocab_size of {cfg.vocab_size}"
        )
    if cfg.pad_id != tokenizer.pad_id:
        raise ConfigError(
            f"{src / RunDir.CONFIG}: field 'pad_token_id': {cfg.pad_id}, but the tokenizer's [PAD] is "
            f"{tokenizer.pad_id}"
        )
    try:
        state = state_from_hf(tensors, cfg, mlm_head)
    except DataError as exc:
        raise DataError(f"{weights_path}: {exc}") from None
    data = TextData(source="default", vocab_size=tokenizer.vocab_size)
    run = RunConfig(task_of(mlm_head), cfg, TrainConfig(), data)
    model = model_of(run)
    model.load_state_dict(state, strict=True)
    folder = RunDir(out)
    folder.write_config(run)
    folder.save_weights(model)
    write_file(out / TOKENIZER, tokenizer.to_json())


def export_run(run_dir: Path, run: RunConfig, out: Path) -> None:
    """Write a Hugging Face BERT folder into ``out`` from the ``mlm`` or ``encoder`` run
    ``run_dir``: ``config.json``, ``model.safetensors`` (``BertForMaskedLM`` or ``BertModel``),
    ``tokenizer.json``, ``vocab.txt`` and ``tokenizer_config.json``. An ``encoder`` run without a
    pooler loads into ``BertModel`` with a freshly initialised pooler (its hidden states are the
    run's); a pooler in an ``mlm`` run is written too (``BertModel`` reads it, ``BertForMaskedLM``
    ignores it)."""
    tokenizer = WordPieceTokenizer.load(run_dir / TOKENIZER, run.model.max_len)
    mlm_head = run.task == MLM_TASK
    try:
        hf_config = config_to_hf(run.model, mlm_head)
    except ConfigError as exc:
        raise ConfigError(f"{run_dir / RunDir.CONFIG}: {exc}") from None
    if run.model.pad_id != tokenizer.pad_id:
        raise ConfigError(
            f"{run_dir / RunDir.CONFIG}: config field 'model.pad_id': {run.model.pad_id}, but the "
            f"tokenizer's [PAD] is {tokenizer.pad_id}"
        )
    model = RunDir(run_dir).load_weights(model_of(run))
    write_json(out / RunDir.CONFIG, hf_config)
    write_safetensors(out / RunDir.WEIGHTS, state_to_hf(model.state_dict(), run.model, mlm_head))
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
