"""Every decoding option in one frozen dataclass, validated on construction, as Hugging Face's
``GenerationConfig`` is: the CLI builds one from its flags and passes it whole to the drivers
(:mod:`vaswani.generation.seq2seq`, :mod:`vaswani.generation.lm`) and searches
(:mod:`vaswani.generation.sampling`, :mod:`vaswani.generation.beam`).

Errors are one-line :class:`~vaswani.errors.ConfigError` s that name the field as
``decoding.FIELD``; the CLI writes the same message with ``--field-name`` (every decoding flag
is its field's name).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from vaswani.errors import ConfigError, shown
from vaswani.schema import INT64_MAX

Strategy = Literal["greedy", "beam", "sample"]
PenaltyKind = Literal["gnmt", "simple", "none"]
EarlyStopping = bool | Literal["never"]
STRATEGIES: tuple[Strategy, ...] = ("greedy", "beam", "sample")
LENGTH_PENALTIES: tuple[PenaltyKind, ...] = ("gnmt", "simple", "none")
PAPER_PENALTY: tuple[PenaltyKind, float] = ("gnmt", 0.6)  # Wu et al. 2016, the Transformer paper's alpha
MAX_LEN_A, MAX_LEN_B = 2.0, 10  # a translation's default budget: 2·|x| + 10 tokens
SAMPLING_FIELDS = ("temperature", "top_k", "top_p")
SEED_MAX = 2**64 - 1  # what torch.Generator.manual_seed takes


@dataclass(frozen=True)
class LengthPenalty:
    """lp(|y|) by which beam search divides a hypothesis' log-probability: score(y) =
    log P(y | x) / lp(|y|).

    ``gnmt``: lp = ((5 + |y|) / 6)^alpha (Wu et al. 2016, the paper's alpha = 0.6);
    ``simple``: lp = |y|^alpha (Hugging Face's ``length_penalty``, fairseq's ``lenpen``);
    ``none``: lp = 1. |y| counts the generated tokens, EOS included, the start token not.
    With alpha > 0 longer hypotheses are favoured over the plain log-probability. Built from a
    checked :class:`DecodingConfig` (:attr:`DecodingConfig.penalty`).
    """

    kind: PenaltyKind
    alpha: float

    def __call__(self, length: Tensor) -> Tensor:
        """lp of each length in ``length`` (any shape), as float32 (the dtype of the scores)."""
        length = length.float()
        if self.kind == "gnmt":
            return ((5.0 + length) / 6.0) ** self.alpha
        if self.kind == "simple":
            return length**self.alpha
        return torch.ones_like(length)


@dataclass(frozen=True)
class DecodingConfig:
    """How a model decodes. ``None`` means "not set": the strategy's default applies.

    ``strategy``: ``greedy`` (argmax at each step), ``beam`` (beam search) or ``sample`` (a draw
    from the softmax). Left ``None`` it is derived from the fields, as Hugging Face derives its
    generation mode: ``beam`` when ``beam`` > 1, ``sample`` when ``temperature``, ``top_k`` or
    ``top_p`` is set, else ``greedy``; the resolved value is what the field then holds (so
    ``dataclasses.replace`` keeps it: pass ``strategy=None`` to derive it again). Give it only for
    beam search of width 1 (which returns what greedy search returns, with scores).

    Beam search (:func:`vaswani.generation.beam.beam_search`): ``beam`` hypotheses per row, the
    ``n_best`` (<= ``beam``) best returned; score = log P(y | x) / lp(|y|) with the
    :class:`LengthPenalty` ``length_penalty_kind`` (default ``gnmt``) of exponent
    ``length_penalty`` (default 0.6, the paper's). ``early_stopping``, Hugging Face's three
    rules under their names: ``True`` (the default) ends a row once ``beam`` hypotheses have
    finished; ``False`` once the best running hypothesis, scored at its current length, cannot
    beat the worst finished one (HF's default heuristic); ``"never"`` only once no running
    hypothesis can, at any length it may still reach (the exact search).

    Sampling (:func:`vaswani.generation.sampling.choose_next`): softmax(logits / ``temperature``)
    (default 1; 0 is argmax) restricted to the ``top_k`` most likely tokens and to the smallest
    set whose probability reaches ``top_p``, drawn from a generator seeded with ``seed`` (else
    from torch's global generator).

    Budget: at most ``max_new_tokens`` new tokens per row. Left ``None``, a translation gets
    floor(``max_len_a``·|x| + ``max_len_b``) tokens (|x| source tokens; default 2·|x| + 10,
    fairseq's names) and a language model 100; a translation never gets more than the model's
    ``max_len`` − 1. ``stop``: strings that end a language model's continuation (cut before
    them). ``use_cache``: decode on a KV cache (the same tokens as recomputing the prefix).
    """

    strategy: Strategy | None = None
    beam: int = 1
    n_best: int = 1
    length_penalty: float | None = None
    length_penalty_kind: PenaltyKind | None = None
    early_stopping: EarlyStopping | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    max_new_tokens: int | None = None
    max_len_a: float | None = None
    max_len_b: int | None = None
    stop: tuple[str, ...] = ()
    use_cache: bool = True

    def __post_init__(self) -> None:
        sampling = [name for name in SAMPLING_FIELDS if getattr(self, name) is not None]
        beam_options = ("length_penalty", "length_penalty_kind", "early_stopping")
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ConfigError(
                f"decoding.strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}"
            )
        _integer("beam", self.beam, 1)
        if self.beam > 1 and sampling:
            raise ConfigError(
                "beam search and sampling do not go together: give decoding.beam or "
                "decoding.temperature/decoding.top_k/decoding.top_p"
            )
        strategy = self.strategy or ("beam" if self.beam > 1 else "sample" if sampling else "greedy")
        object.__setattr__(self, "strategy", strategy)
        if strategy != "beam" and self.beam > 1:
            raise ConfigError(f"decoding.beam {self.beam} is beam search, not strategy {strategy!r}")
        _integer("n_best", self.n_best, 1)
        if self.n_best > self.beam:
            raise ConfigError(
                f"decoding.n_best must be between 1 and decoding.beam ({self.beam}), got {self.n_best}"
            )
        if self.length_penalty is not None and not _finite(self.length_penalty):
            raise ConfigError(
                f"decoding.length_penalty must be a finite number, got {shown(self.length_penalty)}"
            )
        if self.length_penalty_kind is not None and self.length_penalty_kind not in LENGTH_PENALTIES:
            raise ConfigError(
                f"decoding.length_penalty_kind must be one of {', '.join(LENGTH_PENALTIES)}, "
                f"got {self.length_penalty_kind!r}"
            )
        if self.early_stopping is not None and not (
            isinstance(self.early_stopping, bool) or self.early_stopping == "never"
        ):
            raise ConfigError(
                f"decoding.early_stopping must be True, False or 'never', got {self.early_stopping!r}"
            )
        for name in beam_options:
            if strategy != "beam" and getattr(self, name) is not None:
                raise ConfigError(f"decoding.{name} applies to beam search: set decoding.beam > 1")
        self._check_sampling(strategy, sampling)
        self._check_budget()
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not all(isinstance(s, str) for s in stop):
            raise ConfigError(f"decoding.stop must be strings, got {shown(self.stop)}")
        if "" in stop:
            raise ConfigError(
                "decoding.stop must not be empty: an empty stop string would end every continuation"
            )
        object.__setattr__(self, "stop", tuple(stop))

    def _check_sampling(self, strategy: str, sampling: list[str]) -> None:
        if strategy != "sample" and sampling:
            raise ConfigError(f"decoding.{sampling[0]} applies to sampling, not strategy {strategy!r}")
        if self.temperature is not None and not (_number(self.temperature) and self.temperature >= 0):
            raise ConfigError(f"decoding.temperature must be >= 0, got {shown(self.temperature)}")
        if self.temperature is not None and not _finite(self.temperature):
            raise ConfigError(f"decoding.temperature must be >= 0 and finite, got {shown(self.temperature)}")
        if self.top_k is not None:
            _integer("top_k", self.top_k, 1)
        if self.top_p is not None and not (_number(self.top_p) and 0 < self.top_p <= 1):
            raise ConfigError(f"decoding.top_p must be in (0, 1], got {shown(self.top_p)}")
        if self.seed is not None:
            _integer("seed", self.seed, 0, SEED_MAX)
            if strategy != "sample":
                raise ConfigError(
                    "decoding.seed applies to sampling: add decoding.temperature, decoding.top_k or "
                    "decoding.top_p"
                )

    def _check_budget(self) -> None:
        if self.max_new_tokens is not None:
            _integer("max_new_tokens", self.max_new_tokens, 1)
            if self.max_len_a is not None or self.max_len_b is not None:
                raise ConfigError(
                    "decoding.max_new_tokens replaces decoding.max_len_a and decoding.max_len_b: "
                    "give one or the other"
                )
        if self.max_len_a is not None and not (_finite(self.max_len_a) and self.max_len_a >= 0):
            raise ConfigError(f"decoding.max_len_a must be a finite number >= 0, got {shown(self.max_len_a)}")
        if self.max_len_b is not None:
            _integer("max_len_b", self.max_len_b, 0)

    @property
    def penalty(self) -> LengthPenalty:
        """The length penalty of beam search, defaults filled in (GNMT, alpha 0.6)."""
        kind, alpha = PAPER_PENALTY
        return LengthPenalty(
            self.length_penalty_kind or kind, alpha if self.length_penalty is None else self.length_penalty
        )

    @property
    def stopping(self) -> EarlyStopping:
        """The early-stopping rule of beam search, the default filled in (``True``)."""
        return True if self.early_stopping is None else self.early_stopping

    def generator(self, device: torch.device | str = "cpu") -> torch.Generator | None:
        """A new generator on ``device`` (where the draws are made) seeded with ``seed``, or
        ``None`` (torch's global one of that device) without a seed."""
        return None if self.seed is None else torch.Generator(device=device).manual_seed(self.seed)

    def target_budget(self, src_lengths: Tensor, max_len: int) -> Tensor:
        """The most target tokens of each source of ``src_lengths`` (batch,) tokens:
        ``max_new_tokens``, else floor(max_len_a·|x| + max_len_b) (fairseq's names); at least 1,
        at most ``max_len`` − 1."""
        if self.max_new_tokens is not None:
            budget = torch.full_like(src_lengths, self.max_new_tokens, dtype=torch.long)
        else:
            a = MAX_LEN_A if self.max_len_a is None else self.max_len_a
            b = MAX_LEN_B if self.max_len_b is None else self.max_len_b
            budget = (a * src_lengths.double() + b).floor().long()
        return budget.clamp(min=1, max=max(1, max_len - 1))


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _finite(value: object) -> bool:
    return _number(value) and math.isfinite(value)  # type: ignore[arg-type]


def _integer(name: str, value: object, minimum: int | None = None, maximum: int = INT64_MAX) -> None:
    """Refuse a ``value`` of field ``name`` that is not an integer (>= ``minimum``, if given, and at
    most ``maximum``: by default a 64-bit integer, what torch takes)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"decoding.{name} must be an integer, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"decoding.{name} must be >= {minimum}, got {shown(value)}")
    if value > maximum:
        raise ConfigError(f"decoding.{name} must be at most {maximum}, got {shown(value)}")


GREEDY = DecodingConfig()


def describe_decoding(decoding: DecodingConfig) -> str:
    """``greedy``, ``beam 4, gnmt length penalty 0.6`` or ``sampling, temperature 0.8``, for reports."""
    if decoding.strategy == "sample":
        given = [(name, getattr(decoding, name)) for name in ("temperature", "top_k", "top_p")]
        return ", ".join(["sampling", *(f"{name} {value:g}" for name, value in given if value is not None)])
    if decoding.strategy == "greedy":
        return "greedy"
    penalty = decoding.penalty
    text = f"beam {decoding.beam}, " + (
        "no length penalty" if penalty.kind == "none" else f"{penalty.kind} length penalty {penalty.alpha:g}"
    )
    if decoding.stopping is not True:
        text += f", early stopping {str(decoding.stopping).lower()}"
    return text
