"""BERT checkpoints in Hugging Face's format (``BertModel``, ``BertForMaskedLM``,
``BertForPreTraining``), both ways.

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
cls.seq_relationship.* (BertForPreTraining)       nsp.linear.*
================================================  ==========================================

The decoder's bias is ``cls.predictions.bias`` in a tied head, which ``decoder.bias`` only aliases.
An untied head (``tie_word_embeddings`` false) of transformers 5 unties the bias too and computes
with ``decoder.bias``: it is read when present, and written beside ``cls.predictions.bias`` (as
its copy, which older versions read).

Run directories: a checkpoint with an MLM head (``cls.predictions.*``, as ``BertForMaskedLM``
and ``BertForPreTraining`` have) becomes a run of task ``mlm`` (:data:`MLM_TASK`), whose model is
:class:`~vaswani.models.bert.MaskedLM` (:class:`Bert` as ``bert.`` plus the head as ``head.``,
Hugging Face's own layout); with ``BertForPreTraining``'s next-sentence head
(``cls.seq_relationship.*``, on the pooler) too, the run's ``data.nsp`` is true and its model keeps
that head as ``nsp.``, so that training it further (``--resume``) goes on with both objectives;
one without (``BertModel``, such as the sentence-transformers
checkpoint all-MiniLM-L6-v2) becomes a run of task ``encoder`` (:data:`ENCODER_TASK`), whose
model is :class:`Bert` alone, so that a command that needs the head (fill-mask) refuses it by its
task. The ``pooler`` config field records whether the pooler came with the checkpoint. The run's
``tokenizer.json`` is a :class:`~vaswani.tokenizer.WordPieceTokenizer`'s. An ``mlm`` run exports as
``BertForMaskedLM`` (its tensors under ``bert.``), or as ``BertForPreTraining`` when it has the
next-sentence head (``data.nsp``), an ``encoder`` run as ``BertModel`` (no prefix).

Keys are read with or without the ``bert.`` prefix; the ``position_ids`` and ``token_type_ids``
buffers, a tied head's ``cls.predictions.decoder.weight`` and ``.bias`` (aliases of the word
embedding and ``cls.predictions.bias``) and the next-sentence head of a checkpoint without an MLM
head (``BertForNextSentencePrediction``: an ``encoder`` run) are skipped; the ``gamma``/``beta``
names of TensorFlow-era checkpoints read as ``weight``/``bias``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.interop import fields
from vaswani.interop.common import KeyMap
from vaswani.models.bert import POOLER_KEYS
from vaswani.pipelines.bert import ENCODER_TASK, MLM_TASK

MODEL_TYPE = "bert"
PREFIX = "bert."
VOCAB = "vocab.txt"

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
NSP_PREFIX = "cls.seq_relationship."  # BertForPreTraining's next-sentence head
NSP_TABLE = tuple(KeyMap(f"{NSP_PREFIX}{kind}", f"nsp.linear.{kind}") for kind in KINDS)
SKIPPED = re.compile(r"(bert\.)?embeddings\.(position_ids|token_type_ids)")  # buffers, not weights
OLD_NORM_NAME = re.compile(r"(.*LayerNorm)\.(gamma|beta)")

# Hugging Face activation names → ours, and back (ViT's too).
ACTIVATIONS_FROM_HF = fields.activations(
    "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish"
)
ACTIVATIONS_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}

# The config mapping, used in both directions, with BertConfig's defaults (BERT-base) for the
# fields a config.json leaves out (a null pad_token_id too). The settings at the end change the
# computation in a way Bert does not when they have another value: they are refused.
CONFIG_TABLE = (
    fields.size("vocab_size", "vocab_size", 30522),
    fields.size("hidden_size", "d_model", 768),
    fields.size("num_hidden_layers", "n_layers", 12),
    fields.Field(
        "num_attention_heads", "n_heads", int, 12, (fields.at_least_one, fields.divides("hidden_size"))
    ),
    fields.size("intermediate_size", "d_ff", 3072),
    fields.Field("hidden_act", "activation", str, "gelu", (), ACTIVATIONS_FROM_HF, ACTIVATIONS_TO_HF),
    fields.rate("hidden_dropout_prob", "dropout", 0.1),
    fields.rate("attention_probs_dropout_prob", "attn_dropout", 0.1),
    fields.size("max_position_embeddings", "max_len", 512),
    fields.size("type_vocab_size", "type_vocab_size", 2),
    fields.Field("layer_norm_eps", "norm_eps", float, 1e-12, (fields.positive,)),
    fields.constant("initializer_range", 0.02),
    fields.Field("pad_token_id", "pad_id", int, 0, (fields.token_id("vocab_size"),), optional=True),
    fields.tied_head(True),
    *(
        fields.required(name, value, f" (only {json.dumps(value)})")
        for name, value in (
            ("position_embedding_type", "absolute"),
            ("is_decoder", False),
            ("add_cross_attention", False),
        )
    ),
)

# BERT's design, which our config leaves free: given to an imported config, required of an exported one.
DESIGN = {
    "arch": "encoder_only", "norm": "layernorm", "norm_placement": "post", "position": "learned",
    "attn_window": None, "bias": True, "scale_embeddings": False, "ffn": "plain",
}  # fmt: skip


def config_from_hf(hf: Mapping[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` of a BERT ``config.json``, by :data:`CONFIG_TABLE`.

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
    ours, _ = fields.from_hf(hf, MODEL_TYPE, CONFIG_TABLE)
    return ModelConfig(**DESIGN, **ours, fused_qkv=False, pooler=True)


def check_expressible(cfg: ModelConfig) -> None:
    """Refuse, naming the field, a config that BERT cannot express. Sizes, dropout, activation,
    eps, ties, the pooler and fused q/k/v are free; everything else must be BERT's."""
    fields.refuse_grouped_heads(cfg, "BERT")
    fields.require(cfg, "BERT", DESIGN)
    if cfg.type_vocab_size < 1:
        raise ConfigError("config field 'model.type_vocab_size': BERT needs segment embeddings (>= 1), got 0")


def config_to_hf(cfg: ModelConfig, mlm_head: bool, nsp: bool = False) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` as a ``BertForMaskedLM`` (``mlm_head``), a
    ``BertForPreTraining`` (``mlm_head`` and ``nsp``) or a ``BertModel`` (the inverse of
    :func:`config_from_hf`, by :data:`CONFIG_TABLE`)."""
    check_expressible(cfg)
    architecture = ("BertForPreTraining" if nsp else "BertForMaskedLM") if mlm_head else "BertModel"
    return fields.to_hf(cfg, MODEL_TYPE, architecture, CONFIG_TABLE)


def task_of(mlm_head: bool) -> str:
    """The task of a BERT run: ``mlm`` with the MLM head, ``encoder`` without."""
    return MLM_TASK if mlm_head else ENCODER_TASK
