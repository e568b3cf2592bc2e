"""GPT-2 checkpoints in Hugging Face's format (``GPT2LMHeadModel``, ``GPT2Model``), both ways.

GPT-2 is our :class:`~vaswani.models.gpt.GPT` with pre-LN blocks, learned positions, unscaled
embeddings, biases everywhere and a final LayerNorm; its ``c_attn`` holds W_q, W_k, W_v
concatenated on the output dimension, as our fused ``qkv_proj`` does. The key mapping
(:data:`TABLE`, used in both directions; ``{i}`` is the layer, T marks the tensors that GPT-2's
``Conv1D`` stores transposed, as (in, out)):

=========================================  ==============================================  ===
Hugging Face                               vaswani
=========================================  ==============================================  ===
transformer.wte.weight                     embed.token.weight
transformer.wpe.weight                     embed.positions.embedding.weight
transformer.h.{i}.ln_1.weight / .bias      blocks.layers.{i}.self_attn_norm.weight / .bias
transformer.h.{i}.attn.c_attn.weight       blocks.layers.{i}.self_attn.qkv_proj.weight      T
transformer.h.{i}.attn.c_attn.bias         blocks.layers.{i}.self_attn.qkv_proj.bias
transformer.h.{i}.attn.c_proj.weight       blocks.layers.{i}.self_attn.out_proj.weight      T
transformer.h.{i}.attn.c_proj.bias         blocks.layers.{i}.self_attn.out_proj.bias
transformer.h.{i}.ln_2.weight / .bias      blocks.layers.{i}.ffn_norm.weight / .bias
transformer.h.{i}.mlp.c_fc.weight          blocks.layers.{i}.ffn.linear1.weight             T
transformer.h.{i}.mlp.c_fc.bias            blocks.layers.{i}.ffn.linear1.bias
transformer.h.{i}.mlp.c_proj.weight        blocks.layers.{i}.ffn.linear2.weight             T
transformer.h.{i}.mlp.c_proj.bias          blocks.layers.{i}.ffn.linear2.bias
transformer.ln_f.weight / .bias            blocks.final_norm.weight / .bias
lm_head.weight (untied models only)        output.weight
=========================================  ==============================================  ===

A tied head (``tie_word_embeddings``, GPT-2's default) is not stored: Hugging Face's
``save_pretrained`` leaves ``lm_head.weight`` out and ties it on loading, and so do we.
``GPT2Model`` checkpoints name the same tensors without the ``transformer.`` prefix, and older
ones carry the causal-mask buffers ``h.{i}.attn.bias`` / ``.masked_bias``, which are skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from torch import Tensor

from vaswani.config import ModelConfig, RunConfig
from vaswani.data.config import TextData
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.interop import fields
from vaswani.interop.common import (
    TOKENIZER_CONFIG,
    KeyMap,
    chat_template_setting,
    decoder_state_from_hf,
    expand,
    naming,
    rename,
    write_json,
    write_lm_folder,
    write_lm_run,
)
from vaswani.io import first_line, write_file
from vaswani.models.gpt import GPT
from vaswani.pipelines.lm import TOKENIZER
from vaswani.rundir import RunDir
from vaswani.tokenizer import END_OF_TEXT, LM_UNK, LMTokenizer

MODEL_TYPE = "gpt2"
PREFIX = "transformer."
VOCAB, MERGES = "vocab.json", "merges.txt"

# GPT-2's module inside a layer → ours, and whether its weight is stored transposed (Conv1D);
# each has a weight and a bias (never transposed).
LAYER_MODULES = {
    "ln_1": ("self_attn_norm", False),
    "attn.c_attn": ("self_attn.qkv_proj", True),
    "attn.c_proj": ("self_attn.out_proj", True),
    "ln_2": ("ffn_norm", False),
    "mlp.c_fc": ("ffn.linear1", True),
    "mlp.c_proj": ("ffn.linear2", True),
}
KINDS = ("weight", "bias")
TABLE = (
    KeyMap("transformer.wte.weight", "embed.token.weight"),
    KeyMap("transformer.wpe.weight", "embed.positions.embedding.weight"),
    *(
        KeyMap(
            f"transformer.h.{{i}}.{hf}.{kind}",
            f"blocks.layers.{{i}}.{ours}.{kind}",
            conv and kind == "weight",
        )
        for hf, (ours, conv) in LAYER_MODULES.items()
        for kind in KINDS
    ),
    *(KeyMap(f"transformer.ln_f.{kind}", f"blocks.final_norm.{kind}") for kind in KINDS),
)
UNTIED_HEAD = KeyMap("lm_head.weight", "output.weight")
MASK_BUFFER = re.compile(r"(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)")

# Hugging Face activation names → ours, and back.
ACTIVATIONS_FROM_HF = fields.activations("gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu", "relu")
ACTIVATIONS_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}

# The config mapping, used in both directions, with GPT2Config's defaults (GPT-2 small) for the
# fields a config.json leaves out; n_inner left out (or null) is 4 · n_embd. The flags at the end
# change the computation in a way our GPT does not when they have another value: they are refused.
CONFIG_TABLE = (
    fields.size("vocab_size", "vocab_size", 50257),
    fields.size("n_positions", "max_len", 1024),
    fields.size("n_embd", "d_model", 768),
    fields.size("n_layer", "n_layers", 12),
    fields.Field("n_head", "n_heads", int, 12, (fields.at_least_one, fields.divides("n_embd"))),
    fields.Field("n_inner", "d_ff", int, None, fields.SIZE, optional=True),
    fields.Field(
        "activation_function", "activation", str, "gelu_new", (), ACTIVATIONS_FROM_HF, ACTIVATIONS_TO_HF
    ),
    fields.rate("resid_pdrop", "dropout", 0.1),
    fields.Field("embd_pdrop", "dropout", float, 0.1, imported=False),  # not kept apart from resid_pdrop
    fields.rate("attn_pdrop", "attn_dropout", 0.1),
    fields.Field("layer_norm_epsilon", "norm_eps", float, 1e-5, (fields.positive,)),
    fields.constant("initializer_range", 0.02),
    fields.tied_head(True),
    fields.required("scale_attn_weights", True),
    fields.required("scale_attn_by_inverse_layer_idx", False),
    fields.required("reorder_and_upcast_attn", False),
    fields.required("add_cross_attention", False),
    fields.constant("use_cache", True),
)

# GPT-2's design, which our config leaves free: given to an imported config, required of an exported one.
DESIGN = {
    "arch": "decoder_only", "norm": "layernorm", "norm_placement": "pre", "position": "learned",
    "attn_window": None, "bias": True, "scale_embeddings": False, "output_bias": False, "ffn": "plain",
}  # fmt: skip


def config_from_hf(hf: Mapping[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` of a GPT-2 ``config.json``, by :data:`CONFIG_TABLE`.

    n_embd → d_model, n_head → n_heads, n_layer → n_layers, n_inner (or 4 · n_embd)
    → d_ff, n_positions → max_len, vocab_size → vocab_size, activation_function →
    activation, layer_norm_epsilon → norm_eps, resid_pdrop → dropout (embd_pdrop is not kept
    apart), attn_pdrop → attn_dropout, tie_word_embeddings → tie_embeddings "output" or "none";
    pre-LN, learned positions, unscaled embeddings and fused q/k/v are GPT-2's design. A field
    our GPT cannot reproduce is refused with a :class:`ConfigError` naming it.
    """
    ours, _ = fields.from_hf(hf, MODEL_TYPE, CONFIG_TABLE)
    if ours["d_ff"] is None:
        ours["d_ff"] = 4 * ours["d_model"]
    return ModelConfig(**DESIGN, **ours, fused_qkv=True)


def check_expressible(cfg: ModelConfig) -> None:
    """Refuse, naming the field, a config that GPT-2 cannot express. ``fused_qkv`` and the
    activation among relu, gelu and gelu_tanh are free; everything else must be GPT-2's."""
    fields.refuse_grouped_heads(cfg, "GPT-2")
    fields.require(cfg, "GPT-2", DESIGN)
    if cfg.activation not in ACTIVATIONS_TO_HF:
        raise ConfigError(
            f"config field 'model.activation': GPT-2 has {', '.join(ACTIVATIONS_TO_HF)}, "
            f"got {cfg.activation!r}"
        )


def config_to_hf(cfg: ModelConfig, eos_id: int | None = None) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` as a ``GPT2LMHeadModel`` (the inverse of
    :func:`config_from_hf`, by :data:`CONFIG_TABLE`); ``eos_id`` becomes its BOS and EOS token id."""
    check_expressible(cfg)
    hf = fields.to_hf(cfg, MODEL_TYPE, "GPT2LMHeadModel", CONFIG_TABLE)
    if eos_id is not None:
        hf["bos_token_id"] = hf["eos_token_id"] = eos_id
    return hf


def _rows(cfg: ModelConfig) -> list[KeyMap]:
    rows = expand(TABLE, cfg.n_layers)
    return rows if cfg.tie_embeddings != "none" else [*rows, UNTIED_HEAD]


def _our_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The shape of each of our tensors for ``cfg`` with fused q/k/v (on the meta device: no memory)."""
    with torch.device("meta"):
        model = GPT(cfg.replace(fused_qkv=True))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def state_from_hf(tensors: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Our state dict (for ``GPT(cfg).load_state_dict(..., strict=True)``) of GPT-2 tensors,
    by :data:`CONFIG_TABLE`. A missing, unexpected or misshapen tensor is a :class:`DataError` naming
    it. With a tied head ``output.weight`` is the token embedding itself (any stored
    ``lm_head.weight`` is ignored, as Hugging Face does)."""
    check_expressible(cfg)
    if not cfg.fused_qkv:
        raise ConfigError("config field 'model.fused_qkv': GPT-2 weights load into fused q/k/v; got false")
    return decoder_state_from_hf(tensors, cfg, _rows(cfg), _our_shapes(cfg), PREFIX, UNTIED_HEAD, MASK_BUFFER)


def _fuse_qkv(state: Mapping[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """``q_proj``, ``k_proj`` and ``v_proj`` of each layer concatenated into ``qkv_proj``."""
    fused = dict(state)
    for i in range(n_layers):
        prefix = f"blocks.layers.{i}.self_attn."
        for kind in ("weight", "bias"):
            names = [f"{prefix}{part}_proj.{kind}" for part in "qkv"]
            missing = [name for name in names if name not in fused]
            if missing:
                raise DataError(f"tensor '{missing[0]}' is missing")
            fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([fused.pop(name) for name in names])
    return fused


def state_to_hf(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """GPT-2 tensors (``GPT2LMHeadModel`` names, contiguous, safetensors-ready) of our state
    dict, by :data:`CONFIG_TABLE`. Separate q/k/v projections are fused; a tied head is left out
    (with or without ``output.weight`` in ``state``), as ``save_pretrained`` does."""
    check_expressible(cfg)
    state = dict(state)
    if cfg.tie_embeddings != "none":
        state.pop(UNTIED_HEAD.ours, None)
    if not cfg.fused_qkv:
        state = _fuse_qkv(state, cfg.n_layers)
    return rename(state, _rows(cfg), to_ours=False, our_shapes=_our_shapes(cfg))


def is_byte_level_bpe(tokenizer: Tokenizer) -> bool:
    """Whether ``tokenizer`` is GPT-2's kind: BPE over a byte-level pre-tokenizer."""
    return isinstance(tokenizer.model, models.BPE) and isinstance(
        tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel
    )


def byte_level_bpe(vocab: Path, merges: Path) -> Tokenizer:
    """GPT-2's tokenizer from its ``vocab.json`` and ``merges.txt``: byte-level pre-tokenizer
    without a prefix space, BPE, byte-level decoder, ``<|endoftext|>`` special when present."""
    tokenizer = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    if tokenizer.token_to_id(END_OF_TEXT) is not None:
        tokenizer.add_special_tokens([END_OF_TEXT])
    return tokenizer


def read_tokenizer(src: Path) -> tuple[LMTokenizer, Path]:
    """The tokenizer of a GPT-2 folder and the file it came from: ``tokenizer.json`` as it is,
    else :func:`byte_level_bpe` of ``vocab.json`` and ``merges.txt``. Truncation and padding
    settings are dropped (a run's tokenizer encodes whole texts)."""
    path = src / TOKENIZER
    if not path.is_file() and not ((src / VOCAB).is_file() and (src / MERGES).is_file()):
        raise DataError(
            f"{src}: no tokenizer ({TOKENIZER}, or {VOCAB} and {MERGES}); a run directory needs one"
        )
    try:
        if path.is_file():
            tokenizer = Tokenizer.from_file(str(path))
        else:
            path = src / VOCAB
            tokenizer = byte_level_bpe(path, src / MERGES)
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise DataError(f"{path}: not a readable tokenizer ({first_line(exc)})") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    try:
        return LMTokenizer(tokenizer), path
    except RunDirError as exc:  # no <|endoftext|>
        raise DataError(f"{path}: {exc}") from None


def import_folder(src: Path, hf_config: Mapping[str, Any], out: Path) -> None:
    """Write a vaswani ``lm`` run directory into ``out`` from the GPT-2 folder ``src``."""
    with naming(src / RunDir.CONFIG, ConfigError):
        cfg = fields.fitting(config_from_hf(hf_config), CONFIG_TABLE)
    tokenizer, tokenizer_path = read_tokenizer(src)
    data = TextData(source="default", tokenizer="bpe", vocab_size=tokenizer.vocab_size)
    write_lm_run(src, out, cfg, tokenizer, tokenizer_path, state_from_hf, data)


def export_run(run_dir: Path, run: RunConfig, out: Path) -> None:
    """Write a ``GPT2LMHeadModel`` folder into ``out`` from the ``lm`` run ``run_dir``:
    ``config.json``, ``model.safetensors``, ``tokenizer.json`` with a ``tokenizer_config.json``
    and, for byte-level BPE, GPT-2's ``vocab.json`` and ``merges.txt``.

    The embedding may be larger than the tokenizer (vaswani pads it to a multiple of 64);
    vaswani never generates the padding ids, a Hugging Face model may.
    """
    tokenizer = LMTokenizer.load(run_dir / TOKENIZER)
    with naming(run_dir / RunDir.CONFIG, ConfigError):
        hf_config = config_to_hf(run.model, tokenizer.eos_id)
    write_lm_folder(run_dir, run, out, hf_config, state_to_hf, tokenizer)
    byte_level = is_byte_level_bpe(tokenizer.tokenizer)
    unk = END_OF_TEXT if byte_level or tokenizer.tokenizer.token_to_id(LM_UNK) is None else LM_UNK
    write_json(
        out / TOKENIZER_CONFIG,
        {
            "tokenizer_class": "GPT2Tokenizer" if byte_level else "PreTrainedTokenizerFast",
            "bos_token": END_OF_TEXT,
            "eos_token": END_OF_TEXT,
            "unk_token": unk,
            "add_prefix_space": False,
            "model_max_length": run.model.max_len,
            **chat_template_setting(run_dir),
        },
    )
    if byte_level:
        bpe = json.loads(tokenizer.tokenizer.to_str())["model"]
        write_json(out / VOCAB, bpe["vocab"])
        merges = [m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]]
        write_file(out / MERGES, "".join(f"{m}\n" for m in ["#version: 0.2", *merges]).encode("utf-8"))
