"""The decoding flags of ``vaswani translate``, ``generate`` and ``evaluate``, read into one
:class:`~vaswani.generation.config.DecodingConfig`.

Every decoding flag is named after its field (``--top-k`` sets ``top_k``), so that the config's
errors, which name fields as ``decoding.top_k``, are shown with the flag instead.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import fields
from typing import Any

from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig, EarlyStopping

EARLY_STOPPING: dict[str, EarlyStopping] = {"true": True, "false": False, "never": "never"}
"""The values of ``--early-stopping``: Hugging Face's ``early_stopping`` values, in lower case."""


def add_decoding_flags(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Greedy by default; beam search with ``--beam``, its length penalty and stopping rule; the
    output budget."""
    decoding = p.add_argument_group("decoding")
    decoding.add_argument(
        "--beam", type=int, default=1, metavar="K", help="beam search with K hypotheses (default 1: greedy)"
    )
    decoding.add_argument(
        "--length-penalty",
        type=float,
        metavar="A",
        help="beam search: score = log P(y|x) / lp(|y|), lp of exponent A (default 0.6, the paper's)",
    )
    decoding.add_argument(
        "--length-penalty-kind",
        metavar="KIND",
        help="gnmt: lp = ((5+|y|)/6)^A (Wu et al. 2016; default); simple: lp = |y|^A "
        "(Hugging Face, fairseq); none: lp = 1",
    )
    decoding.add_argument(
        "--early-stopping",
        choices=EARLY_STOPPING,
        help="when beam search ends a sentence (Hugging Face's rules): true, once K hypotheses "
        "have ended (default); false, once besides the best running one, scored at its current "
        "length, cannot beat the worst of them (Hugging Face's default); never, once no running "
        "one can at any length it may reach",
    )
    decoding.add_argument(
        "--max-new-tokens",
        type=int,
        metavar="N",
        help="at most N tokens per translation (default: 2 x source tokens + 10), and at most the "
        "model's max_len - 1",
    )
    return decoding


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    """``--temperature``, ``--top-k``, ``--top-p`` and ``--seed``, instead of greedy or beam search."""
    sampling = p.add_argument_group("sampling (instead of greedy or beam search)")
    sampling.add_argument("--temperature", type=float, help="softmax temperature (0 is greedy)")
    sampling.add_argument("--top-k", type=int, help="sample among the K most likely tokens")
    sampling.add_argument(
        "--top-p", type=float, help="sample among the most likely tokens of total probability P"
    )
    sampling.add_argument("--seed", type=int, help="seed of the sampling (default: a fresh one)")


def add_compile_flag(p: argparse.ArgumentParser) -> None:
    """``--compile``: decoding steps through ``torch.compile`` on a static KV cache."""
    p.add_argument(
        "--compile",
        action="store_true",
        help="decode through torch.compile on a static KV cache (greedy, sampling, a translation's "
        "beam search; the same tokens; the first steps compile, their time is printed on stderr; "
        "where compilation cannot work, one line says why and decoding is eager)",
    )


def compile_report(wrapper: Any) -> None:
    """The one stderr line on a ``--compile`` decoding's compilation, where there was one."""
    compiled = getattr(wrapper, "compiled", None)
    line = None if compiled is None else compiled.report()
    if line is not None:
        print(line, file=sys.stderr)


def decoding_from_args(args: argparse.Namespace) -> DecodingConfig:
    """The :class:`DecodingConfig` of the decoding flags a command has (each flag sets the field of
    its name; flags left unset keep the field's default), checked before anything is loaded. Its
    errors name the flags."""
    given: dict[str, Any] = {}
    for field in fields(DecodingConfig):
        value = getattr(args, field.name, None)
        if field.name == "early_stopping" and value is not None:
            value = EARLY_STOPPING[value]
        if value is not None:
            given[field.name] = tuple(value) if field.name == "stop" else value
    try:
        return DecodingConfig(**given)
    except ConfigError as exc:
        raise ConfigError(
            re.sub(r"decoding\.(\w+)", lambda m: "--" + m[1].replace("_", "-"), str(exc))
        ) from None
