"""Typed, validated configuration: the model (:class:`ModelConfig`) and its training (:class:`TrainConfig`).

Every variant is a field with a string value (``norm="rmsnorm"``, ``norm_placement="pre"``,
``position="relative"``) resolved to classes in one place (the layers). A
config is checked when it is built, whether it comes from code, flags, a YAML
file or a run directory's ``config.json``, and a bad one raises
:class:`~vaswani.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vaswani.aliases import (
    COMBINED_ACTIVATIONS,
    COMBINED_NORMS,
    SIDES,
    check_aliases,
    merged_model,
    precision_of_bf16,
    resolved_sides,
    split_combined,
    split_combined_activation,
    split_combined_norm,
)
from vaswani.config.positions import POSITIONS, position_problem
from vaswani.config.positions import ROTARY as ROTARY  # read by the exporters
from vaswani.errors import ConfigError
from vaswani.runtime import DEVICE_NAME, DEVICES
from vaswani.schema import Config, flag, no_flag

ARCHS = ("encoder_decoder", "decoder_only", "encoder_only", "vit", "rnn")
NORMS = ("layernorm", "rmsnorm")
NORM_PLACEMENTS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
FFNS = ("plain", "gated")
TIES = ("none", "output", "all")
SCHEDULES = ("inverse_sqrt", "cosine", "constant")
OPTIMIZERS = ("adam", "adamw")
PRECISIONS = ("fp32", "bf16", "fp16")
IMAGE_POOLS = ("cls", "mean")
VIT_INITS = ("hf", "timm")
SELECT_BY = ("bleu", "chrf", "loss")
LORA_TARGETS = (
    "q_proj", "k_proj", "v_proj", "out_proj", "linear1", "linear2", "gate_proj", "up_proj", "down_proj"
)  # fmt: skip
"""The projections that ``--lora-targets`` names (attention's, the plain and the gated FFN's)."""
FAMILY_FIELDS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("image_size", "patch_size", "channels", "pooling", "vit_init"), ("vit",)),
    **dict.fromkeys(("type_vocab_size", "pooler"), ("encoder_only",)),
}
"""The model fields that only some archs read → those archs; every other field is every arch's.
A run's ``config.json`` holds its own family's fields (:meth:`ModelConfig.to_dict`)."""


def padded_vocab_size(n: int, multiple: int = 64) -> int:
    """The embedding rows for a vocabulary of ``n``: ``n`` rounded up to a ``multiple`` (aligned
    matrix shapes; the extra rows are never targets, see the tasks' losses)."""
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class ModelConfig(Config):
    """The architecture. Defaults are the paper's base model (Vaswani et al. 2017, table 3).

    ``norm`` is the norm's kind (``layernorm``, ``rmsnorm``) and ``norm_placement`` where it
    sits: ``post`` (the paper's, after each residual sum) or ``pre`` (before each sublayer, with
    a final norm after each stack). ``norm_placement`` None takes the placement from an old
    combined ``norm`` (``post_ln``, ``pre_ln``, ``pre_rmsnorm``, still read), else ``post``; once
    built the config holds the two fields. ``tie_embeddings``: ``output`` shares the
    target embedding with the output projection, ``all`` also shares the
    source embedding (needs one vocabulary, as the paper's shared BPE).

    ``vocab_size`` and ``n_layers`` are the vocabulary and the depth of every stack. An
    encoder-decoder's ``src_vocab_size``, ``tgt_vocab_size``, ``n_encoder_layers`` and
    ``n_decoder_layers`` override them per side; once built they hold each side's value (None:
    the neutral field's), and the neutral field the sides' common value when they agree. A
    single-stack model (GPT, BERT) has them None, and reads its side's old names as aliases that
    win when given (a GPT's ``tgt_vocab_size`` is its ``vocab_size``, ``n_decoder_layers`` its
    ``n_layers``; a BERT's ``src_vocab_size`` and ``n_encoder_layers``); the other side's are
    dropped.

    ``arch="decoder_only"`` is a GPT, with the context ``max_len``.

    ``arch="encoder_only"`` is a BERT, with the context ``max_len``. Its embeddings
    add ``type_vocab_size`` segment embeddings (0: none) and a norm; ``pooler`` adds the [CLS]
    pooler (dense + tanh); ``tie_embeddings`` other than ``none`` ties the MLM head's decoder to
    the word embeddings.

    ``position="sinusoidal_halves"`` is the paper's table with the sines in the first half of
    the vector and the cosines in the second (Marian's layout) instead of interleaved;
    ``output_bias`` adds a bias to the output projection (Marian's ``final_logits_bias``).
    ``position="rope"`` (half-split, Llama's) and ``"rope_interleaved"`` (the paper's, GPT-J's)
    rotate queries and keys with the base ``rope_theta``; ``"alibi"`` adds Press et al.'s linear
    biases to the scores, ``"t5_bias"`` T5's learned bias of each head over ``rel_buckets``
    log-spaced distances up to ``rel_max_distance`` (Raffel et al. 2020). None adds a position
    embedding.

    ``ffn="plain"`` is the paper's feed-forward, act(x W_1) W_2 (2 · d_model · d_ff weights);
    ``"gated"`` is Shazeer's (2020) gated one, (act(x W_gate) ⊙ x W_up) W_down (3 · d_model · d_ff
    weights), with ``activation`` as act: ``silu`` gives SwiGLU (Llama's), ``gelu`` GeGLU. The
    usual d_ff = 2/3 · 4 · d_model keeps the plain FFN's parameter count; set it through
    ``d_ff``. See :class:`~vaswani.layers.feedforward.FeedForward`.

    ``attn_window`` w is local attention (:mod:`vaswani.layers.local`): query i attends key j iff
    ``|i − j| <= w`` (causal: the query itself and the w keys before it, w + 1 keys; Mistral's and
    Hugging Face's ``sliding_window`` counts the query, so theirs is our w + 1); at most ``max_len``.

    ``n_kv_heads`` is grouped-query attention's count of key/value heads (Ainslie et al. 2023): each
    group of ``n_heads / n_kv_heads`` query heads shares one key/value head, and the KV cache keeps
    only those; 1 is multi-query attention, None (or ``n_heads``) the paper's multi-head attention.

    ``arch="vit"`` is a Vision Transformer (Dosovitskiy et al. 2021): ``image_size``² images of
    ``channels`` channels in ``patch_size``² patches (dividing ``image_size``), [CLS] and learned
    positions, pre-LN blocks, a head on [CLS] or the patches' mean (``pooling``). Where Hugging Face
    and timm differ, each is a field: ``norm_eps`` (1e-12 against 1e-6), ``vit_init`` (``hf``:
    truncated N(0, 0.02) for the patch projection, linears, [CLS], positions; ``timm``: the same but
    N(0, 1e-6) for [CLS] and PyTorch's default for the patch projection) and ``drop_path``: stochastic
    depth in any stack, block i of N dropping its residual branches per sample with probability
    p · i / (N − 1) in training, the kept ones scaled by 1 / (1 − p_i) (timm's and DeiT's; HF's ViT
    has none; 0, the default, is off).
    """

    _section = "model"

    arch: str = flag("encoder_decoder", "the model's stacks", choices=ARCHS)
    vocab_size: int = no_flag(
        32000, range="(0, inf)"
    )  # set from the tokenizer (--vocab-size sizes the tokenizer)
    src_vocab_size: int | None = flag(None, "source vocabulary (set from the tokenizer)", range="(0, inf)")
    tgt_vocab_size: int | None = flag(None, "target vocabulary (set from the tokenizer)", range="(0, inf)")
    d_model: int = flag(512, "model width", range="(0, inf)")
    n_heads: int = flag(8, "attention heads", flag="--heads", range="(0, inf)")
    n_kv_heads: int | None = flag(
        None,
        "key/value heads shared by groups of query heads (1: multi-query; default: --heads)",
        range="[1, inf)",
    )
    d_ff: int = flag(2048, "feed-forward width", range="(0, inf)")
    n_layers: int = flag(6, "layers of every stack of the model", flag="--layers", range="(0, inf)")
    n_encoder_layers: int | None = flag(
        None, "encoder layers (default: --layers)", flag="--encoder-layers", range="(0, inf)"
    )
    n_decoder_layers: int | None = flag(
        None, "decoder layers (default: --layers)", flag="--decoder-layers", range="(0, inf)"
    )
    dropout: float = flag(0.1, range="[0, 1)")
    attn_dropout: float = flag(0.0, "dropout of the attention weights", range="[0, 1)")
    activation: str = flag(
        "relu",
        "the activation (swiglu, geglu: the gated feed-forward with silu, gelu)",
        choices=(*ACTIVATIONS, *COMBINED_ACTIVATIONS),
    )
    ffn: str = flag(
        "plain", "the feed-forward: plain (the paper's) or gated (with silu: SwiGLU)", choices=FFNS
    )
    norm: str = flag(
        "layernorm",
        "the norm's kind (or an old post_ln, pre_ln, pre_rmsnorm)",
        choices=(*NORMS, *COMBINED_NORMS),
    )
    norm_placement: str | None = flag(
        None, "post (the paper's) or pre (default post)", choices=NORM_PLACEMENTS
    )
    norm_eps: float = flag(1e-5, "the norms' epsilon", range="(0, inf)")
    position: str = flag("sinusoidal", choices=tuple(POSITIONS))
    max_len: int = flag(512, "longest sequence (a language model's context)", range="(0, inf)")
    rel_clip: int = flag(16, "clipping distance k of relative positions", range="(0, inf)")
    rel_buckets: int = flag(32, "buckets of t5_bias's log-spaced distances", range="[4, inf)")
    rel_max_distance: int = flag(128, "distance from which t5_bias shares one bucket", range="(0, inf)")
    rope_theta: float = flag(10000.0, "the base theta of rotary positions' angles", range="(0, inf)")
    attn_window: int | None = flag(
        None,
        "local attention: keys at most N positions away (causal: itself + N before)",
        metavar="N",
        range="[1, inf)",
    )
    fused_qkv: bool = flag(False, "one projection for queries, keys and values")
    bias: bool = flag(True, "biases in the projections and norms")
    scale_embeddings: bool = flag(True, "multiply embeddings by sqrt(d_model)")
    tie_embeddings: str = flag("all", "embedding tying", flag="--tie", choices=TIES)
    pad_id: int = no_flag(0, range="[0, inf)")
    output_bias: bool = flag(False, "a bias on the output projection")
    type_vocab_size: int = flag(2, "segment embeddings (BERT; 0: none)", range="[0, inf)")
    pooler: bool = flag(True, "the [CLS] pooler (BERT)")
    word_dim: int | None = no_flag(None, range="(0, inf)")  # word vectors' width, projected (None: d_model)
    image_size: int = flag(
        224, "side of a ViT's square images, in pixels (at most 4096)", range="(0, 4096]"
    )  # a data set is read whole at this size, before the model is built
    patch_size: int = flag(
        16, "side of a ViT's square patches, in pixels (divides --image-size)", range="(0, inf)"
    )
    channels: int = flag(3, "colour channels of a ViT's images (3: RGB, 1: greyscale)", range="(0, inf)")
    pooling: str = flag(
        "cls", "a ViT's image vector: the [CLS] state (default) or the patches' mean", choices=IMAGE_POOLS
    )
    vit_init: str = flag("hf", "a ViT's initialisation: hf (Hugging Face's) or timm", choices=VIT_INITS)
    drop_path: float = flag(
        0.0, "stochastic depth: the last block's rate, from 0 at the first (0: off)", range="[0, 1)"
    )

    def _check(self) -> None:
        self._one_of("arch", ARCHS)
        self._split_norm()
        self._split_activation()
        self._one_of("norm_placement", NORM_PLACEMENTS)
        self._one_of("position", tuple(POSITIONS))
        self._one_of("activation", ACTIVATIONS)
        self._one_of("ffn", FFNS)
        self._one_of("tie_embeddings", TIES)
        self._one_of("pooling", IMAGE_POOLS)
        self._one_of("vit_init", VIT_INITS)
        for name, value in resolved_sides(vars(self)).items():  # see vaswani.aliases
            object.__setattr__(self, name, value)
        if self.image_size % self.patch_size:
            self._fail(
                "image_size", f"must be divisible by patch_size={self.patch_size}, got {self.image_size}"
            )
        if self.d_model % self.n_heads:
            self._fail("n_heads", f"must divide d_model={self.d_model}, got {self.n_heads}")
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            self._fail("n_kv_heads", f"must divide n_heads={self.n_heads}, got {self.n_kv_heads}")
        if (problem := position_problem(self)) is not None:
            self._fail(*problem)
        if self.attn_window is not None and self.attn_window > self.max_len:
            self._fail("attn_window", f"must be <= max_len={self.max_len}, got {self.attn_window}")
        if (
            self.arch in ("encoder_decoder", "rnn")
            and self.tie_embeddings == "all"
            and self.src_vocab_size != self.tgt_vocab_size
        ):
            self._fail(
                "tie_embeddings",
                "'all' needs one shared vocabulary (src_vocab_size == tgt_vocab_size); "
                "use 'output' with separate vocabularies",
            )
        vocab = self.vocab_size
        if self.src_vocab_size is not None and self.tgt_vocab_size is not None:
            vocab = min(self.src_vocab_size, self.tgt_vocab_size)
        if not 0 <= self.pad_id < vocab:
            self._fail("pad_id", f"must be a valid token id, got {self.pad_id}")

    def _split_norm(self) -> None:
        """Hold an old combined ``norm`` as its kind and placement; no placement means ``post``."""
        if self.norm not in (*NORMS, *COMBINED_NORMS):
            self._fail(
                "norm",
                f"must be one of {', '.join(NORMS)} (or {', '.join(COMBINED_NORMS)}); got {self.norm!r}",
            )
        fields = split_combined_norm({"norm": self.norm, "norm_placement": self.norm_placement})
        object.__setattr__(self, "norm", fields["norm"])
        object.__setattr__(self, "norm_placement", fields["norm_placement"] or "post")

    def _split_activation(self) -> None:
        """Hold a combined ``activation`` (``swiglu``) as the gated feed-forward and its activation
        (the sources' contradicting ``ffn`` was refused where they merged: here ``ffn`` may be the
        default)."""
        fields = split_combined_activation({"activation": self.activation})
        object.__setattr__(self, "activation", fields["activation"])
        object.__setattr__(self, "ffn", fields.get("ffn", self.ffn))

    def to_dict(self) -> dict[str, Any]:
        """The fields of this model's family, as ``config.json`` holds them: a field that only other
        archs read (:data:`FAMILY_FIELDS`) is left out at its default, which reading gives back
        (old files, which hold every field, read as before)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return {
            name: value
            for name, value in super().to_dict().items()
            if self.arch in FAMILY_FIELDS.get(name, (self.arch,)) or value != defaults[name]
        }

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with ``changes``; an old combined ``norm`` among them sets the placement too (and
        ``activation: swiglu`` the gated feed-forward), and
        ``n_layers`` (``vocab_size``) without per-side values sets every stack."""
        changes = split_combined(changes)
        for neutral, sides in SIDES.items():
            if neutral in changes:
                changes = {**dict.fromkeys(sides), **changes}
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> ModelConfig:
        """Build from a mapping (one source: a file, a run directory's ``config.json``); unknown
        fields are refused, and so is a single-stack model's field given with an old name of
        another value (``n_layers: 4`` and ``n_decoder_layers: 6`` for a GPT)."""
        if isinstance(data, dict):
            check_aliases(data, source)
        return super().from_dict(data, source)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named architecture, e.g. ``ModelConfig.preset("transformer-base")``."""
        if name not in presets():
            raise ConfigError(f"unknown preset '{name}'; choose from {', '.join(presets())}")
        fields = merged_model(split_combined(presets()[name]), overrides)
        return cls.from_dict(fields, source=f"preset '{name}'")


PRESETS_FILE = Path(__file__).parents[1] / "recipes" / "presets.yaml"


@functools.cache
def presets() -> dict[str, dict[str, Any]]:
    """The named architectures of ``recipes/presets.yaml``: name → model fields."""
    loaded = yaml.safe_load(PRESETS_FILE.read_text(encoding="utf-8"))
    return {name: dict(fields or {}) for name, fields in loaded.items()}


@dataclass(frozen=True)
class TrainConfig(Config):
    """How to train. Defaults follow the paper (Adam β=(0.9, 0.98), ε=1e-9, warmup, label smoothing 0.1).

    A batch holds about ``batch_tokens`` tokens (translation, language models), or
    ``batch_size`` examples for tasks that batch by example (classification).

    ``lr`` is the peak learning rate reached at the end of warmup; the
    ``inverse_sqrt`` schedule is the paper's d_model^-0.5 · min(step^-0.5,
    step · warmup^-1.5) rescaled to that peak.

    ``device`` is where training runs (``auto``: CUDA, else MPS, else the CPU; ``cpu``, ``cuda``,
    ``cuda:N``, ``mps``); under several processes each takes its own GPU. ``precision`` is fp32,
    bf16 autocast, or fp16 autocast with a gradient scaler (CUDA only); a recipe's ``auto`` (bf16
    where the device computes it natively) is decided before the config is built. ``tf32`` lets
    CUDA's fp32 matmuls use TF32. ``compile`` trains through ``torch.compile``,
    ``grad_checkpointing`` recomputes each block's activations in the backward pass, ``fsdp``
    shards parameters, gradients and optimizer state across processes (FSDP2). None of these
    changes what a run is: a run directory trained on one device decodes and resumes on another.

    Every ``log_every`` steps ``train_log.csv`` gets a row of that window's mean train loss, the
    learning rate, the mean gradient norm (before clipping) and tokens/s; every ``eval_every`` steps a
    row of validation metrics. ``tensorboard`` writes the same scalars as TensorBoard event files.

    ``checkpoint_every`` (steps) writes a checkpoint, keeping the newest ``keep_checkpoints``;
    ``deterministic`` makes torch use deterministic algorithms on one thread, so that a run,
    stopped and resumed or not, gives bit-identical weights on the CPU. A step whose loss or
    gradient is not finite is skipped; ``max_bad_steps`` such steps in a row stop training.

    ``lora_rank`` R trains low-rank adapters (:mod:`vaswani.layers.lora`) of a run that starts from
    a pretrained one (``--init``) instead of all its weights: each projection named in
    ``lora_targets`` computes x Wᵀ + b + (``lora_alpha`` / R) dropout(x) Aᵀ Bᵀ with W and b frozen,
    A (R, in) and B (out, R) trained (B from zero), dropout ``lora_dropout``; a task's new head is
    trained in full. The run's ``model.safetensors`` holds the merged weights, W + (α / R) B A, and
    ``adapter.safetensors`` the adapters alone.
    """

    _section = "train"

    batch_tokens: int = flag(4096, "tokens per batch (translation, language models)", range="(0, inf)")
    batch_size: int = flag(
        32, "examples per batch (fine-tuning tasks, whose batches are examples)", range="(0, inf)"
    )
    max_steps: int = flag(100_000, "optimizer steps to train for", range="(0, inf)")
    max_minutes: float | None = flag(None, "stop after this many minutes of training steps", range="(0, inf)")
    epochs: float | None = flag(None, "stop after this many passes over the training data", range="(0, inf)")
    lr: float = flag(7e-4, "peak learning rate", range="(0, inf)")
    warmup_steps: int = flag(4000, "warmup steps", flag="--warmup", range="[0, inf)")
    schedule: str = flag("inverse_sqrt", choices=SCHEDULES)
    min_lr: float = flag(0.0, "where the cosine schedule ends", range="[0, inf)")
    optimizer: str = flag("adam", choices=OPTIMIZERS)
    betas: tuple[float, float] = flag((0.9, 0.98), "Adam's beta1,beta2", metavar="B1,B2", range="[0, 1)")
    eps: float = flag(1e-9, "Adam's epsilon", range="(0, inf)")
    weight_decay: float = flag(0.0, "AdamW decay of the matrices", range="[0, inf)")
    label_smoothing: float = flag(0.1, range="[0, 1)")
    clip_norm: float | None = flag(1.0, "clip the gradient's norm to this", range="(0, inf)")
    accumulate: int = flag(1, "batches per optimizer step", range="(0, inf)")
    eval_every: int = flag(1000, "evaluate every N steps", metavar="N", range="(0, inf)")
    log_every: int = flag(
        10,
        "a row of train_log.csv every N steps (mean train loss, lr, gradient norm, tokens/s)",
        metavar="N",
        range="(0, inf)",
    )
    tensorboard: bool = flag(False, "also write TensorBoard event files to RUN_DIR/tensorboard")
    mlflow: str | None = flag(
        None,
        "also log to MLflow at this tracking URI (http://HOST:PORT, or a local folder: a file store)",
        metavar="URI",
    )
    eval_sentences: int = flag(500, "validation sentences translated for BLEU", metavar="N", range="(0, inf)")
    checkpoint_every: int | None = flag(
        None, "a checkpoint every STEPS steps", metavar="STEPS", range="(0, inf)"
    )
    keep_checkpoints: int = flag(
        3,
        "keep the newest N checkpoints (5 or 20 to average them with vaswani average)",
        metavar="N",
        range="(0, inf)",
    )
    device: str = flag("auto", "auto (CUDA, else MPS, else the CPU), cpu, cuda, cuda:N or mps")
    precision: str = flag(
        "fp32",
        "fp32, bf16 autocast, fp16 autocast with a gradient scaler (CUDA)",
        choices=(*PRECISIONS, "auto"),
    )
    tf32: bool = flag(False, "TF32 matmuls on CUDA (fp32 inputs, 10-bit mantissa products)")
    compile: bool = flag(False, "train through torch.compile (falls back to eager, saying why)")
    grad_checkpointing: bool = flag(False, "recompute each block's activations in the backward pass")
    fsdp: bool = flag(False, "shard parameters, gradients and optimizer state across processes (FSDP2)")
    seed: int = flag(0, range="[0, 4294967296)")
    max_bad_steps: int = flag(
        10, "stop after N steps in a row with a non-finite loss", metavar="N", range="(0, inf)"
    )
    threads: int | None = flag(None, range="(0, inf)")
    deterministic: bool = flag(
        False, "deterministic algorithms on one thread: the same weights on every rerun or resume (CPU)"
    )
    select_by: str | None = flag(None, "also keep the best weights by this metric", choices=SELECT_BY)
    lora_rank: int | None = flag(
        None,
        "train rank-R adapters of the --init model instead of all its weights (LoRA)",
        flag="--lora",
        metavar="R",
        range="(0, inf)",
    )
    lora_alpha: float = flag(
        8.0, "LoRA's alpha: the adapters' update is scaled by alpha / R", range="(0, inf)"
    )
    lora_dropout: float = flag(0.0, "dropout on the adapters' input", range="[0, 1)")
    lora_targets: tuple[str, ...] = flag(
        ("q_proj", "v_proj"), f"projections to adapt, of {','.join(LORA_TARGETS)}", metavar="NAMES"
    )

    def _check(self) -> None:
        self._one_of("schedule", SCHEDULES)
        self._one_of("optimizer", OPTIMIZERS)
        self._one_of("precision", PRECISIONS)
        if self.select_by is not None:
            self._one_of("select_by", SELECT_BY)
        if not DEVICE_NAME.fullmatch(self.device):
            self._fail("device", f"expected {DEVICES}; got {self.device!r}")
        if self.min_lr > self.lr:
            self._fail("min_lr", f"must be in [0, lr={self.lr}], got {self.min_lr}")
        if self.deterministic and self.threads not in (None, 1):
            self._fail("threads", f"a deterministic run uses one thread, got {self.threads}")
        if self.lora_rank is None:
            changed = [
                f.name
                for f in dataclasses.fields(self)
                if f.name.startswith("lora_") and getattr(self, f.name) != f.default
            ]
            if changed:
                self._fail(changed[0], "adapter settings need a rank: --lora R")
        elif self.fsdp:
            self._fail("fsdp", "LoRA adapters are not sharded: train them on one process or with DDP")
        unknown = [t for t in self.lora_targets if t not in LORA_TARGETS]
        if unknown or not self.lora_targets:
            got = repr(unknown[0]) if unknown else "none"
            self._fail("lora_targets", f"each must be one of {', '.join(LORA_TARGETS)}; got {got}")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> TrainConfig:
        """Build from a mapping; the old ``bf16`` (true/false) is read as ``precision``."""
        if isinstance(data, dict):
            data = precision_of_bf16(data, source)
        return super().from_dict(data, source)


@dataclass(frozen=True)
class RunConfig:
    """What ``config.json`` in a run directory holds: the task, the model, its training and the data
    it was trained on."""

    task: str
    model: ModelConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    data: Config | None = None  # the task's data config (vaswani.data.config); None: no data section
