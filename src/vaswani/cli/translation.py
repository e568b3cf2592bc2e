"""``vaswani train translation``, ``vaswani translate`` and the translation side of ``evaluate``.

Decoding is greedy by default; ``--beam K`` turns on beam search (the paper used K = 4 with a
GNMT length penalty of alpha = 0.6), ``--temperature``/``--top-k``/``--top-p`` sampling; the
flags become one :class:`~vaswani.generation.config.DecodingConfig` (:mod:`vaswani.cli.decoding`).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from vaswani.cli.common import add_device_flag, add_weights_flags, read_stdin
from vaswani.cli.decoding import (
    add_compile_flag,
    add_decoding_flags,
    add_sampling_flags,
    compile_report,
    decoding_from_args,
)
from vaswani.errors import ConfigError

if TYPE_CHECKING:
    from vaswani.generation.mask_predict import MaskPredictConfig
    from vaswani.tasks.translation import EmptyTranslations

T = TypeVar("T")
NAT = "nat"  # the task of a CMLM run (vaswani.tasks.nat)


def add_translate_parser(commands: Any) -> None:
    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained run",
        description="Translate the TEXT arguments, or standard input one line per sentence.",
    )
    translate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    translate.add_argument("text", nargs="*", help="sentences (default: read standard input)")
    translate.add_argument("--batch-size", type=int, default=64)
    add_device_flag(translate)
    add_weights_flags(translate)
    decoding = add_decoding_flags(translate)
    decoding.add_argument(
        "--n-best",
        type=int,
        metavar="N",
        help="print the N best beam hypotheses of each sentence as 'INDEX<TAB>SCORE<TAB>TEXT' (N <= K)",
    )
    add_sampling_flags(translate)
    mask_predict = translate.add_argument_group("Mask-Predict (a nat run)")
    mask_predict.add_argument(
        "--iterations", type=int, metavar="T", help="decoder passes (default 10, the paper's)"
    )
    mask_predict.add_argument(
        "--length-beam", type=int, metavar="L", help="target lengths tried per sentence (default 5)"
    )
    mask_predict.add_argument(
        "--rank-by",
        metavar="RULE",
        help="how a sentence's candidates are ranked: average (their tokens' mean log-probability, the "
        "paper's, default), joint (log P(y, length | x): the length classifier's log-probability added) "
        "or teacher (log P(y | x) by --teacher)",
    )
    mask_predict.add_argument(
        "--teacher",
        type=Path,
        metavar="RUN",
        help="an autoregressive translation run over the same vocabularies (the run the CMLM was distilled "
        "from) whose log P(y | x) ranks the candidates (implies --rank-by teacher)",
    )
    add_compile_flag(translate)
    translate.set_defaults(handler=cmd_translate, texts_field="text")


def cmd_translate(args: argparse.Namespace) -> None:
    from vaswani.generation.config import DecodingConfig
    from vaswani.layers.quantize import prepare_weights
    from vaswani.pipelines.common import refuse_empty
    from vaswani.pipelines.translation import Translator
    from vaswani.rundir import RunDir

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    decoding = decoding_from_args(args)
    if args.n_best is not None and decoding.strategy == "sample":
        raise ConfigError("--n-best lists come from beam search: drop --temperature, --top-k and --top-p")
    mask_predict = mask_predict_from_args(args)
    if RunDir(args.run_dir).read_config().task == NAT:
        if decoding != DecodingConfig() or args.n_best is not None or args.compile:
            raise ConfigError(
                f"{args.run_dir}: a nat run is decoded by Mask-Predict: give --iterations and --length-beam, "
                "not autoregressive decoding's flags"
            )
        translate_nat(args, mask_predict)
        return
    if any(getattr(args, f) is not None for f in ("iterations", "length_beam", "rank_by", "teacher")):
        raise ConfigError(
            f"--iterations, --length-beam, --rank-by and --teacher decode a nat run; {args.run_dir} is "
            "autoregressive"
        )
    translator = Translator.load(args.run_dir, args.device)
    prepare_weights(translator.model, args.quantize, args.dtype)
    if args.compile:
        translator.compile_decoding()
    sentences = list(args.text) if args.text else [line.rstrip("\r\n") for line in read_stdin()]
    refuse_empty(sentences, "input line")
    shown = terminal_display()
    if args.n_best is None:
        for line in translator.translate(sentences, decoding, batch_size=args.batch_size):
            print(shown(line), flush=True)
        compile_report(translator)
    else:
        found = translator.translate_n_best(sentences, decoding, batch_size=args.batch_size)
        for index, hypotheses in enumerate(found):
            for hypothesis in hypotheses:
                print(f"{index}\t{hypothesis.score:.4f}\t{shown(hypothesis.text)}", flush=True)
    print(f"vaswani: {translator.weights_note}", file=sys.stderr)  # after: a refusal stays one line


def terminal_display() -> EmptyTranslations:
    """How ``translate`` prints: an empty translation as ``(empty)`` on a terminal, as an empty line
    into a file or a pipe (one line per sentence), with a note on standard error either way."""
    from vaswani.tasks.translation import EmptyTranslations

    return EmptyTranslations(display=sys.stdout.isatty())


def mask_predict_from_args(args: argparse.Namespace) -> MaskPredictConfig:
    """The :class:`MaskPredictConfig` of ``--iterations``, ``--length-beam`` and ``--rank-by`` (unset:
    the paper's T = 10, l = 5, average; ``teacher`` where ``--teacher`` is given), checked before
    anything is loaded; its errors name the flags."""
    from vaswani.generation.mask_predict import MaskPredictConfig

    given = {
        name: getattr(args, name)
        for name in ("iterations", "length_beam", "rank_by")
        if getattr(args, name) is not None
    }
    if args.teacher is not None and given.setdefault("rank_by", "teacher") != "teacher":
        raise ConfigError(
            f"--teacher ranks the candidates: it goes with --rank-by teacher, not {args.rank_by}"
        )
    return flag_errors(lambda: MaskPredictConfig(**given))


def translate_nat(args: argparse.Namespace, decoding: MaskPredictConfig) -> None:
    """Print Mask-Predict's translation of each sentence of a nat run."""
    from vaswani.pipelines.common import refuse_empty
    from vaswani.pipelines.nat import NatTranslator
    from vaswani.pipelines.translation import Translator

    translator = NatTranslator.load(args.run_dir, args.device)
    teacher = None
    if args.teacher is not None:
        teacher = Translator.load(args.teacher, args.device)
        translator.with_teacher(teacher, f"--teacher {args.teacher}")
    flag_errors(lambda: translator.check(decoding))
    sentences = list(args.text) if args.text else [line.rstrip("\r\n") for line in read_stdin()]
    refuse_empty(sentences, "input line")
    shown = terminal_display()
    for line in translator.translate(sentences, decoding, batch_size=args.batch_size):
        print(shown(line), flush=True)
    print(f"vaswani: {translator.weights_note}", file=sys.stderr)
    if teacher is not None:
        print(f"vaswani: the teacher's {teacher.weights_note}", file=sys.stderr)


def flag_errors(check: Callable[[], T]) -> T:
    """``check()``, its :class:`ConfigError` naming ``decoding.FIELD`` as the flag ``--field``."""
    try:
        return check()
    except ConfigError as exc:
        raise ConfigError(
            re.sub(r"decoding\.(\w+)", lambda m: "--" + m[1].replace("_", "-"), str(exc))
        ) from None
