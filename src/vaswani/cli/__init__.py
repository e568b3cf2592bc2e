"""The ``vaswani`` command: parse, call the Python API, print.

Errors caused by the user's input print one line (``vaswani: error: …``) and
exit with status 2, without a traceback unless ``--debug`` is given; so do errors from the
operating system and out-of-range numbers, and a bug prints one line too (exit status 1), and a
broken pipe stops quietly (:mod:`vaswani.cli.failures`). SIGINT or
SIGTERM during training finishes the step, writes a checkpoint, prints one line
saying how to resume and exits with status 130 or 143 (128 + the signal number).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from vaswani.cli import (
    average,
    classify,
    decoding,
    failures,
    images,
    interop,
    lm,
    mlm,
    plots,
    serve,
    tag,
    train,
    translation,
)
from vaswani.cli.common import add_device_flag, add_weights_flags
from vaswani.cli.outputs import add_force_flag, check_output
from vaswani.data.config import LABELED_FORMATS
from vaswani.errors import ConfigError, RunDirError, TrainingInterrupted, VaswaniError
from vaswani.runtime import keep_freed_memory
from vaswani.tasks import registry
from vaswani.training.distributed import stop, world


def cmd_evaluate(args: argparse.Namespace) -> None:
    """Score a run with its task's evaluate hook (see :mod:`vaswani.tasks.registry`)."""
    from vaswani.pipelines.common import check_inference_weights
    from vaswani.plots import confusion_figure
    from vaswani.tasks.evaluation import Evaluation

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    inputs = {
        "--src": args.src,
        "--ref": args.ref,
        "--text": args.text,
        "--labeled": args.labeled,
        "--data": args.data,
    }
    check_output(args.out, "--out", inputs, own_run=args.run_dir, force=args.force)
    spec = registry.spec_of(args.run_dir)
    if spec.evaluate is None:
        raise RunDirError(f"{args.run_dir}: {spec.cannot_evaluate}")
    check_inference_weights(spec.name, args.run_dir, args.quantize, args.dtype)
    request = Evaluation(
        src=args.src,
        ref=args.ref,
        out=args.out,
        text=args.text or (),
        labeled=args.labeled,
        images=args.data,
        file_format=args.format,
        batch_size=args.batch_size,
        decoding=decoding.decoding_from_args(args),
        device=args.device,
        quantize=args.quantize,
        dtype=args.dtype,
    )
    report = spec.evaluate(args.run_dir, request)
    for line in report.lines:
        print(line)
    if report.confusion is not None:
        c = report.confusion
        confusion_figure(c.predicted, c.gold, c.classes, c.out, c.title)
        print(f"confusion matrix: {c.out}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaswani", description="The Transformer family, from scratch on PyTorch."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", required=True)
    train.add_parsers(commands)
    translation.add_translate_parser(commands)
    lm.add_generate_parser(commands)
    mlm.add_fill_mask_parser(commands)
    classify.add_command_parsers(commands)
    tag.add_parser(commands)
    images.add_parsers(commands)
    interop.add_parsers(commands)
    average.add_parser(commands)
    plots.add_parsers(commands)
    serve.add_parser(commands)

    evaluate = commands.add_parser(
        "evaluate",
        help="score a trained run, as its task does (BLEU, perplexity, accuracy...)",
        description="Score a trained run as its task does: "
        + "; ".join(f"{spec.name}: {spec.evaluates}" for spec in registry.TASKS.values() if spec.evaluates)
        + ".",
    )
    evaluate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    evaluate.add_argument(
        "--src", type=Path, help="source sentences (translation; default: the run's test split)"
    )
    evaluate.add_argument("--ref", type=Path, help="reference translations (translation)")
    evaluate.add_argument(
        "--out", type=Path, help="where to write the hypotheses (translation) or the confusion matrix (image)"
    )
    evaluate.add_argument("--text", type=Path, nargs="+", help="text files or folders")
    evaluate.add_argument("--labeled", type=Path, help="labeled examples, in the task's format")
    evaluate.add_argument("--data", type=Path, metavar="DIR", help="images, one subfolder per class (image)")
    evaluate.add_argument(
        "--format", choices=LABELED_FORMATS, help="format of --labeled (default: extension)"
    )
    evaluate.add_argument("--batch-size", type=int, default=64)
    add_force_flag(evaluate)
    add_device_flag(evaluate)
    add_weights_flags(evaluate)
    decoding.add_decoding_flags(evaluate)
    evaluate.set_defaults(handler=cmd_evaluate)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, letting the texts of a command whose texts are optional (``translate``, ``generate``,
    ``classify``, ``embed``) also come after its options: ``translate RUN --beam 5 "text"``, which
    argparse alone refuses once the empty list of texts has been matched before the options."""
    args, extra = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.argv_flags = {
        a.split("=")[0] for a in (sys.argv[1:] if argv is None else argv) if a.startswith("--")
    }
    texts = getattr(args, "texts_field", None)
    if extra and texts and not any(a.startswith("-") for a in extra):
        setattr(args, texts, [*getattr(args, texts), *extra])
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
    keep_freed_memory()
    main_process = world().main  # of several training processes, only the main one prints errors
    finished = False
    try:
        status = args.handler(args)
        finished = True
    except TrainingInterrupted as exc:
        if main_process:
            more = f" --nproc {world().size}" if world().many else ""
            print(
                f"vaswani: {exc}; continue with: vaswani train {args.task} --resume {exc.run_dir}{more}",
                file=sys.stderr,
            )
        return exc.exit_status
    except VaswaniError as exc:
        if args.debug:
            raise
        if main_process:
            print(f"vaswani: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vaswani: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return failures.broken_pipe()
    except Exception as exc:  # from the OS or a library: one line (see vaswani.cli.failures)
        if args.debug:
            raise
        line, code = failures.failure(exc)
        if main_process:
            print(f"vaswani: {line}", file=sys.stderr)
        return code
    finally:
        stop(finished)
    return status or 0
