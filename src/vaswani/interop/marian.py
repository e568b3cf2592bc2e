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

Token ids: Marian's vocabulary has ``</s>`` (end), ``<unk>`` and ``<pad>`` (usually the last id),
which also starts the decoder (``decoder_start_token_id``), and is never generated (the
``bad_words_ids`` of Marian's generation config). The run's tokenizers carry these roles (see
:class:`~vaswani.tokenizer.TextTokenizer`); the ids in ``config.json`` must agree with them.
A folder without ``tokenizer.json`` is read from OPUS-MT's ``source.spm``, ``target.spm`` and
``vocab.json``, tokenized as ``MarianTokenizer`` does (:mod:`vaswani.interop.sentencepiece`).
A folder's OPUS-MT files (also beside a ``tokenizer.json``, as :func:`export_run` writes them)
are kept in the run directory (``sentencepiece/``) and written back on export, so that
``MarianTokenizer`` and ``AutoTokenizer`` read both sides of the exported folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import Tensor

from vaswani.config import ModelConfig, RunConfig
from vaswani.data.config import ParallelData
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
from vaswani.interop.sentencepiece import (
    SOURCE_SPM,
    TARGET_SPM,
    TARGET_VOCAB,
    VOCAB,
    copy_opus_files,
    marian_tokenizer,
    opus_files,
)
from vaswani.io import first_line, write_file
from vaswani.layers.positions import halves_order, sinusoidal_table
from vaswani.models.transformer import Transformer
from vaswani.rundir import RunDir
from vaswani.tasks import registry
from vaswani.tasks.translation import SRC_TOKENIZER, TASK, TGT_TOKENIZER
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


def _hf_field(hf: Mapping[str, Any], name: str, kind: type) -> Any:
    """``hf[name]`` (or MarianConfig's default), refused when it is not a ``kind``."""
    return hf_field(hf, name, kind, HF_DEFAULTS)


def _same(hf: Mapping[str, Any], encoder: str, decoder: str) -> int:
    """A size that encoder and decoder must share in our model (heads, feed-forward width)."""
    value = _hf_field(hf, encoder, int)
    if _hf_field(hf, decoder, int) != value:
        raise ConfigError(
            f"field '{decoder}': must equal {encoder}={value} (one value for both stacks), got {hf[decoder]}"
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
    sizes = {name: _hf_field(hf, name, int) for name in names}
    sizes["heads"] = _same(hf, "encoder_attention_heads", "decoder_attention_heads")
    sizes["ffn_dim"] = _same(hf, "encoder_ffn_dim", "decoder_ffn_dim")
    sizes["decoder_vocab_size"] = sizes["vocab_size"]
    if hf.get("decoder_vocab_size") is not None:
        sizes["decoder_vocab_size"] = _hf_field(hf, "decoder_vocab_size", int)
    for name, value in sizes.items():
        if value < 1:
            raise ConfigError(f"field '{name}': must be >= 1, got {value}")
    if sizes["d_model"] % sizes["heads"]:
        raise ConfigError(
            f"field 'encoder_attention_heads': must divide d_model={sizes['d_model']}, got {sizes['heads']}"
        )
    shared = _hf_field(hf, "share_encoder_decoder_embeddings", bool)
    tied = _hf_field(hf, "tie_word_embeddings", bool)
    if shared and not tied:
        raise ConfigError(
            "field 'tie_word_embeddings': false with share_encoder_decoder_embeddings is not supported"
        )
    if shared and sizes["decoder_vocab_size"] != sizes["vocab_size"]:
        raise ConfigError(
            f"field 'decoder_vocab_size': shared embeddings need vocab_size={sizes['vocab_size']}, "
            f"got {sizes['decoder_vocab_size']}"
        )
    activation = _hf_field(hf, "activation_function", str)
    if activation not in ACTIVATIONS_FROM_HF:
        raise ConfigError(
            f"field 'activation_function': {activation!r} is not supported; "
            f"supported: {', '.join(ACTIVATIONS_FROM_HF)}"
        )
    rates = {name: _hf_field(hf, name, float) for name in ("dropout", "attention_dropout", *ZERO_RATES)}
    for name, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ConfigError(f"field '{name}': must be in [0, 1), got {rate}")
        if name in ZERO_RATES and rate:
            raise ConfigError(f"field '{name}': {rate} is not supported (only 0: vaswani has no such rate)")
    pad_id = _hf_field(hf, "pad_token_id", int)
    if not 0 <= pad_id < min(sizes["vocab_size"], sizes["decoder_vocab_size"]):
        raise ConfigError(f"field 'pad_token_id': must be a token id, got {pad_id}")
    tie = "all" if shared else "output" if tied else "none"
    return ModelConfig(
        arch="encoder_decoder",
        src_vocab_size=sizes["vocab_size"],
        tgt_vocab_size=sizes["decoder_vocab_size"],
        d_model=sizes["d_model"],
        n_heads=sizes["heads"],
        d_ff=sizes["ffn_dim"],
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
        scale_embeddings=_hf_field(hf, "scale_embedding", bool),
        tie_embeddings=tie,
        pad_id=pad_id,
        output_bias=True,
    )


def check_token_ids(hf: Mapping[str, Any], src_tok: TextTokenizer, tgt_tok: TextTokenizer) -> None:
    """Refuse, naming the field, token ids of a Marian ``config.json`` that the run's tokenizers
    do not agree with: decoding starts from ``tgt_tok.bos_id`` and stops at ``tgt_tok.eos_id``,
    and both tokenizers pad with the model's pad id."""
    expected = {
        "pad_token_id": (tgt_tok.pad_id, "the target tokenizer's padding"),
        "eos_token_id": (tgt_tok.eos_id, "the target tokenizer's end of sentence"),
        "decoder_start_token_id": (tgt_tok.bos_id, "the target tokenizer's start of decoding"),
    }
    for name, (token_id, role) in expected.items():
        found = _hf_field(hf, name, int)
        if found != token_id:
            raise ConfigError(f"field '{name}': {found}, but {role} is {token_id}")
    if src_tok.pad_id != tgt_tok.pad_id:
        raise ConfigError(
            f"field 'pad_token_id': the source tokenizer pads with {src_tok.pad_id}, the target one "
            f"with {tgt_tok.pad_id}"
        )


def check_expressible(cfg: ModelConfig) -> None:
    """Refuse, naming the field, a config that Marian cannot express. Positions may be either
    sinusoidal layout; activation, embedding scale, ties, sizes, fused q/k/v and the output bias
    are free; everything else must be Marian's."""
    needed = {
        "arch": "encoder_decoder", "norm": "layernorm", "norm_placement": "post", "attn_window": None,
        "bias": True, "norm_eps": LAYER_NORM_EPS,
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


def _rows(cfg: ModelConfig) -> list[KeyMap]:
    if cfg.tie_embeddings == "all":
        embeddings = [SHARED]
    elif cfg.tie_embeddings == "output":
        embeddings = [ENCODER_EMBED, DECODER_EMBED]
    else:
        embeddings = [ENCODER_EMBED, DECODER_EMBED, HEAD]
    return [
        *embeddings,
        LOGITS_BIAS,
        *expand(ENCODER_TABLE, cfg.n_encoder_layers),
        *expand(DECODER_TABLE, cfg.n_decoder_layers),
    ]


def _our_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The shape of each of our tensors for ``cfg`` as Marian holds it: separate q/k/v and the
    output bias (on the meta device: no memory)."""
    with torch.device("meta"):
        model = Transformer(cfg.replace(fused_qkv=False, output_bias=True))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def _check_position_table(name: str, tensor: Tensor, cfg: ModelConfig) -> None:
    """A stored position table must be the one we compute (Marian's), or the model would differ."""
    expected = sinusoidal_table(cfg.max_len, cfg.d_model, halves=True)
    if tuple(tensor.shape) != tuple(expected.shape):
        raise DataError(
            f"tensor '{name}' has shape {list(tensor.shape)}, the config expects {list(expected.shape)}"
        )
    atol = max(1e-4, 2 * torch.finfo(tensor.dtype).eps)  # a half-precision checkpoint rounds it
    if not torch.allclose(tensor.float(), expected, atol=atol):
        raise DataError(
            f"tensor '{name}' is not Marian's sinusoidal table; learned positions are not supported"
        )


def state_from_hf(tensors: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Our state dict (for ``Transformer(cfg).load_state_dict(..., strict=True)``) of Marian
    tensors: ``cfg`` is :func:`config_from_hf`'s. A missing, unexpected or misshapen tensor is a
    :class:`DataError` naming it; tied copies are read once, position tables checked. A missing
    ``final_logits_bias`` is zero, as ``MarianMTModel`` makes it."""
    check_expressible(cfg)
    for name, value in {"position": "sinusoidal_halves", "fused_qkv": False, "output_bias": True}.items():
        if getattr(cfg, name) != value:
            raise ConfigError(
                f"config field 'model.{name}': Marian weights load into {json.dumps(value)}, "
                f"got {json.dumps(getattr(cfg, name))}"
            )
    tied = {HEAD.hf} if cfg.tie_embeddings != "none" else set()
    if cfg.tie_embeddings == "all":
        tied |= {ENCODER_EMBED.hf, DECODER_EMBED.hf}
    named: dict[str, Tensor] = {}
    for name, tensor in tensors.items():
        if name in POSITION_TABLES:
            _check_position_table(name, tensor, cfg)
        elif name not in tied:
            named[name] = tensor
    bias = named.get(LOGITS_BIAS.hf, torch.zeros(1, cfg.tgt_vocab_size))
    named[LOGITS_BIAS.hf] = bias.flatten() if bias.dim() == 2 and bias.shape[0] == 1 else bias
    state = rename(named, _rows(cfg), to_ours=True, our_shapes=_our_shapes(cfg))
    if cfg.tie_embeddings == "all":
        state["tgt_embed.token.weight"] = state[SHARED.ours]
    if cfg.tie_embeddings != "none":
        state[HEAD.ours] = state["tgt_embed.token.weight"]
    return state


def _split_fused(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Fused ``qkv_proj`` (self-attention) and ``kv_proj`` (cross-attention) split into Marian's
    separate projections."""
    split = dict(state)
    for stack, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n_layers):
            for attn, fused, parts in (("self_attn", "qkv", "qkv"), ("cross_attn", "kv", "kv")):
                prefix = f"{stack}.layers.{i}.{attn}."
                for kind in ("weight", "bias"):
                    name = f"{prefix}{fused}_proj.{kind}"
                    if name in split:
                        chunks = split.pop(name).chunk(len(parts))
                        split.update(
                            {f"{prefix}{p}_proj.{kind}": c for p, c in zip(parts, chunks, strict=True)}
                        )
    return split


def _to_halves(state: Mapping[str, Tensor], d_model: int) -> dict[str, Tensor]:
    """The same model with the interleaved sinusoidal table turned into the halves one: every
    model-dimension axis (the residual stream's) permuted by :func:`halves_order`. LayerNorm,
    attention and the feed-forward network commute with such a permutation, so the logits are
    unchanged."""
    order = halves_order(d_model)
    permuted: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if name.endswith(("norm.weight", "norm.bias", "out_proj.bias", "linear2.bias")):
            tensor = tensor[order]  # a vector over the model dimension
        elif name.endswith(("out_proj.weight", "linear2.weight")):
            tensor = tensor[order, :]  # writes into the residual stream
        elif name.endswith(("token.weight", "output.weight", "_proj.weight", "linear1.weight")):
            tensor = tensor[:, order]  # reads the residual stream (or embeds into it)
        permuted[name] = tensor
    return permuted


def state_to_hf(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Marian tensors (``MarianMTModel`` names, contiguous, unshared, safetensors-ready) of our
    state dict: fused projections are split, interleaved positions permuted to halves (see the
    module docstring), a missing output bias written as zeros; tied copies are left out, as
    ``save_pretrained`` does."""
    check_expressible(cfg)
    state = _split_fused(state, cfg) if cfg.fused_qkv else dict(state)
    if cfg.position == "sinusoidal":
        state = _to_halves(state, cfg.d_model)
    if cfg.tie_embeddings == "all":
        state.pop("tgt_embed.token.weight", None)
    if cfg.tie_embeddings != "none":
        state.pop(HEAD.ours, None)
    state.setdefault(LOGITS_BIAS.ours, torch.zeros(cfg.tgt_vocab_size))
    hf = rename(state, _rows(cfg), to_ours=False, our_shapes=_our_shapes(cfg))
    hf[LOGITS_BIAS.hf] = hf[LOGITS_BIAS.hf][None].contiguous()
    return hf


def _text_tokenizer(tokenizer: Tokenizer, path: Path) -> TextTokenizer:
    """``tokenizer`` (read from ``path``) with its special tokens' roles, unpadded and untruncated."""
    tokenizer.no_truncation()
    tokenizer.no_padding()
    try:
        return TextTokenizer(tokenizer)
    except RunDirError as exc:  # neither vaswani's nor Marian's special tokens
        raise DataError(f"{path}: {exc}") from None


def _load_tokenizer(path: Path) -> TextTokenizer:
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise DataError(f"{path}: not a readable tokenizer ({first_line(exc)})") from None
    return _text_tokenizer(tokenizer, path)


def _sentencepiece_tokenizers(src: Path) -> tuple[TextTokenizer, TextTokenizer, Path]:
    """The tokenizers of OPUS-MT's own files, as ``MarianTokenizer`` reads them: ``source.spm``
    (and ``target.spm`` for the target side, when there is one) with the ids of ``vocab.json``
    (and ``target_vocab.json`` for a separate target vocabulary, when there is one)."""
    files = opus_files(src)
    if not files:
        raise DataError(f"{src}: {SOURCE_SPM} without {VOCAB}, which gives its pieces their ids")
    vocab, target_vocab = files[VOCAB], files.get(TARGET_VOCAB, files[VOCAB])
    src_tok = _text_tokenizer(marian_tokenizer(files[SOURCE_SPM], vocab, source=True), vocab)
    tgt_tok = _text_tokenizer(marian_tokenizer(files[TARGET_SPM], target_vocab, source=False), target_vocab)
    return src_tok, tgt_tok, vocab


def read_tokenizers(src: Path) -> tuple[TextTokenizer, TextTokenizer, Path]:
    """The source and target tokenizers of a Marian folder and the file they came from:
    ``tokenizer.json`` (both sides, or the source side when a ``target_tokenizer.json`` is
    there too), as :func:`export_run` writes them, or else OPUS-MT's SentencePiece files (see
    :mod:`vaswani.interop.sentencepiece`)."""
    path = src / HF_TOKENIZER
    if not path.is_file():
        if (src / SOURCE_SPM).is_file():
            return _sentencepiece_tokenizers(src)
        raise DataError(f"{src}: no {HF_TOKENIZER}, nor {SOURCE_SPM} with {VOCAB}; a run directory needs one")
    src_tok = _load_tokenizer(path)
    target = src / HF_TARGET_TOKENIZER
    tgt_tok = _load_tokenizer(target) if target.is_file() else src_tok
    return src_tok, tgt_tok, path


def import_folder(src: Path, hf_config: Mapping[str, Any], out: Path) -> None:
    """Write a vaswani ``translation`` run directory into ``out`` from the Marian folder ``src``."""
    try:
        cfg = config_from_hf(hf_config)
    except ConfigError as exc:
        raise ConfigError(f"{src / RunDir.CONFIG}: {exc}") from None
    src_tok, tgt_tok, tokenizer_path = read_tokenizers(src)
    for tok, size, field in (
        (src_tok, cfg.src_vocab_size, "vocab_size"),
        (tgt_tok, cfg.tgt_vocab_size, "decoder_vocab_size"),
    ):
        if tok.vocab_size > size:
            raise DataError(
                f"{tokenizer_path}: vocabulary of {tok.vocab_size} does not fit the model's {field} of {size}"
            )
    try:
        check_token_ids(hf_config, src_tok, tgt_tok)
    except ConfigError as exc:
        raise ConfigError(f"{src / RunDir.CONFIG}: {exc}") from None
    tensors, weights_path = read_hf_weights(src)
    try:
        state = state_from_hf(tensors, cfg)
    except DataError as exc:
        raise DataError(f"{weights_path}: {exc}") from None
    model = Transformer(cfg)
    model.load_state_dict(state, strict=True)
    data = ParallelData(
        source="default", vocab_size=tgt_tok.vocab_size, shared_vocab=cfg.tie_embeddings == "all"
    )
    folder = RunDir(out)
    folder.write_config(RunConfig(TASK, cfg, registry.configure(TASK).train, data))  # the default recipe's
    folder.save_weights(model)
    for tokenizer, name in ((src_tok, SRC_TOKENIZER), (tgt_tok, TGT_TOKENIZER)):
        write_file(out / name, tokenizer.tokenizer.to_str(pretty=True).encode("utf-8"))
    copy_opus_files(src, out / SENTENCEPIECE_DIR)


def _special_tokens(tok: TextTokenizer) -> dict[str, str]:
    """``tokenizer_config.json``'s names of the special tokens of ``tok``."""
    names = {"eos_token": tok.eos_id, "unk_token": tok.unk_id, "pad_token": tok.pad_id}
    if tok.bos_id != tok.pad_id:
        names["bos_token"] = tok.bos_id
    return {role: str(tok.tokenizer.id_to_token(token_id)) for role, token_id in names.items()}


def export_run(run_dir: Path, run: RunConfig, out: Path) -> None:
    """Write a ``MarianMTModel`` folder into ``out`` from the ``translation`` run ``run_dir``:
    ``config.json``, ``generation_config.json`` (vaswani's decoding: greedy, nothing forced,
    Marian's pad never generated), ``model.safetensors``, and the tokenizers as ``tokenizer.json``
    (the source side; ``target_tokenizer.json`` beside it when the target's differs, which
    ``vaswani import-hf`` reads back) with a ``tokenizer_config.json``.

    A run imported from OPUS-MT's SentencePiece files gets them back (``source.spm``,
    ``target.spm``, ``vocab.json``, ``target_vocab.json``), and its ``tokenizer_config.json``
    names ``MarianTokenizer``: ``AutoTokenizer`` and ``MarianTokenizer`` then tokenize sources and
    targets (``text_target=``) as the original folder does. Any other run's ``tokenizer.json``
    loads as a ``PreTrainedTokenizerFast``, whose ``text_target`` uses the source side, which
    only shared vocabularies get right."""
    src_tok = TextTokenizer.load(run_dir / SRC_TOKENIZER)
    tgt_tok = TextTokenizer.load(run_dir / TGT_TOKENIZER)
    try:
        hf_config = config_to_hf(run.model, tgt_tok)
    except ConfigError as exc:
        raise ConfigError(f"{run_dir / RunDir.CONFIG}: {exc}") from None
    model = Transformer(run.model)
    RunDir(run_dir).load_weights(model)
    write_json(out / RunDir.CONFIG, hf_config)
    generation: dict[str, Any] = {
        "decoder_start_token_id": tgt_tok.bos_id,
        "eos_token_id": tgt_tok.eos_id,
        "pad_token_id": run.model.pad_id,
        "forced_eos_token_id": None,
        "max_length": run.model.max_len,
    }
    if tgt_tok.suppressed_ids:
        generation["bad_words_ids"] = [[token_id] for token_id in tgt_tok.suppressed_ids]
    write_json(out / GENERATION_CONFIG, generation)
    write_safetensors(out / RunDir.WEIGHTS, state_to_hf(model.state_dict(), run.model))
    source_json = src_tok.tokenizer.to_str(pretty=True)
    target_json = tgt_tok.tokenizer.to_str(pretty=True)
    write_file(out / HF_TOKENIZER, source_json.encode("utf-8"))
    if target_json != source_json:
        write_file(out / HF_TARGET_TOKENIZER, target_json.encode("utf-8"))
    tokenizer_config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if copy_opus_files(run_dir / SENTENCEPIECE_DIR, out):
        separate = (out / TARGET_VOCAB).is_file()
        tokenizer_config = {"tokenizer_class": "MarianTokenizer", "separate_vocabs": separate}
    write_json(
        out / "tokenizer_config.json",
        {**tokenizer_config, **_special_tokens(src_tok), "model_max_length": run.model.max_len},
    )
