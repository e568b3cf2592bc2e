"""Llama checkpoints in Hugging Face's format (``LlamaForCausalLM``), both ways: configs and weights.

Llama is our :class:`~vaswani.models.gpt.GPT` with pre-RMSNorm blocks, rotary positions in the
half-split layout (Hugging Face's ``rotate_half``: ``position: rope``), the SwiGLU feed-forward
(``ffn: gated``, ``activation: silu``), no biases, unscaled embeddings, grouped-query attention
(``num_key_value_heads`` → ``n_kv_heads``) and a final RMSNorm. The key mapping (:data:`TABLE`,
used in both directions; ``{i}`` is the layer; nothing is transposed):

==============================================  ==============================================
Hugging Face                                    vaswani
==============================================  ==============================================
model.embed_tokens.weight                       embed.token.weight
model.layers.{i}.input_layernorm.weight         blocks.layers.{i}.self_attn_norm.weight
model.layers.{i}.self_attn.q_proj.weight        blocks.layers.{i}.self_attn.q_proj.weight
model.layers.{i}.self_attn.k_proj.weight        blocks.layers.{i}.self_attn.k_proj.weight
model.layers.{i}.self_attn.v_proj.weight        blocks.layers.{i}.self_attn.v_proj.weight
model.layers.{i}.self_attn.o_proj.weight        blocks.layers.{i}.self_attn.out_proj.weight
model.layers.{i}.post_attention_layernorm.w…    blocks.layers.{i}.ffn_norm.weight
model.layers.{i}.mlp.gate_proj.weight           blocks.layers.{i}.ffn.gate_proj.weight
model.layers.{i}.mlp.up_proj.weight             blocks.layers.{i}.ffn.up_proj.weight
model.layers.{i}.mlp.down_proj.weight           blocks.layers.{i}.ffn.down_proj.weight
model.norm.weight                               blocks.final_norm.weight
lm_head.weight (untied models only)             output.weight
==============================================  ==============================================

With ``attention_bias`` and ``mlp_bias`` (both, or neither: our ``bias`` is one field) each
projection's ``.bias`` maps the same way. A tied head (``tie_word_embeddings``) is not stored, as
``save_pretrained`` leaves it out. ``LlamaModel`` checkpoints name the tensors without ``model.``,
and older ones carry ``rotary_emb.inv_freq`` buffers, which are skipped. A run with
``rope_interleaved`` (the paper's pairs (2i, 2i+1)) is exported with the rows of each query and
key head permuted to the half-split layout (pairs (i, i + d/2)), which gives the same scores:
Meta's own conversion script does this permutation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.interop import fields
from vaswani.interop.common import KeyMap, decoder_state_from_hf, expand, rename, split_qkv
from vaswani.models.gpt import GPT

MODEL_TYPE = "llama"
PREFIX = "model."

TABLE = (
    KeyMap("model.embed_tokens.weight", "embed.token.weight"),
    KeyMap("model.layers.{i}.input_layernorm.weight", "blocks.layers.{i}.self_attn_norm.weight"),
    KeyMap("model.layers.{i}.post_attention_layernorm.weight", "blocks.layers.{i}.ffn_norm.weight"),
    KeyMap("model.norm.weight", "blocks.final_norm.weight"),
)
PROJECTIONS = (
    ("self_attn.q_proj", "self_attn.q_proj"),
    ("self_attn.k_proj", "self_attn.k_proj"),
    ("self_attn.v_proj", "self_attn.v_proj"),
    ("self_attn.o_proj", "self_attn.out_proj"),
    ("mlp.gate_proj", "ffn.gate_proj"),
    ("mlp.up_proj", "ffn.up_proj"),
    ("mlp.down_proj", "ffn.down_proj"),
)
UNTIED_HEAD = KeyMap("lm_head.weight", "output.weight")
ROTARY_BUFFER = re.compile(r"(model\.)?layers\.\d+\.self_attn\.rotary_emb\.inv_freq")

# Hugging Face activation names (hidden_act) → ours, and back.
ACTIVATIONS_FROM_HF = fields.activations("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "relu")
ACTIVATIONS_TO_HF = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
DEFAULT_ROPE = "default"


def _even_heads(name: str, heads: int, read: Mapping[str, Any]) -> None:
    """Refuse heads of an odd width: rotary positions turn pairs of features."""
    d_head = read["hidden_size"] // heads
    if d_head % 2:
        raise ConfigError(f"field '{name}': rotary positions need an even head dimension, got {d_head}")


def _our_head_width(name: str, head_dim: int, read: Mapping[str, Any]) -> None:
    """Refuse a ``head_dim`` other than hidden_size / num_attention_heads, the only one we have."""
    d_head = read["hidden_size"] // read["num_attention_heads"]
    if head_dim != d_head:
        raise ConfigError(
            f"field '{name}': our attention's heads are hidden_size / num_attention_heads = {d_head} "
            f"wide, got {head_dim}"
        )


def _one_bias(name: str, mlp_bias: bool, read: Mapping[str, Any]) -> None:
    """Refuse an ``mlp_bias`` other than ``attention_bias``: our ``bias`` is both."""
    attention_bias = read["attention_bias"]
    if mlp_bias != attention_bias:
        raise ConfigError(
            f"field '{name}': {str(mlp_bias).lower()} with attention_bias {str(attention_bias).lower()} "
            "is not supported (our bias field covers both)"
        )


# The config mapping, used in both directions, with LlamaConfig's defaults (Llama 2 7B) for the
# fields a config.json leaves out: num_key_value_heads left out (or null) is num_attention_heads,
# head_dim hidden_size / num_attention_heads. rope_theta is the top level's unless rope_parameters
# or rope_scaling hold one (rope_settings); transformers 4 reads the top level, 5 rope_parameters.
CONFIG_TABLE = (
    fields.size("vocab_size", "vocab_size", 32000),
    fields.size("hidden_size", "d_model", 4096),
    fields.size("intermediate_size", "d_ff", 11008),
    fields.size("num_hidden_layers", "n_layers", 32),
    fields.Field(
        "num_attention_heads",
        "n_heads",
        int,
        32,
        (fields.at_least_one, fields.divides("hidden_size"), _even_heads),
    ),
    fields.Field(
        "num_key_value_heads",
        "n_kv_heads",
        int,
        None,
        (fields.at_least_one, fields.divides("num_attention_heads")),
        to_hf=lambda cfg: cfg.n_kv_heads or cfg.n_heads,
        optional=True,
    ),
    fields.Field(
        "head_dim",
        None,
        int,
        None,
        (fields.at_least_one, _our_head_width),
        to_hf=lambda cfg: cfg.d_model // cfg.n_heads,
        optional=True,
    ),
    fields.Field("hidden_act", "activation", str, "silu", (), ACTIVATIONS_FROM_HF, ACTIVATIONS_TO_HF),
    fields.size("max_position_embeddings", "max_len", 2048),
    fields.Field("rms_norm_eps", "norm_eps", float, 1e-6, (fields.positive,)),
    fields.Field("rope_theta", "rope_theta", float, 10000.0),
    fields.constant("rope_scaling", None),
    fields.Field(
        "rope_parameters",
        None,
        dict,
        None,
        to_hf=lambda cfg: {"rope_type": DEFAULT_ROPE, "rope_theta": cfg.rope_theta},
        imported=False,
    ),
    fields.Field("attention_bias", "bias", bool, False),
    fields.Field("mlp_bias", None, bool, False, (_one_bias,), to_hf=lambda cfg: cfg.bias),
    fields.rate("attention_dropout", "attn_dropout", 0.0),
    fields.tied_head(False),
    fields.constant("initializer_range", 0.02),
    fields.constant("pretraining_tp", 1),
    fields.constant("use_cache", True),
)

# Llama's design, which our config leaves free: given to an imported config (with half-split rotary
# positions), required of an exported one (with either rotary layout).
DESIGN = {
    "arch": "decoder_only", "norm": "rmsnorm", "norm_placement": "pre", "attn_window": None,
    "scale_embeddings": False, "output_bias": False, "ffn": "gated",
}  # fmt: skip


def rope_settings(hf: Mapping[str, Any], theta: float) -> float:
    """The ``rope_theta`` of a Llama ``config.json`` whose top level says ``theta``: that of
    ``rope_parameters`` (transformers 5) or ``rope_scaling`` where they hold one. Rotary scaling
    other than none or ``default`` (linear, dynamic, yarn, llama3, longrope) is refused, naming
    ``rope_scaling`` and the type."""
    for name in ("rope_parameters", "rope_scaling"):
        value = hf.get(name)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"field '{name}': expected an object or null, got {value!r}")
        kind = value.get("rope_type", value.get("type", DEFAULT_ROPE))
        if kind != DEFAULT_ROPE:
            raise ConfigError(
                f"field 'rope_scaling': rope_type {kind!r} is not supported (only null or "
                f"{DEFAULT_ROPE!r}: plain rotary positions)"
            )
        if "rope_theta" in value:
            theta = fields.of_kind("rope_theta", value["rope_theta"], float)
    if not theta > 0:
        raise ConfigError(f"field 'rope_theta': must be > 0, got {theta}")
    return float(theta)


def config_from_hf(hf: Mapping[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` of a Llama ``config.json``, by :data:`CONFIG_TABLE`.

    hidden_size → d_model, num_attention_heads → n_heads, num_key_value_heads → n_kv_heads,
    intermediate_size → d_ff, num_hidden_layers → n_layers, max_position_embeddings → max_len,
    rms_norm_eps → norm_eps, rope_theta → rope_theta, hidden_act → activation, attention_bias and
    mlp_bias → bias, attention_dropout → attn_dropout, tie_word_embeddings → tie_embeddings
    "output" or "none"; pre-RMSNorm, half-split rotary positions, the gated feed-forward and
    unscaled embeddings are Llama's design. A field our GPT cannot reproduce is refused with a
    :class:`ConfigError` naming it.
    """
    ours, _ = fields.from_hf(hf, MODEL_TYPE, CONFIG_TABLE)
    if ours["n_kv_heads"] == ours["n_heads"]:
        ours["n_kv_heads"] = None
    ours["rope_theta"] = rope_settings(hf, ours["rope_theta"])
    return ModelConfig(**DESIGN, **ours, dropout=0.0, position="rope")


def check_expressible(cfg: ModelConfig) -> None:
    """Refuse, naming the field, a config that Llama cannot express. Either rotary layout, fused
    or separate q/k/v, grouped heads, biases and the activation among silu, gelu, gelu_tanh and
    relu are free; everything else must be Llama's."""
    if cfg.position not in ("rope", "rope_interleaved"):
        raise ConfigError(
            f'config field \'model.position\': Llama needs "rope" (or "rope_interleaved"), got '
            f"{json.dumps(cfg.position)}"
        )
    fields.require(cfg, "Llama", DESIGN)


def config_to_hf(cfg: ModelConfig, bos_id: int | None = None, eos_id: int | None = None) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` as a ``LlamaForCausalLM`` (the inverse of
    :func:`config_from_hf`, by :data:`CONFIG_TABLE`, with ``bos_id`` and ``eos_id``); ``rope_theta`` is
    written both at the top level (transformers 4) and in ``rope_parameters`` (transformers 5)."""
    check_expressible(cfg)
    hf = fields.to_hf(cfg, MODEL_TYPE, "LlamaForCausalLM", CONFIG_TABLE)
    if bos_id is not None:
        hf["bos_token_id"] = bos_id
    if eos_id is not None:
        hf["eos_token_id"] = eos_id
    return hf


def _rows(cfg: ModelConfig) -> list[KeyMap]:
    kinds = ("weight", "bias") if cfg.bias else ("weight",)
    projections = [
        KeyMap(f"model.layers.{{i}}.{hf}.{kind}", f"blocks.layers.{{i}}.{ours}.{kind}")
        for hf, ours in PROJECTIONS
        for kind in kinds
    ]
    rows = expand((*TABLE, *projections), cfg.n_layers)
    return rows if cfg.tie_embeddings != "none" else [*rows, UNTIED_HEAD]


def _our_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The shape of each of our tensors for ``cfg`` with separate q/k/v (on the meta device)."""
    with torch.device("meta"):
        model = GPT(cfg.replace(fused_qkv=False))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def half_split_order(cfg: ModelConfig, n_heads: int) -> Tensor:
    """The row order that takes ``n_heads`` heads of the interleaved rotary layout to the
    half-split one: in each head, the even features first, then the odd ones."""
    d_head = cfg.d_model // cfg.n_heads
    within = torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])
    return (torch.arange(n_heads)[:, None] * d_head + within).flatten()


def state_from_hf(tensors: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Our state dict (for ``GPT(cfg).load_state_dict(..., strict=True)``, ``cfg`` with separate
    q/k/v and half-split rotary positions) of Llama tensors, by the table. A missing,
    unexpected or misshapen tensor is a :class:`DataError` naming it. With a tied head
    ``output.weight`` is the token embedding itself (a stored ``lm_head.weight`` is ignored)."""
    check_expressible(cfg)
    if cfg.fused_qkv:
        raise ConfigError("config field 'model.fused_qkv': Llama weights load into separate q/k/v; got true")
    if cfg.position != "rope":
        raise ConfigError(
            f"config field 'model.position': Llama weights load into \"rope\", got {cfg.position!r}"
        )
    rows, shapes = _rows(cfg), _our_shapes(cfg)
    return decoder_state_from_hf(tensors, cfg, rows, shapes, PREFIX, UNTIED_HEAD, ROTARY_BUFFER)


def state_to_hf(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Llama tensors (``LlamaForCausalLM`` names, contiguous, safetensors-ready) of our state
    dict, by the table. Fused q/k/v are split; interleaved rotary heads are reordered to the
    half-split layout; a tied head is left out, as ``save_pretrained`` does."""
    check_expressible(cfg)
    state = dict(state)
    if cfg.tie_embeddings != "none":
        state.pop(UNTIED_HEAD.ours, None)
    if cfg.fused_qkv:
        state = split_qkv(state, cfg)
    if cfg.position == "rope_interleaved":
        for name in [n for n in state if re.search(r"\.self_attn\.[qk]_proj\.", n)]:
            heads = cfg.n_heads if ".q_proj." in name else cfg.n_kv_heads or cfg.n_heads
            state[name] = state[name][half_split_order(cfg, heads)]
    return rename(state, _rows(cfg), to_ours=False, our_shapes=_our_shapes(cfg))
