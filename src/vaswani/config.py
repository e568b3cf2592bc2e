"""Typed, validated configuration: the model (:class:`ModelConfig`) and its training (:class:`TrainConfig`).

Every variant is a field with a string value (``norm="rmsnorm"``, ``norm_placement="pre"``,
``position="relative"``) resolved to classes in one place (the layers). A
config is checked when it is built, whether it comes from code, flags, a YAML
file or a run directory's ``config.json``, and a bad one raises
:class:`~vaswani.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vaswani.errors import ConfigError

T = TypeVar("T")

ARCHS = ("encoder_decoder", "decoder_only", "encoder_only")
NORMS = ("layernorm", "rmsnorm")
NORM_PLACEMENTS = ("post", "pre")
# The values of ``norm`` from before its kind and its placement were two fields, still read (in
# Python, YAML configs, flags, presets and the config.json of run directories): each sets both.
COMBINED_NORMS = {
    "post_ln": ("layernorm", "post"),
    "pre_ln": ("layernorm", "pre"),
    "pre_rmsnorm": ("rmsnorm", "pre"),
}
POSITIONS = ("sinusoidal", "learned", "relative", "sinusoidal_halves")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
TIES = ("none", "output", "all")
SCHEDULES = ("inverse_sqrt", "cosine", "constant")
OPTIMIZERS = ("adam", "adamw")


def _matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` fits a simple annotation (int, float, str, bool, X | None, tuple)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]
            return isinstance(value, (tuple, list)) and all(_matches(v, args[0]) for v in value)
        return (
            isinstance(value, (tuple, list))
            and len(value) == len(args)
            and all(_matches(v, a) for v, a in zip(value, args, strict=True))
        )
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation)


class _Validated:
    """Type checks every field against its annotation, then runs ``_check``."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if not _matches(value, hints[f.name]):
                raise ConfigError(
                    f"config field '{self._section}.{f.name}': expected {_type_name(hints[f.name])}, "
                    f"got {value!r}"
                )
            if hints[f.name] is float and isinstance(value, int):
                object.__setattr__(self, f.name, float(value))
            if isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))
        self._check()

    _section = "config"

    def _check(self) -> None:
        """Cross-field checks; subclasses override."""

    def _fail(self, name: str, message: str) -> None:
        raise ConfigError(f"config field '{self._section}.{name}': {message}")

    def _positive(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if value is not None and not value > 0:  # "not >" also refuses NaN
                self._fail(name, f"must be > 0, got {value}")

    def _one_of(self, name: str, choices: tuple[str, ...]) -> None:
        if getattr(self, name) not in choices:
            self._fail(name, f"must be one of {', '.join(choices)}; got {getattr(self, name)!r}")

    def _fraction(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                self._fail(name, f"must be in [0, 1), got {value}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any], source: str = "config") -> T:
        """Build from a mapping; unknown fields are refused with their name and ``source``."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: section '{cls._section}' must be a mapping")  # type: ignore[attr-defined]
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        for name in data:
            if name not in known:
                raise ConfigError(
                    f"{source}: unknown config field '{cls._section}.{name}'"  # type: ignore[attr-defined]
                )
        return cls(**data)

    def replace(self: T, **changes: Any) -> T:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def split_combined_norm(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The model fields ``fields`` of one source (a call, a YAML section, a ``config.json``, the
    flags) with an old combined ``norm`` (``pre_ln``: :data:`COMBINED_NORMS`) written as the two
    fields it stands for, ``norm`` (the kind) and ``norm_placement``. Merge sources after splitting
    each, so that a later ``norm: post_ln`` replaces an earlier placement. A ``norm_placement`` in
    the same source that contradicts the old value is a :class:`ConfigError` naming the field."""
    norm = fields.get("norm")
    if not isinstance(norm, str) or norm not in COMBINED_NORMS:
        return dict(fields)
    kind, placement = COMBINED_NORMS[norm]
    given = fields.get("norm_placement")
    if given is not None and given != placement:
        raise ConfigError(
            f"config field 'model.norm_placement': {given!r} contradicts norm {norm!r} ({kind} "
            f"placed {placement!r}); give norm {kind!r} and the placement, or the old value alone"
        )
    return {**fields, "norm": kind, "norm_placement": placement}


def _type_name(annotation: Any) -> str:
    return str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")


@dataclass(frozen=True)
class ModelConfig(_Validated):
    """The architecture. Defaults are the paper's base model (Vaswani et al. 2017, table 3).

    ``norm`` is the norm's kind (``layernorm``, ``rmsnorm``) and ``norm_placement`` where it
    sits: ``post`` (the paper's, after each residual sum) or ``pre`` (before each sublayer, with
    a final norm after each stack). ``norm_placement`` None takes the placement from an old
    combined ``norm`` (``post_ln``, ``pre_ln``, ``pre_rmsnorm``, still read), else ``post``; once
    built the config holds the two fields. ``tie_embeddings``: ``output`` shares the
    target embedding with the output projection, ``all`` also shares the
    source embedding (needs one vocabulary, as the paper's shared BPE).

    ``arch="decoder_only"`` is a GPT: its vocabulary is ``tgt_vocab_size``, its depth
    ``n_decoder_layers`` and its context ``max_len``; the encoder fields are unused.

    ``arch="encoder_only"`` is a BERT: its vocabulary is ``src_vocab_size``, its depth
    ``n_encoder_layers`` and its context ``max_len``; the decoder fields are unused. Its embeddings
    add ``type_vocab_size`` segment embeddings (0: none) and a norm; ``pooler`` adds the [CLS]
    pooler (dense + tanh); ``tie_embeddings`` other than ``none`` ties the MLM head's decoder to
    the word embeddings.

    ``position="sinusoidal_halves"`` is the paper's table with the sines in the first half of
    the vector and the cosines in the second (Marian's layout) instead of interleaved;
    ``output_bias`` adds a bias to the output projection (Marian's ``final_logits_bias``).
    """

    _section = "model"

    arch: str = "encoder_decoder"
    src_vocab_size: int = 32000
    tgt_vocab_size: int = 32000
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1
    attn_dropout: float = 0.0
    activation: str = "relu"
    norm: str = "layernorm"
    norm_placement: str | None = None
    norm_eps: float = 1e-5
    position: str = "sinusoidal"
    max_len: int = 512
    rel_clip: int = 16
    attn_window: int | None = None
    fused_qkv: bool = False
    bias: bool = True
    scale_embeddings: bool = True
    tie_embeddings: str = "all"
    pad_id: int = 0
    output_bias: bool = False
    type_vocab_size: int = 2
    pooler: bool = True

    def _check(self) -> None:
        self._one_of("arch", ARCHS)
        self._split_norm()
        self._one_of("norm_placement", NORM_PLACEMENTS)
        self._one_of("position", POSITIONS)
        self._one_of("activation", ACTIVATIONS)
        self._one_of("tie_embeddings", TIES)
        self._positive(
            "src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff",
            "n_encoder_layers", "n_decoder_layers", "max_len", "rel_clip", "norm_eps",
        )  # fmt: skip
        self._fraction("dropout", "attn_dropout")
        if self.d_model % self.n_heads:
            self._fail("n_heads", f"must divide d_model={self.d_model}, got {self.n_heads}")
        if self.type_vocab_size < 0:
            self._fail("type_vocab_size", f"must be >= 0 (0: none), got {self.type_vocab_size}")
        if self.attn_window is not None and self.attn_window < 1:
            self._fail("attn_window", f"must be >= 1 or null, got {self.attn_window}")
        if (
            self.arch == "encoder_decoder"
            and self.tie_embeddings == "all"
            and self.src_vocab_size != self.tgt_vocab_size
        ):
            self._fail(
                "tie_embeddings",
                "'all' needs one shared vocabulary (src_vocab_size == tgt_vocab_size); "
                "use 'output' with separate vocabularies",
            )
        vocab = min(self.src_vocab_size, self.tgt_vocab_size)
        if self.arch == "encoder_only":  # its one vocabulary
            vocab = self.src_vocab_size
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

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with ``changes``; an old combined ``norm`` among them sets the placement too."""
        return dataclasses.replace(self, **split_combined_norm(changes))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named architecture, e.g. ``ModelConfig.preset("transformer-base")``."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset '{name}'; choose from {', '.join(PRESETS)}")
        fields = {**PRESETS[name], **split_combined_norm(overrides)}
        return cls.from_dict(fields, source=f"preset '{name}'")


PRESETS: dict[str, dict[str, Any]] = {
    "transformer-base": {},
    "transformer-big": {"d_model": 1024, "n_heads": 16, "d_ff": 4096, "dropout": 0.3},
    "transformer-small": {
        "d_model": 256, "n_heads": 8, "d_ff": 1024, "n_encoder_layers": 3, "n_decoder_layers": 3,
    },
    "gpt2": {
        "arch": "decoder_only", "tgt_vocab_size": 50257, "d_model": 768, "n_heads": 12, "d_ff": 3072,
        "n_decoder_layers": 12, "activation": "gelu_tanh", "norm_placement": "pre", "position": "learned",
        "max_len": 1024, "scale_embeddings": False, "tie_embeddings": "output", "fused_qkv": True,
    },
    "gpt-mini": {
        "arch": "decoder_only", "d_model": 192, "n_heads": 6, "d_ff": 768, "n_decoder_layers": 4,
        "activation": "gelu_tanh", "norm_placement": "pre", "position": "learned", "max_len": 128,
        "scale_embeddings": False, "tie_embeddings": "output", "fused_qkv": True, "dropout": 0.0,
    },
    "bert-base": {
        "arch": "encoder_only", "src_vocab_size": 30522, "d_model": 768, "n_heads": 12, "d_ff": 3072,
        "n_encoder_layers": 12, "activation": "gelu", "norm_eps": 1e-12, "position": "learned",
        "attn_dropout": 0.1, "scale_embeddings": False, "tie_embeddings": "output", "type_vocab_size": 2,
        "pooler": True,
    },
    "tiny": {
        "d_model": 64, "n_heads": 4, "d_ff": 128, "n_encoder_layers": 2, "n_decoder_layers": 2,
        "dropout": 0.0,
    },
}  # fmt: skip


@dataclass(frozen=True)
class TrainConfig(_Validated):
    """How to train. Defaults follow the paper (Adam β=(0.9, 0.98), ε=1e-9, warmup, label smoothing 0.1).

    ``lr`` is the peak learning rate reached at the end of warmup; the
    ``inverse_sqrt`` schedule is the paper's d_model^-0.5 · min(step^-0.5,
    step · warmup^-1.5) rescaled to that peak.

    ``checkpoint_every`` (steps) writes a checkpoint, keeping the newest ``keep_checkpoints``;
    ``deterministic`` makes torch use deterministic algorithms on one thread, so that a run,
    stopped and resumed or not, gives bit-identical weights on the CPU. A step whose loss or
    gradient is not finite is skipped; ``max_bad_steps`` such steps in a row stop training.
    """

    _section = "train"

    batch_tokens: int = 4096
    max_steps: int = 100_000
    max_minutes: float | None = None
    lr: float = 7e-4
    warmup_steps: int = 4000
    schedule: str = "inverse_sqrt"
    min_lr: float = 0.0
    optimizer: str = "adam"
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float | None = 1.0
    accumulate: int = 1
    eval_every: int = 1000
    eval_sentences: int = 500
    checkpoint_every: int | None = None
    keep_checkpoints: int = 3
    bf16: bool = False
    seed: int = 0
    max_bad_steps: int = 10
    threads: int | None = None
    deterministic: bool = False

    def _check(self) -> None:
        self._one_of("schedule", SCHEDULES)
        self._one_of("optimizer", OPTIMIZERS)
        self._positive(
            "batch_tokens", "max_steps", "max_minutes", "lr", "accumulate", "eval_every",
            "eval_sentences", "checkpoint_every", "keep_checkpoints", "clip_norm",
            "max_bad_steps", "threads",
        )  # fmt: skip
        self._fraction("label_smoothing")
        if self.warmup_steps < 0:
            self._fail("warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        if self.min_lr < 0 or self.min_lr > self.lr:
            self._fail("min_lr", f"must be in [0, lr={self.lr}], got {self.min_lr}")
        if self.weight_decay < 0:
            self._fail("weight_decay", f"must be >= 0, got {self.weight_decay}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            self._fail("betas", f"must be two numbers in [0, 1), got {self.betas}")
        if self.deterministic and self.threads not in (None, 1):
            self._fail("threads", f"a deterministic run uses one thread, got {self.threads}")


BLEU_TOKENIZERS = (
    "13a",
    "zh",
    "intl",
    "char",
    "none",
    "ja-mecab",
    "ko-mecab",
    "spm",
    "flores101",
    "flores200",
)
SOURCES = ("default", "files", "tsv", "text", "labeled")
LM_TOKENIZERS = ("bpe", "char")
LABELED_FORMATS = ("tsv", "csv", "jsonl")
POOLS = ("cls", "mean")


@dataclass(frozen=True)
class DataConfig(_Validated):
    """Where the text comes from and how it is tokenized and scored.

    ``source="default"`` generates the embedded corpus (``seed``, ``n_*`` sizes);
    ``source="files"`` reads the user's parallel files (absolute paths); ``source="tsv"`` reads
    sentence pairs from two ``columns`` of one tab-separated file (``pairs``) and holds out
    ``n_test`` and ``n_valid`` of them at random (``seed``), keeping every translation of one
    source sentence in the same split. ``bleu_tokenize`` is sacreBLEU's tokenizer; left null,
    it is chosen from the target language.

    A language model reads ``text`` (files or folders, ``source="text"``), or the embedded
    default (Python's own documentation), holds out the last ``valid_fraction`` of it, and
    splits it with a ``tokenizer`` ("bpe": byte-level BPE of ``vocab_size`` pieces, as GPT-2;
    "char": one token per character).

    A masked language model (BERT) reads text in the same way and cuts it into windows of up to
    ``max_len`` tokens; in each, a fraction ``mask_prob`` of the tokens is chosen for prediction,
    and of those a fraction ``mask_random`` is replaced by a random token, ``mask_keep`` is left
    as it is and the rest become [MASK] (BERT's 15%, 10%, 10%, 80%). Its WordPiece vocabulary
    has at most ``vocab_size`` pieces.

    A classifier (``source="labeled"``) reads labeled examples from ``train_file`` and
    ``dev_file`` (TSV, CSV or JSON lines: ``file_format``, or by extension), their text from
    one or two ``text_columns`` and their label from ``label_column`` (a header name, or a
    0-based index written in digits; null: the defaults of :mod:`vaswani.data.labeled`).
    ``labels`` is the label set of the training file (sorted), the classes in order. The
    encoder starts from the run ``init`` (null: from scratch), a text becomes one vector by
    ``pool`` ("cls": the pooled [CLS] state; "mean": the mean of its tokens' states), and a
    batch holds ``batch_size`` examples.
    """

    _section = "data"

    source: str = "files"
    seed: int = 0
    n_train: int = 60_000
    n_valid: int = 500
    n_test: int = 1_000
    src: str | None = None
    tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    pairs: str | None = None
    columns: tuple[int, int] = (0, 1)
    vocab_size: int = 8000
    shared_vocab: bool = False
    bleu_tokenize: str | None = None
    text: tuple[str, ...] | None = None
    tokenizer: str = "bpe"
    valid_fraction: float = 0.1
    mask_prob: float = 0.15
    mask_random: float = 0.1
    mask_keep: float = 0.1
    train_file: str | None = None
    dev_file: str | None = None
    file_format: str | None = None
    text_columns: tuple[str, ...] | None = None
    label_column: str | None = None
    labels: tuple[str, ...] | None = None
    init: str | None = None
    pool: str = "cls"
    batch_size: int = 32

    def _check(self) -> None:
        self._one_of("source", SOURCES)
        self._one_of("tokenizer", LM_TOKENIZERS)
        self._one_of("pool", POOLS)
        if self.file_format is not None:
            self._one_of("file_format", LABELED_FORMATS)
        if not 0.0 < self.mask_prob < 1.0:
            self._fail("mask_prob", f"must be in (0, 1), got {self.mask_prob}")
        for name in ("mask_random", "mask_keep"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                self._fail(name, f"must be in [0, 1], got {getattr(self, name)}")
        if self.mask_random + self.mask_keep > 1.0:
            total = self.mask_random + self.mask_keep
            self._fail("mask_keep", f"mask_random + mask_keep must be <= 1, got {total}")
        if self.text_columns is not None and len(self.text_columns) not in (1, 2):
            self._fail("text_columns", f"one or two (a text, or a pair), got {len(self.text_columns)}")
        if self.labels is not None and (len(self.labels) < 2 or len(set(self.labels)) < len(self.labels)):
            self._fail("labels", f"two or more distinct labels, got {list(self.labels)}")
        if self.source == "labeled" and (self.train_file is None or self.dev_file is None):
            self._fail("train_file", "source 'labeled' needs 'train_file' and 'dev_file'")
        self._positive("batch_size")
        if not 0.0 < self.valid_fraction < 1.0:
            self._fail("valid_fraction", f"must be in (0, 1), got {self.valid_fraction}")
        if self.source == "text" and not self.text:
            self._fail("text", "source 'text' needs at least one file or folder")
        self._positive("n_train", "n_valid", "n_test", "vocab_size")
        if self.bleu_tokenize is not None:
            self._one_of("bleu_tokenize", BLEU_TOKENIZERS)
        if self.source == "files" and (self.src is None or self.tgt is None):
            self._fail("src", "files need both 'src' and 'tgt'")
        if self.source == "tsv" and self.pairs is None:
            self._fail("pairs", "source 'tsv' needs the tab-separated file of sentence pairs")
        if min(self.columns) < 0 or self.columns[0] == self.columns[1]:
            self._fail("columns", f"two different column numbers >= 0, got {list(self.columns)}")
        for a, b in (("valid_src", "valid_tgt"), ("test_src", "test_tgt")):
            if (getattr(self, a) is None) != (getattr(self, b) is None):
                self._fail(a, f"'{a}' and '{b}' go together")


@dataclass(frozen=True)
class RunConfig:
    """What ``config.json`` in a run directory holds: the task, the model and its training."""

    task: str
    model: ModelConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=lambda: DataConfig(source="default"))
