"""ViT checkpoints in Hugging Face's format (``ViTForImageClassification``, ``ViTModel``), both ways.

Hugging Face's ViT is our :class:`~vaswani.models.vit.ViT`: a patch convolution, [CLS] and learned
positions, pre-LN blocks with biases everywhere, a final LayerNorm, a linear head on [CLS]. The key
mapping (:data:`TABLE` and :data:`HEAD_TABLE`, used in both directions; ``{i}`` is the layer, ``*`` is
``weight`` and ``bias``, nothing is transposed), in the names that ``save_pretrained`` writes
(transformers 5 renames them in memory, not in files):

=================================================  ==========================================
Hugging Face                                       vaswani
=================================================  ==========================================
vit.embeddings.cls_token                           cls_token
vit.embeddings.position_embeddings                 position_embeddings
vit.embeddings.patch_embeddings.projection.*       patch_embed.*
vit.encoder.layer.{i}.layernorm_before.*           blocks.layers.{i}.self_attn_norm.*
vit.encoder.layer.{i}.attention.attention.query.*  blocks.layers.{i}.self_attn.q_proj.*
vit.encoder.layer.{i}.attention.attention.key.*    blocks.layers.{i}.self_attn.k_proj.*
vit.encoder.layer.{i}.attention.attention.value.*  blocks.layers.{i}.self_attn.v_proj.*
vit.encoder.layer.{i}.attention.output.dense.*     blocks.layers.{i}.self_attn.out_proj.*
vit.encoder.layer.{i}.layernorm_after.*            blocks.layers.{i}.ffn_norm.*
vit.encoder.layer.{i}.intermediate.dense.*         blocks.layers.{i}.ffn.linear1.*
vit.encoder.layer.{i}.output.dense.*               blocks.layers.{i}.ffn.linear2.*
vit.layernorm.*                                    blocks.final_norm.*
classifier.* (ViTForImageClassification)           head.*
=================================================  ==========================================

An imported model fuses query, key and value into one ``qkv_proj`` (``fused_qkv``: one matrix product
instead of three), and an exported one splits it again. ``ViTModel`` checkpoints name the same tensors
without ``vit.`` and have no classifier; their ``pooler.dense.*`` (a tanh layer on [CLS], which nothing
of vaswani uses) and the masked-image-modelling ``embeddings.mask_token`` are skipped, and a model
exported without a head loads into ``ViTModel`` with a fresh pooler (its hidden states are ours).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.interop import fields
from vaswani.interop.bert import ACTIVATIONS_FROM_HF, ACTIVATIONS_TO_HF
from vaswani.interop.common import KeyMap, expand, rename, split_qkv
from vaswani.models.vit import ViT

MODEL_TYPE = "vit"
PREFIX = "vit."
KINDS = ("weight", "bias")
LAYER_MODULES = {
    "layernorm_before": "self_attn_norm",
    "attention.attention.query": "self_attn.q_proj",
    "attention.attention.key": "self_attn.k_proj",
    "attention.attention.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "layernorm_after": "ffn_norm",
    "intermediate.dense": "ffn.linear1",
    "output.dense": "ffn.linear2",
}
TABLE = (
    KeyMap("embeddings.cls_token", "cls_token"),
    KeyMap("embeddings.position_embeddings", "position_embeddings"),
    *(KeyMap(f"embeddings.patch_embeddings.projection.{kind}", f"patch_embed.{kind}") for kind in KINDS),
    *(
        KeyMap(f"encoder.layer.{{i}}.{hf}.{kind}", f"blocks.layers.{{i}}.{ours}.{kind}")
        for hf, ours in LAYER_MODULES.items()
        for kind in KINDS
    ),
    *(KeyMap(f"layernorm.{kind}", f"blocks.final_norm.{kind}") for kind in KINDS),
)
HEAD_TABLE = tuple(KeyMap(f"classifier.{kind}", f"head.{kind}") for kind in KINDS)
SKIPPED = re.compile(r"(vit\.)?(pooler\.dense\.(weight|bias)|embeddings\.mask_token)")
HEAD_ARCH, BASE_ARCH = "ViTForImageClassification", "ViTModel"

# The config mapping, used in both directions, with ViTConfig's defaults (ViT-Base/16 at 224²) for
# the fields a config.json leaves out. Sizes that do not fit each other (heads and the width, the
# image and the patches) are refused by our config, naming Hugging Face's field (config_from_hf).
CONFIG_TABLE = (
    fields.size("hidden_size", "d_model", 768),
    fields.size("num_hidden_layers", "n_layers", 12),
    fields.size("num_attention_heads", "n_heads", 12),
    fields.size("intermediate_size", "d_ff", 3072),
    fields.Field("hidden_act", "activation", str, "gelu", (), ACTIVATIONS_FROM_HF, ACTIVATIONS_TO_HF),
    fields.rate("hidden_dropout_prob", "dropout", 0.0),
    fields.rate("attention_probs_dropout_prob", "attn_dropout", 0.0),
    fields.Field("layer_norm_eps", "norm_eps", float, 1e-12),
    fields.constant("initializer_range", 0.02),
    fields.size("image_size", "image_size", 224),
    fields.size("patch_size", "patch_size", 16),
    fields.size("num_channels", "channels", 3),
    fields.required("qkv_bias", True, " (vaswani's ViT has every bias)"),
    fields.Field("encoder_stride", "patch_size", int, 16, imported=False),
)

# ViT's design, which our config leaves free: given to an imported config (with [CLS] pooling),
# required of an exported one (and [CLS] pooling of one with a classifier).
DESIGN = {
    "arch": "vit", "norm": "layernorm", "norm_placement": "pre", "bias": True, "ffn": "plain",
    "attn_window": None,
}  # fmt: skip


def config_from_hf(hf: Mapping[str, Any]) -> ModelConfig:
    """Our :class:`ModelConfig` of a ViT ``config.json``, by :data:`CONFIG_TABLE`.

    hidden_size → d_model, num_attention_heads → n_heads, intermediate_size → d_ff,
    num_hidden_layers → n_layers, hidden_act → activation, layer_norm_eps → norm_eps,
    hidden_dropout_prob → dropout, attention_probs_dropout_prob → attn_dropout, image_size →
    image_size, patch_size → patch_size, num_channels → channels; pre-LN, biases, [CLS] pooling, no
    drop-path and Hugging Face's initialisation are its design, and q/k/v are fused (see the module).
    A field ViT cannot follow (``qkv_bias`` false, a non-square ``image_size``, another activation, a
    size that does not fit) is refused with a :class:`ConfigError` naming it."""
    ours, _ = fields.from_hf(hf, MODEL_TYPE, CONFIG_TABLE)
    try:
        return ModelConfig(**DESIGN, **ours, fused_qkv=True, pooling="cls", vit_init="hf", drop_path=0.0)
    except ConfigError as exc:  # name Hugging Face's field, not ours
        named = re.search(r"'model\.(\w+)'", str(exc))
        hf_name = next((row.hf for row in CONFIG_TABLE if named and row.ours == named[1]), None)
        raise ConfigError(f"field '{hf_name}': {exc}" if hf_name else str(exc)) from None


def class_names(hf: Mapping[str, Any], n_classes: int) -> list[str]:
    """The names of a checkpoint's ``n_classes`` classes from its ``id2label`` (``LABEL_i`` where it
    has none, as Hugging Face names them)."""
    labels = hf.get("id2label") or {}
    if not isinstance(labels, dict):
        raise ConfigError(f"field 'id2label': expected a mapping of class ids to names, got {labels!r}")
    names = [labels.get(str(i), labels.get(i, f"LABEL_{i}")) for i in range(n_classes)]  # type: ignore[call-overload]
    if len(set(names)) != len(names) or not all(isinstance(name, str) and name for name in names):
        raise ConfigError(
            f"field 'id2label': {n_classes} distinct, non-empty class names needed, got {names}"
        )
    return names


def check_expressible(cfg: ModelConfig, with_head: bool) -> None:
    """Refuse, naming the field, a config that Hugging Face's ViT cannot express. Sizes, dropout,
    activation, eps, fused q/k/v and the initialisation are free, and so is drop-path (training only);
    a classifier needs [CLS] pooling."""
    fields.refuse_grouped_heads(cfg, "ViT")
    fields.require(cfg, "ViT", {**DESIGN, "pooling": "cls"} if with_head else DESIGN)


def config_to_hf(cfg: ModelConfig, classes: Sequence[str]) -> dict[str, Any]:
    """The ``config.json`` of ``cfg`` as a ``ViTForImageClassification`` of ``classes`` (or a
    ``ViTModel`` when there are none): the inverse of :func:`config_from_hf` (by :data:`CONFIG_TABLE`) and
    :func:`class_names`."""
    check_expressible(cfg, bool(classes))
    config = fields.to_hf(cfg, MODEL_TYPE, HEAD_ARCH if classes else BASE_ARCH, CONFIG_TABLE)
    if classes:
        config["id2label"] = {str(i): name for i, name in enumerate(classes)}
        config["label2id"] = {name: i for i, name in enumerate(classes)}
    return config


def _rows(cfg: ModelConfig, with_head: bool) -> list[KeyMap]:
    """The table for ``cfg``: with the classifier, the encoder's Hugging Face names carry ``vit.``."""
    rows = expand(TABLE, cfg.n_layers)
    if not with_head:
        return rows
    return [KeyMap(PREFIX + row.hf, row.ours) for row in rows] + list(HEAD_TABLE)


def _our_shapes(cfg: ModelConfig, n_classes: int) -> dict[str, tuple[int, ...]]:
    """The shape of each of our tensors with separate q/k/v (on the meta device: no memory)."""
    with torch.device("meta"):
        model = ViT(cfg.replace(fused_qkv=False), n_classes)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def n_classes_of(tensors: Mapping[str, Tensor]) -> int:
    """The classes of a checkpoint's classifier (``classifier.weight``'s rows; 0 without one)."""
    head = tensors.get(HEAD_TABLE[0].hf)
    return 0 if head is None else int(head.shape[0])


def state_from_hf(tensors: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Our state dict (for ``ViT(cfg, n_classes_of(tensors)).load_state_dict(..., strict=True)``) of
    ViT tensors, named with or without ``vit.``, by the tables; q/k/v fused when ``cfg.fused_qkv``. A
    missing, unexpected or misshapen tensor is a :class:`~vaswani.errors.DataError` naming it; the
    pooler and the mask token are skipped."""
    check_expressible(cfg, False)
    n_classes = n_classes_of(tensors)
    named: dict[str, Tensor] = {}
    for name, tensor in tensors.items():
        if SKIPPED.fullmatch(name):
            continue
        base = name.removeprefix(PREFIX)
        named[PREFIX + base if n_classes and not base.startswith("classifier.") else base] = tensor
    state = rename(named, _rows(cfg, bool(n_classes)), to_ours=True, our_shapes=_our_shapes(cfg, n_classes))
    return _fuse_qkv(state) if cfg.fused_qkv else state


def state_to_hf(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """ViT tensors (``ViTForImageClassification`` names when ``state`` has a head, ``ViTModel``
    names without; contiguous, safetensors-ready) of our state dict, fused q/k/v split."""
    n_classes = int(state["head.weight"].shape[0]) if "head.weight" in state else 0
    check_expressible(cfg, bool(n_classes))
    state = split_qkv(state, cfg) if cfg.fused_qkv else dict(state)
    return rename(state, _rows(cfg, bool(n_classes)), to_ours=False, our_shapes=_our_shapes(cfg, n_classes))


def _fuse_qkv(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Each layer's ``q_proj``, ``k_proj`` and ``v_proj`` as one ``qkv_proj`` (stacked in that order)."""
    fused: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if ".self_attn.q_proj." in name:
            parts = [state[name.replace(".q_proj.", f".{p}_proj.")] for p in "qkv"]
            fused[name.replace(".q_proj.", ".qkv_proj.")] = torch.cat(parts)
        elif ".self_attn.k_proj." not in name and ".self_attn.v_proj." not in name:
            fused[name] = tensor
    return fused
