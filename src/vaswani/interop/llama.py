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
from vaswani.interop.common import (
    KeyMap,
    check_sizes,
    decoder_state_from_hf,
    expand,
    hf_field,
    rename,
    split_qkv,
)
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

# Hugging Face activation name (hidden_act) → ours.
ACTIVATIONS_FROM_HF = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "relu": "relu",
}
ACTIVATIONS_TO_HF = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}

# LlamaConfig's defaults (Llama 2 7B), which apply to the fields a config.json leaves out.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "hidden_act": "silu", "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "rope_theta": 10000.0, "attention_bias": False,
    "attention_dropout": 0.0, "mlp_bias": False,
}  # fmt: skip
DEFAULT_ROPE = "default"


def _hf_field(hf: Mapping[str, Any], name: str, kind: type) -> Any:
    """``hf[name]`` (or LlamaConfig's default), refused when it is not a ``kind``."""
    return hf_field(hf, name, kind, HF_DEFAULTS)


def rope_settings(hf: Mapping[str, Any]) -> float:
    """The ``rope_theta`` of a Llama ``config.json``, from ``rope_parameters`` (transformers 5) or
    the top level (older files). Rotary scaling other than none or ``default`` (linear, dynamic,
    yarn, llama3, longrope) is refused, naming ``rope_scaling`` and the type."""
    parameters = hf.get("rope_parameters")
    scaling = hf.get("rope_scaling")
    theta = _hf_field(hf, "rope_theta", float)
    for name, value in (("rope_parameters", parameters), ("rope_scaling", scaling)):
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
            theta = hf_field(value, "rope_theta", float, {})
    if not theta > 0:
        raise ConfigError(f"field 'rope_theta': must be > 0, got {theta}")
    return float(theta)


def config_from_hf(hf: Mapping[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` of a Llama ``config.json``.

    hidden_size → d_model, num_attention_heads → n_heads, num_key_value_heads → n_kv_heads,
    intermediate_size → d_ff, num_hidden_layers → n_layers, max_position_embeddings → max_len,
    rms_norm_eps → norm_eps, rope_theta → rope_theta, hidden_act → activation, attention_bias and
    mlp_bias → bias, attention_dropout → attn_dropout, tie_word_embeddings → tie_embeddings
    "output" or "none"; pre-RMSNorm, half-split rotary positions, the gated feed-forward and
    unscaled embeddings are Llama's design. A field our GPT cannot reproduce is refused with a
    :class:`ConfigError` naming it.
    """
    model_type = hf.get("model_type", MODEL_TYPE)
    if model_type != MODEL_TYPE:
        raise ConfigError(f"field 'model_type': expected {MODEL_TYPE!r}, got {model_type!r}")
    names = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    sizes = {name: _hf_field(hf, name, int) for name in names}
    heads = sizes["num_attention_heads"]
    for name in ("num_key_value_heads", "head_dim"):
        if hf.get(name) is not None:
            sizes[name] = _hf_field(hf, name, int)
    check_sizes(sizes)
    if sizes["hidden_size"] % heads:
        raise ConfigError(
            f"field 'num_attention_heads': must divide hidden_size={sizes['hidden_size']}, got {heads}"
        )
    d_head = sizes["hidden_size"] // heads
    if sizes.get("head_dim", d_head) != d_head:
        raise ConfigError(
            f"field 'head_dim': our attention's heads are hidden_size / num_attention_heads = {d_head} "
            f"wide, got {sizes['head_dim']}"
        )
    kv_heads = sizes.get("num_key_value_heads", heads)
    if heads % kv_heads:
        raise ConfigError(
            f"field 'num_key_value_heads': must divide num_attention_heads={heads}, got {kv_heads}"
        )
    if d_head % 2:
        raise ConfigError(
            f"field 'num_attention_heads': rotary positions need an even head dimension, got {d_head}"
        )
    activation = _hf_field(hf, "hidden_act", str)
    if activation not in ACTIVATIONS_FROM_HF:
        raise ConfigError(
            f"field 'hidden_act': {activation!r} is not supported; "
            f"supported: {', '.join(ACTIVATIONS_FROM_HF)}"
        )
    attention_bias, mlp_bias = _hf_field(hf, "attention_bias", bool), _hf_field(hf, "mlp_bias", bool)
    if attention_bias != mlp_bias:
        raise ConfigError(
            f"field 'mlp_bias': {str(mlp_bias).lower()} with attention_bias {str(attention_bias).lower()} "
            "is not supported (our bias field covers both)"
        )
    rate = _hf_field(hf, "attention_dropout", float)
    if not 0.0 <= rate < 1.0:
        raise ConfigError(f"field 'attention_dropout': must be in [0, 1), got {rate}")
    eps = _hf_field(hf, "rms_norm_eps", float)
    if not eps > 0:
        raise ConfigError(f"field 'rms_norm_eps': must be > 0, got {eps}")
    max_len = _hf_field(hf, "max_position_embeddings", int)
    if max_len < 1:
        raise ConfigError(f"field 'max_position_embeddings': must be >= 1, got {max_len}")
    return ModelConfig(
        arch="decoder_only",
        vocab_size=sizes["vocab_size"],
        d_model=sizes["hidden_size"],
        n_heads=heads,
        n_kv_heads=None if kv_heads == heads else kv_heads,
        d_ff=sizes["intermediate_size"],
        n_layers=sizes["num_hidden_layers"],
        dropout=0.0,
        attn_dropout=float(rate),
        activation=ACTIVATIONS_FROM_HF[activation],
        ffn="gated",
        norm="rmsnorm",
        norm_placement="pre",
        norm_eps=float(eps),
        position="rope",
        rope_theta=rope_settings(hf),
        max_len=max_len,
        bias=attention_bias,
        scale_embeddings=False,
        tie_embeddings="output" if _hf_field(hf, "tie_word_embeddings", bool) else "none",
    )


def check_expressible(cfg: ModelConfig) -> None:
    """Refuse, naming the field, a config that Llama cannot express. Either rotary layout, fused
    or separate q/k/v, grouped heads, biases and the activation among silu, gelu, gelu_tanh and
    relu are free; everything else must be Llama's."""
    if cfg.position not in ("rope", "rope_interleaved"):
        raise ConfigError(
            f'config field \'model.position\': Llama needs "rope" (or "rope_interleaved"), got '
            f"{json.dumps(cfg.position)}"
        )
    needed = {
        "arch": "decoder_only", "norm": "rmsnorm", "norm_placement": "pre", "attn_window": None,
        "scale_embeddings": False, "output_bias": False, "ffn": "gated",
    }  # fmt: skip
    for name, value in needed.items():
        found = getattr(cfg, name)
        if found != value:
            raise ConfigError(
                f"config field 'model.{name}': Llama needs {json.dumps(value)}, got {json.dumps(found)}"
            )


def config_to_hf(cfg: ModelConfig, bos_id: int | None = None, eos_id: int | None = None) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` as a ``LlamaForCausalLM`` (the inverse of
    :func:`config_from_hf`, with ``bos_id`` and ``eos_id``); ``rope_theta`` is written both at
    the top level (transformers 4) and in ``rope_parameters`` (transformers 5)."""
    check_expressible(cfg)
    hf: dict[str, Any] = {
        "model_type": MODEL_TYPE,
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.d_model // cfg.n_heads,
        "hidden_act": ACTIVATIONS_TO_HF[cfg.activation],
        "max_position_embeddings": cfg.max_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": DEFAULT_ROPE, "rope_theta": cfg.rope_theta},
        "attention_bias": cfg.bias,
        "mlp_bias": cfg.bias,
        "attention_dropout": cfg.attn_dropout,
        "tie_word_embeddings": cfg.tie_embeddings != "none",
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
    }
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
