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
from vaswani.interop import fields
from vaswani.interop.common import KeyMap
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

# Hugging Face activation names → ours, and back.
ACTIVATIONS_FROM_HF = fields.activations(
    "swish", "silu", "gelu", "relu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"
)
ACTIVATIONS_TO_HF = {"silu": "swish", "gelu": "gelu", "relu": "relu", "gelu_tanh": "gelu_new"}

# MarianConfig's token ids, for those a config.json leaves out (the run's tokenizers must agree
# with them: marian_folder.check_token_ids).
TOKEN_IDS = {"pad_token_id": 58100, "eos_token_id": 0, "decoder_start_token_id": 58100}


def _same_as(encoder: str) -> fields.Check:
    """A check that a decoder's size is the encoder's (``encoder``): our model has one for both stacks."""

    def check(name: str, value: int, read: Mapping[str, Any]) -> None:
        if value != read[encoder]:
            both = f"{encoder}={read[encoder]} (one value for both stacks)"
            raise ConfigError(f"field '{name}': must equal {both}, got {value}")

    return check


def _ties(name: str, tied: bool, read: Mapping[str, Any]) -> None:
    """Refuse shared embeddings (``share_encoder_decoder_embeddings``) with an untied head, or with
    two vocabulary sizes."""
    if not read["share_encoder_decoder_embeddings"]:
        return
    if not tied:
        raise ConfigError(f"field '{name}': false with share_encoder_decoder_embeddings is not supported")
    vocab, decoder_vocab = read["vocab_size"], read["decoder_vocab_size"]
    if decoder_vocab not in (None, vocab):
        raise ConfigError(
            f"field 'decoder_vocab_size': shared embeddings need vocab_size={vocab}, got {decoder_vocab}"
        )


# The config mapping, used in both directions, with MarianConfig's defaults for the fields a
# config.json leaves out: decoder_vocab_size left out (or null) is vocab_size. The rates of
# ZERO_RATES only train, and our model has none of them: they must be 0.
ZERO_RATES = ("activation_dropout", "encoder_layerdrop", "decoder_layerdrop")
CONFIG_TABLE = (
    fields.size("vocab_size", "src_vocab_size", 58101),
    fields.Field("decoder_vocab_size", "tgt_vocab_size", int, None, fields.SIZE, optional=True),
    fields.size("max_position_embeddings", "max_len", 1024),
    fields.size("d_model", "d_model", 1024),
    fields.size("encoder_layers", "n_encoder_layers", 12),
    fields.size("decoder_layers", "n_decoder_layers", 12),
    fields.Field(
        "encoder_attention_heads", "n_heads", int, 16, (fields.at_least_one, fields.divides("d_model"))
    ),
    fields.Field(
        "decoder_attention_heads",
        None,
        int,
        16,
        (_same_as("encoder_attention_heads"),),
        to_hf=lambda cfg: cfg.n_heads,
    ),
    fields.size("encoder_ffn_dim", "d_ff", 4096),
    fields.Field(
        "decoder_ffn_dim", None, int, 4096, (_same_as("encoder_ffn_dim"),), to_hf=lambda cfg: cfg.d_ff
    ),
    fields.Field(
        "activation_function", "activation", str, "gelu", (), ACTIVATIONS_FROM_HF, ACTIVATIONS_TO_HF
    ),
    fields.rate("dropout", "dropout", 0.1),
    fields.rate("attention_dropout", "attn_dropout", 0.0),
    *(
        fields.Field(
            name,
            None,
            float,
            0.0,
            (fields.a_rate, fields.needs(0.0, " (only 0: vaswani has no such rate)")),
        )
        for name in ZERO_RATES
    ),
    fields.Field("scale_embedding", "scale_embeddings", bool, False),
    fields.Field(
        "share_encoder_decoder_embeddings", None, bool, True, to_hf=lambda cfg: cfg.tie_embeddings == "all"
    ),
    fields.Field(
        "tie_word_embeddings", None, bool, True, (_ties,), to_hf=lambda cfg: cfg.tie_embeddings != "none"
    ),
    fields.Field(
        "pad_token_id",
        "pad_id",
        int,
        TOKEN_IDS["pad_token_id"],
        (fields.token_id("vocab_size", "decoder_vocab_size"),),
    ),
)

# Marian's design, which our config leaves free: given to an imported config (with positions in
# halves), required of an exported one (with either sinusoidal layout).
DESIGN = {
    "arch": "encoder_decoder", "norm": "layernorm", "norm_placement": "post", "attn_window": None,
    "bias": True, "norm_eps": LAYER_NORM_EPS, "ffn": "plain", "word_dim": None,
}  # fmt: skip


def config_from_hf(hf: Mapping[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` of a Marian ``config.json``, by :data:`CONFIG_TABLE`.

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
    architectures = hf.get("architectures")  # after model_type, which fields.from_hf checks
    if (
        hf.get("model_type", MODEL_TYPE) == MODEL_TYPE
        and architectures is not None
        and architectures != [ARCHITECTURE]
    ):
        raise ConfigError(f"field 'architectures': only {ARCHITECTURE} is supported, got {architectures!r}")
    ours, read = fields.from_hf(hf, MODEL_TYPE, CONFIG_TABLE)
    if ours["tgt_vocab_size"] is None:
        ours["tgt_vocab_size"] = ours["src_vocab_size"]
    shared, tied = read["share_encoder_decoder_embeddings"], read["tie_word_embeddings"]
    return ModelConfig(
        **DESIGN,
        **ours,
        position="sinusoidal_halves",
        fused_qkv=False,
        tie_embeddings="all" if shared else "output" if tied else "none",
        output_bias=True,
    )


def check_expressible(cfg: ModelConfig) -> None:
    """Refuse, naming the field, a config that Marian cannot express. Positions may be either
    sinusoidal layout; activation, embedding scale, ties, sizes, fused q/k/v and the output bias
    are free; everything else must be Marian's."""
    fields.refuse_grouped_heads(cfg, "Marian")
    fields.require(cfg, "Marian", DESIGN)
    if cfg.position not in ("sinusoidal", "sinusoidal_halves"):
        raise ConfigError(
            "config field 'model.position': Marian needs sinusoidal positions, "
            f"got {json.dumps(cfg.position)}"
        )


def config_to_hf(cfg: ModelConfig, tgt_tok: TextTokenizer) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` as a ``MarianMTModel`` (the inverse of :func:`config_from_hf`
    for a Marian config, by :data:`CONFIG_TABLE`), with the token ids of ``tgt_tok``;
    ``forced_eos_token_id`` is null, as vaswani's decoding does not force EOS at the length limit."""
    check_expressible(cfg)
    return {
        **fields.to_hf(cfg, MODEL_TYPE, ARCHITECTURE, CONFIG_TABLE),
        "eos_token_id": tgt_tok.eos_id,
        "decoder_start_token_id": tgt_tok.bos_id,
        "forced_eos_token_id": None,
        "is_encoder_decoder": True,
        "init_std": 0.02,
        "use_cache": True,
    }
