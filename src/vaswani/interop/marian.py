"""Marian (OPUS-MT) translation checkpoints in Hugging Face's format (``MarianMTModel``), both ways.

Marian is our encoder-decoder :class:`~vaswani.models.transformer.Transformer` with post-LN
blocks (no final norms), separate q/k/v projections with biases, LayerNorm's eps of 1e-5, token
embeddings scaled by sqrt(d_model) when ``scale_embedding`` is set, and two things of its own
that our config names: sinusoidal positions laid out as all the sines, then all the cosines
(``position="sinusoidal_halves"``; the fixed tables a checkpoint may carry are checked against
ours), and a bias added to the logits (``final_logits_bias``, our ``output_bias``). OPUS-MT's
models use SiLU ("swish"). The key mapping (:data:`ENCODER_TABLE`, :data:`DECODER_TABLE` and the
embedding rows, used in both directions; ``{i}`` is the layer):

============================================================  ==========================================
Hugging Face                                                  vaswani
============================================================  ==========================================
model.shared.weight (shared vocabulary)                       src_embed.token.weight (= tgt_embed, output)
model.encoder.embed_tokens.weight (separate vocabularies)     src_embed.token.weight
model.decoder.embed_tokens.weight (separate vocabularies)     tgt_embed.token.weight
lm_head.weight (untied head only)                             output.weight
final_logits_bias (1, vocab)                                  output.bias (vocab,)
model.encoder.layers.{i}.self_attn.{q,k,v,out}_proj.*         encoder.layers.{i}.self_attn.{q,k,v,out}_proj.*
model.encoder.layers.{i}.self_attn_layer_norm.*               encoder.layers.{i}.self_attn_norm.*
model.encoder.layers.{i}.fc1.* / fc2.*                        encoder.layers.{i}.ffn.linear1.* / linear2.*
model.encoder.layers.{i}.final_layer_norm.*                   encoder.layers.{i}.ffn_norm.*
model.decoder.layers.{i}.self_attn.{q,k,v,out}_proj.*         decoder.layers.{i}.self_attn.{q,k,v,out}_proj.*
model.decoder.layers.{i}.self_attn_layer_norm.*               decoder.layers.{i}.self_attn_norm.*
model.decoder.layers.{i}.encoder_attn.{q,k,v,out}_proj.*      decoder.layers.{i}.cross_attn.{q,k,v,out}_proj.*
model.decoder.layers.{i}.encoder_attn_layer_norm.*            decoder.layers.{i}.cross_attn_norm.*
model.decoder.layers.{i}.fc1.* / fc2.*                        decoder.layers.{i}.ffn.linear1.* / linear2.*
model.decoder.layers.{i}.final_layer_norm.*                   decoder.layers.{i}.ffn_norm.*
============================================================  ==========================================

``*`` is ``weight`` and ``bias``; nothing is transposed. ``share_encoder_decoder_embeddings``
and ``tie_word_embeddings`` are our ``tie_embeddings``: both → "all", the head tied only →
"output", neither → "none" (shared embeddings with an untied head are refused). A tied tensor
stored more than once (older checkpoints keep ``model.encoder.embed_tokens.weight``,
``lm_head.weight`` and the others beside ``model.shared.weight``) is read once, as Hugging Face
ties them; the position tables ``model.{encoder,decoder}.embed_positions.weight`` are not
written, as ``save_pretrained`` leaves them out. A run with the paper's interleaved positions
(``position="sinusoidal"``) is exported exactly too: the interleaved table is the halves table
with its columns permuted, so every weight's model-dimension axis is permuted the same way.
Token ids, tokenizers and folders: :mod:`vaswani.interop.marian_folder`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.interop.common import KeyMap, check_sizes, hf_field, refuse_grouped_heads
from vaswani.tokenizer import TextTokenizer

MODEL_TYPE = "marian"
ARCHITECTURE = "MarianMTModel"
HF_TOKENIZER, HF_TARGET_TOKENIZER = "tokenizer.json", "target_tokenizer.json"
SENTENCEPIECE_DIR = "sentencepiece"  # where a run keeps OPUS-MT's tokenizer files, for export
GENERATION_CONFIG = "generation_config.json"
LAYER_NORM_EPS = 1e-5  # Marian's nn.LayerNorm, not configurable

# Marian's module inside a layer → ours; each has a weight and a bias.
ENCODER_MODULES = {
    **{f"self_attn.{p}_proj": f"self_attn.{p}_proj" for p in ("q", "k", "v", "out")},
    "self_attn_layer_norm": "self_attn_norm",
    "fc1": "ffn.linear1",
    "fc2": "ffn.linear2",
    "final_layer_norm": "ffn_norm",
}
DECODER_MODULES = {
    **ENCODER_MODULES,
    **{f"encoder_attn.{p}_proj": f"cross_attn.{p}_proj" for p in ("q", "k", "v", "out")},
    "encoder_attn_layer_norm": "cross_attn_norm",
}
ENCODER_TABLE = tuple(
    KeyMap(f"model.encoder.layers.{{i}}.{hf}.{kind}", f"encoder.layers.{{i}}.{ours}.{kind}")
    for hf, ours in ENCODER_MODULES.items()
    for kind in ("weight", "bias")
)
DECODER_TABLE = tuple(
    KeyMap(f"model.decoder.layers.{{i}}.{hf}.{kind}", f"decoder.layers.{{i}}.{ours}.{kind}")
    for hf, ours in DECODER_MODULES.items()
    for kind in ("weight", "bias")
)
SHARED = KeyMap("model.shared.weight", "src_embed.token.weight")
ENCODER_EMBED = KeyMap("model.encoder.embed_tokens.weight", "src_embed.token.weight")
DECODER_EMBED = KeyMap("model.decoder.embed_tokens.weight", "tgt_embed.token.weight")
HEAD = KeyMap("lm_head.weight", "output.weight")
LOGITS_BIAS = KeyMap("final_logits_bias", "output.bias")
POSITION_TABLES = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")

# Hugging Face activation name → ours (ACT2FN: "swish" and "silu" are both x · sigmoid(x); gelu_new,
# gelu_pytorch_tanh and gelu_fast are all the tanh approximation of GELU), and back.
ACTIVATIONS_FROM_HF = {
    "swish": "silu",
    "silu": "silu",
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
}
ACTIVATIONS_TO_HF = {"silu": "swish", "gelu": "gelu", "relu": "relu", "gelu_tanh": "gelu_new"}

# MarianConfig's defaults, for the fields a config.json leaves out.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101, "max_position_embeddings": 1024,
    "encoder_layers": 12, "encoder_ffn_dim": 4096, "encoder_attention_heads": 16,
    "decoder_layers": 12, "decoder_ffn_dim": 4096, "decoder_attention_heads": 16,
    "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "activation_function": "gelu", "d_model": 1024,
    "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0, "decoder_start_token_id": 58100,
    "scale_embedding": False, "pad_token_id": 58100, "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
}  # fmt: skip

# Rates that only training uses and our model does not have: they must be 0.
ZERO_RATES = ("activation_dropout", "encoder_layerdrop", "decoder_layerdrop")


def marian_field(hf: Mapping[str, Any], name: str, kind: type) -> Any:
    """``hf[name]`` (or MarianConfig's default), refused when it is not a ``kind``."""
    return hf_field(hf, name, kind, HF_DEFAULTS)


def _same(hf: Mapping[str, Any], encoder: str, decoder: str) -> int:
    """A size that encoder and decoder must share in our model (heads, feed-forward width)."""
    value, other = marian_field(hf, encoder, int), marian_field(hf, decoder, int)
    if other != value:
        raise ConfigError(
            f"field '{decoder}': must equal {encoder}={value} (one value for both stacks), got {other}"
        )
    return value


def config_from_hf(hf: Mapping[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` of a Marian ``config.json``.

    d_model → d_model, encoder/decoder_attention_heads (equal) → n_heads,
    encoder/decoder_ffn_dim (equal) → d_ff, encoder_layers → n_encoder_layers, decoder_layers →
    n_decoder_layers, vocab_size → src_vocab_size, decoder_vocab_size (or vocab_size) →
    tgt_vocab_size, max_position_embeddings → max_len, activation_function → activation,
    dropout → dropout, attention_dropout → attn_dropout, scale_embedding → scale_embeddings,
    pad_token_id → pad_id, share_encoder_decoder_embeddings and tie_word_embeddings →
    tie_embeddings; post-LN, halves positions, biases and the logits bias are Marian's design.
    Fields of the BART era that ``MarianMTModel`` ignores (``normalize_before``,
    ``add_bias_logits``, ...) are ignored here too. A field our model cannot reproduce is
    refused with a :class:`ConfigError` naming it.
    """
    model_type = hf.get("model_type", MODEL_TYPE)
    if model_type != MODEL_TYPE:
        raise ConfigError(f"field 'model_type': expected {MODEL_TYPE!r}, got {model_type!r}")
    architectures = hf.get("architectures")
    if architectures is not None and architectures != [ARCHITECTURE]:
        raise ConfigError(f"field 'architectures': only {ARCHITECTURE} is supported, got {architectures!r}")
    names = ("vocab_size", "max_position_embeddings", "d_model", "encoder_layers", "decoder_layers")
    sizes = {name: marian_field(hf, name, int) for name in names}
    for encoder, decoder in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        sizes[encoder] = _same(hf, encoder, decoder)
    sizes["decoder_vocab_size"] = sizes["vocab_size"]
    if hf.get("decoder_vocab_size") is not None:
        sizes["decoder_vocab_size"] = marian_field(hf, "decoder_vocab_size", int)
    check_sizes(sizes)
    heads = sizes["encoder_attention_heads"]
    if sizes["d_model"] % heads:
        raise ConfigError(
            f"field 'encoder_attention_heads': must divide d_model={sizes['d_model']}, got {heads}"
        )
    shared = marian_field(hf, "share_encoder_decoder_embeddings", bool)
    tied = marian_field(hf, "tie_word_embeddings", bool)
    if shared and not tied:
        raise ConfigError(
            "field 'tie_word_embeddings': false with share_encoder_decoder_embeddings is not supported"
        )
    if shared and sizes["decoder_vocab_size"] != sizes["vocab_size"]:
        raise ConfigError(
            f"field 'decoder_vocab_size': shared embeddings need vocab_size={sizes['vocab_size']}, "
            f"got {sizes['decoder_vocab_size']}"
        )
    activation = marian_field(hf, "activation_function", str)
    if activation not in ACTIVATIONS_FROM_HF:
        raise ConfigError(
            f"field 'activation_function': {activation!r} is not supported; "
            f"supported: {', '.join(ACTIVATIONS_FROM_HF)}"
        )
    rates = {name: marian_field(hf, name, float) for name in ("dropout", "attention_dropout", *ZERO_RATES)}
    for name, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ConfigError(f"field '{name}': must be in [0, 1), got {rate}")
        if name in ZERO_RATES and rate:
            raise ConfigError(f"field '{name}': {rate} is not supported (only 0: vaswani has no such rate)")
    pad_id = marian_field(hf, "pad_token_id", int)
    if not 0 <= pad_id < min(sizes["vocab_size"], sizes["decoder_vocab_size"]):
        raise ConfigError(f"field 'pad_token_id': must be a token id, got {pad_id}")
    tie = "all" if shared else "output" if tied else "none"
    return ModelConfig(
        arch="encoder_decoder",
        src_vocab_size=sizes["vocab_size"],
        tgt_vocab_size=sizes["decoder_vocab_size"],
        d_model=sizes["d_model"],
        n_heads=sizes["encoder_attention_heads"],
        d_ff=sizes["encoder_ffn_dim"],
        n_encoder_layers=sizes["encoder_layers"],
        n_decoder_layers=sizes["decoder_layers"],
        dropout=float(rates["dropout"]),
        attn_dropout=float(rates["attention_dropout"]),
        activation=ACTIVATIONS_FROM_HF[activation],
        norm="layernorm",
        norm_placement="post",
        norm_eps=LAYER_NORM_EPS,
        position="sinusoidal_halves",
        max_len=sizes["max_position_embeddings"],
        fused_qkv=False,
        bias=True,
        scale_embeddings=marian_field(hf, "scale_embedding", bool),
        tie_embeddings=tie,
        pad_id=pad_id,
        output_bias=True,
    )


def check_expressible(cfg: ModelConfig) -> None:
    """Refuse, naming the field, a config that Marian cannot express. Positions may be either
    sinusoidal layout; activation, embedding scale, ties, sizes, fused q/k/v and the output bias
    are free; everything else must be Marian's."""
    refuse_grouped_heads(cfg, "Marian")
    needed = {
        "arch": "encoder_decoder", "norm": "layernorm", "norm_placement": "post", "attn_window": None,
        "bias": True, "norm_eps": LAYER_NORM_EPS, "ffn": "plain", "word_dim": None,
    }  # fmt: skip
    for name, value in needed.items():
        found = getattr(cfg, name)
        if found != value:
            raise ConfigError(
                f"config field 'model.{name}': Marian needs {json.dumps(value)}, got {json.dumps(found)}"
            )
    if cfg.position not in ("sinusoidal", "sinusoidal_halves"):
        raise ConfigError(
            "config field 'model.position': Marian needs sinusoidal positions, "
            f"got {json.dumps(cfg.position)}"
        )


def config_to_hf(cfg: ModelConfig, tgt_tok: TextTokenizer) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` as a ``MarianMTModel`` (the inverse of :func:`config_from_hf`
    for a Marian config), with the token ids of ``tgt_tok``; ``forced_eos_token_id`` is null, as
    vaswani's decoding does not force EOS at the length limit."""
    check_expressible(cfg)
    return {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURE],
        "vocab_size": cfg.src_vocab_size,
        "decoder_vocab_size": cfg.tgt_vocab_size,
        "max_position_embeddings": cfg.max_len,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.n_encoder_layers,
        "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": ACTIVATIONS_TO_HF[cfg.activation],
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attn_dropout,
        **dict.fromkeys(ZERO_RATES, 0.0),
        "scale_embedding": cfg.scale_embeddings,
        "share_encoder_decoder_embeddings": cfg.tie_embeddings == "all",
        "tie_word_embeddings": cfg.tie_embeddings != "none",
        "pad_token_id": cfg.pad_id,
        "eos_token_id": tgt_tok.eos_id,
        "decoder_start_token_id": tgt_tok.bos_id,
        "forced_eos_token_id": None,
        "is_encoder_decoder": True,
        "init_std": 0.02,
        "use_cache": True,
    }
