"""``vaswani train translation``, ``vaswani translate`` and the translation side of ``evaluate``.

Decoding is greedy by default; ``--beam K`` turns on beam search (the paper used K = 4 with a
GNMT length penalty of alpha = 0.6), ``--temperature``/``--top-k``/``--top-p`` sampling.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vaswani.cli.common import (
    read_stdin,
)
from vaswani.errors import ConfigError


def add_translate_parser(commands: Any) -> None:
    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained run",
        description="Translate the TEXT arguments, or standard input one line per sentence.",
    )
    translate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    translate.add_argument("text", nargs="*", help="sentences (default: read standard input)")
    translate.add_argument("--batch-size", type=int, default=64)
    decoding = add_decoding_flags(translate)
    decoding.add_argument(
        "--n-best",
        type=int,
        metavar="N",
        help="print the N best beam hypotheses of each sentence as 'INDEX<TAB>SCORE<TAB>TEXT' (N <= K)",
    )
    sampling = translate.add_argument_group("sampling (instead of greedy or beam search)")
    sampling.add_argument("--temperature", type=float, help="softmax temperature (0 is greedy)")
    sampling.add_argument("--top-k", type=int, help="sample among the K most likely tokens")
    sampling.add_argument(
        "--top-p", type=float, help="sample among the most likely tokens of total probability P"
    )
    sampling.add_argument("--seed", type=int, help="seed of the sampling (default: a fresh one)")
    translate.set_defaults(handler=cmd_translate, texts_field="text")


def add_decoding_flags(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Greedy by default; beam search with ``--beam`` and its length penalty."""
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
    return decoding


def decoding_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of :meth:`Translator.translate` from the decoding flags, checked (one
    line per mistake) before anything is loaded."""
    from vaswani.generation import LengthPenalty, Sampling
    from vaswani.tasks.translation import PAPER_LENGTH_PENALTY

    if args.beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {args.beam}")
    n_best = getattr(args, "n_best", None)
    if n_best is not None and not 1 <= n_best <= args.beam:
        raise ConfigError(f"--n-best must be between 1 and --beam ({args.beam}), got {n_best}")
    penalty_given = args.length_penalty is not None or args.length_penalty_kind is not None
    if penalty_given and args.beam == 1:
        raise ConfigError("--length-penalty and --length-penalty-kind apply to beam search: add --beam K > 1")
    try:
        penalty = LengthPenalty(
            args.length_penalty_kind or PAPER_LENGTH_PENALTY.kind,
            PAPER_LENGTH_PENALTY.alpha if args.length_penalty is None else args.length_penalty,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    decoding: dict[str, Any] = {"beam": args.beam, "length_penalty": penalty}
    flags = [getattr(args, name, None) for name in ("temperature", "top_k", "top_p")]
    if all(flag is None for flag in flags):
        if getattr(args, "seed", None) is not None:
            raise ConfigError("--seed applies to sampling: add --temperature, --top-k or --top-p")
        return decoding
    if args.beam > 1:
        raise ConfigError("choose beam search (--beam) or sampling (--temperature/--top-k/--top-p)")
    temperature, top_k, top_p = flags
    try:
        sampling = Sampling(1.0 if temperature is None else temperature, top_k, top_p)
    except ValueError as exc:
        raise ConfigError(f"--{str(exc).split()[0].replace('_', '-')}: {exc}") from None
    return {**decoding, "sampling": sampling, "seed": args.seed}


def cmd_translate(args: argparse.Namespace) -> None:
    from vaswani.tasks.translation import Translator

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    decoding = decoding_from_args(args)
    translator = Translator.load(args.run_dir)
    sentences = list(args.text) if args.text else [line.rstrip("\r\n") for line in read_stdin()]
    if args.n_best is None:
        for line in translator.translate(sentences, batch_size=args.batch_size, **decoding):
            print(line, flush=True)
        return
    beam, penalty = decoding["beam"], decoding["length_penalty"]
    found = translator.translate_n_best(sentences, args.n_best, beam, penalty, batch_size=args.batch_size)
    for index, hypotheses in enumerate(found):
        for hypothesis in hypotheses:
            print(f"{index}\t{hypothesis.score:.4f}\t{hypothesis.text}", flush=True)
