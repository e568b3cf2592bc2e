"""The ``vaswani`` command: parse, call the Python API, print.

Errors caused by the user's input print one line (``vaswani: error: …``) and
exit with status 2, without a traceback unless ``--debug`` is given. SIGINT or
SIGTERM during training finishes the step, writes a checkpoint, prints one line
saying how to resume and exits with status 130 or 143 (128 + the signal number).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from vaswani.config import (
    ACTIVATIONS,
    BLEU_TOKENIZERS,
    NORMS,
    POSITIONS,
    PRESETS,
    SCHEDULES,
    TIES,
    DataConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
)
from vaswani.data.readers import read_lines, read_parallel
from vaswani.errors import ConfigError, DataError, RunDirError, VaswaniError

EXAMPLES = [
    "Tom chases Jerry",
    "Tom chased Jerry yesterday",
    "Does Jerry like the small cat?",
    "The dog that Tom saw is eating rice",
    "Mary did not buy three books",
]

# Flag name → (config section, field). Flags left unset keep the config file's value.
MODEL_FLAGS = {
    "d_model": "d_model", "heads": "n_heads", "d_ff": "d_ff", "encoder_layers": "n_encoder_layers",
    "decoder_layers": "n_decoder_layers", "dropout": "dropout", "norm": "norm",
    "position": "position", "attn_window": "attn_window", "rel_clip": "rel_clip",
    "max_len": "max_len", "activation": "activation", "tie": "tie_embeddings",
}  # fmt: skip
TRAIN_FLAGS = {
    "max_steps": "max_steps", "max_minutes": "max_minutes", "batch_tokens": "batch_tokens",
    "lr": "lr", "warmup": "warmup_steps", "schedule": "schedule", "accumulate": "accumulate",
    "label_smoothing": "label_smoothing", "clip_norm": "clip_norm", "eval_every": "eval_every",
    "checkpoint_every": "checkpoint_every", "seed": "seed", "bf16": "bf16", "threads": "threads",
    "deterministic": "deterministic",
}  # fmt: skip


def _translation_parser(sub: Any) -> None:
    p = sub.add_parser(
        "translation",
        help="train an encoder-decoder translator",
        description="Train an encoder-decoder Transformer. With no --src/--tgt it trains on the "
        "embedded English→Chinese grammar corpus (generated, no download) and reports BLEU on "
        "its held-out split.",
    )
    data = p.add_argument_group("data")
    data.add_argument("--src", type=Path, help="training source file, one sentence per line")
    data.add_argument("--tgt", type=Path, help="training target file, aligned with --src")
    data.add_argument("--valid-src", type=Path)
    data.add_argument("--valid-tgt", type=Path)
    data.add_argument("--test-src", type=Path)
    data.add_argument("--test-tgt", type=Path)
    data.add_argument("--vocab-size", type=int, help="BPE vocabulary size per tokenizer")
    data.add_argument("--shared-vocab", action="store_true", help="one BPE for both languages")
    data.add_argument(
        "--bleu-tokenize",
        choices=BLEU_TOKENIZERS,
        help="sacrebleu tokenizer (default: zh for Chinese, else 13a)",
    )
    run = p.add_argument_group("run")
    run.add_argument("--config", type=Path, help="YAML file with model:, train: and data: sections")
    run.add_argument("--out", type=Path, help="run directory to write (default: runs/NAME)")
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a stopped run")
    run.add_argument("--preset", choices=sorted(PRESETS), help="model architecture preset")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    model = p.add_argument_group("model")
    model.add_argument("--d-model", type=int)
    model.add_argument("--heads", type=int)
    model.add_argument("--d-ff", type=int)
    model.add_argument("--layers", type=int, help="encoder and decoder layers")
    model.add_argument("--encoder-layers", type=int)
    model.add_argument("--decoder-layers", type=int)
    model.add_argument("--dropout", type=float)
    model.add_argument("--norm", choices=NORMS)
    model.add_argument("--position", choices=POSITIONS)
    model.add_argument("--attn-window", type=int, help="local attention: keys within N positions")
    model.add_argument("--rel-clip", type=int, help="clipping distance k of relative positions")
    model.add_argument("--max-len", type=int)
    model.add_argument("--activation", choices=ACTIVATIONS)
    model.add_argument("--tie", choices=TIES, help="embedding tying")
    train = p.add_argument_group("training")
    train.add_argument("--max-steps", type=int)
    train.add_argument("--max-minutes", type=float)
    train.add_argument("--batch-tokens", type=int)
    train.add_argument("--lr", type=float, help="peak learning rate")
    train.add_argument("--warmup", type=int, help="warmup steps")
    train.add_argument("--schedule", choices=SCHEDULES)
    train.add_argument("--accumulate", type=int, help="batches per optimizer step")
    train.add_argument("--label-smoothing", type=float)
    train.add_argument("--clip-norm", type=float)
    train.add_argument("--eval-every", type=int)
    train.add_argument("--checkpoint-every", type=int, metavar="STEPS", help="a checkpoint every STEPS steps")
    train.add_argument("--seed", type=int)
    train.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None)
    train.add_argument("--threads", type=int)
    train.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="deterministic algorithms on one thread: the same weights on every rerun or resume (CPU)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaswani", description="The Transformer family, from scratch on PyTorch."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a model")
    _translation_parser(train.add_subparsers(dest="task", required=True))

    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained run",
        description="Translate the TEXT arguments, or standard input one line per sentence.",
    )
    translate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    translate.add_argument("text", nargs="*", help="sentences (default: read standard input)")
    translate.add_argument("--batch-size", type=int, default=64)

    evaluate = commands.add_parser("evaluate", help="BLEU and chrF of a trained run on a test set")
    evaluate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    evaluate.add_argument("--src", type=Path, required=True)
    evaluate.add_argument("--ref", type=Path, required=True)
    evaluate.add_argument("--out", type=Path, help="where to write the hypotheses")
    evaluate.add_argument("--batch-size", type=int, default=64)
    return parser


def read_config_file(path: Path) -> dict[str, dict[str, Any]]:
    """The sections of a YAML config file, refusing unknown sections with the file named."""
    text = "\n".join(read_lines(path, allow_empty_lines=True))
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected sections model:, train: and data:")
    for section, value in loaded.items():
        if section not in ("model", "train", "data"):
            raise ConfigError(f"{path}: unknown config section '{section}'")
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: section '{section}' must be a mapping")
    return loaded


def default_corpus_settings() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Model, training and data settings of the main job on the embedded corpus
    (sized to finish in under five minutes on two CPU cores)."""
    model = {
        "d_model": 128, "n_heads": 4, "d_ff": 512, "n_encoder_layers": 2, "n_decoder_layers": 2,
        "dropout": 0.0, "max_len": 64, "tie_embeddings": "output",
    }  # fmt: skip
    train = {
        "batch_tokens": 3000, "max_steps": 1000, "max_minutes": 3.5, "lr": 2e-3,
        "warmup_steps": 200, "schedule": "cosine", "eval_every": 250, "eval_sentences": 300,
    }  # fmt: skip
    data = {
        "source": "default", "seed": 0, "n_train": 60_000, "n_valid": 500, "n_test": 1000,
        "vocab_size": 2000,
    }  # fmt: skip
    return model, train, data


PATH_FIELDS = ("src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt")


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    """Defaults < --config file < flags."""
    if (args.src is None) != (args.tgt is None):
        raise ConfigError("--src and --tgt go together")
    if (args.valid_src is None) != (args.valid_tgt is None):
        raise ConfigError("--valid-src and --valid-tgt go together")
    if args.src is None:
        model, train, data = default_corpus_settings()
    else:
        model, train = dict(PRESETS["transformer-small"]), {}
        data = {"source": "files"}
        data.update({k: getattr(args, k) for k in PATH_FIELDS if getattr(args, k) is not None})
    if args.preset:
        model.update(PRESETS[args.preset])
    if args.config:
        sections = read_config_file(args.config)
        model.update(sections.get("model", {}))
        train.update(sections.get("train", {}))
        data.update(sections.get("data", {}))
    for flag, name in MODEL_FLAGS.items():
        if getattr(args, flag) is not None:
            model[name] = getattr(args, flag)
    if args.layers is not None:
        model["n_encoder_layers"] = model["n_decoder_layers"] = args.layers
    for flag, name in TRAIN_FLAGS.items():
        if getattr(args, flag) is not None:
            train[name] = getattr(args, flag)
    if args.vocab_size is not None:
        data["vocab_size"] = args.vocab_size
    if args.shared_vocab:
        data["shared_vocab"] = True
        model.setdefault("tie_embeddings", "all")
    elif "tie_embeddings" not in model:
        model["tie_embeddings"] = "output"
    if args.bleu_tokenize:
        data["bleu_tokenize"] = args.bleu_tokenize
    for key in PATH_FIELDS:  # stored absolute, so that --resume works from any folder
        if isinstance(data.get(key), (str, Path)):
            data[key] = str(Path(data[key]).resolve())
    source = str(args.config) if args.config else "flags"
    return RunConfig(
        "translation",
        ModelConfig.from_dict(model, source=source),
        TrainConfig.from_dict(train, source=source),
        DataConfig.from_dict(data, source=source),
    )


def new_run_dir(out: Path | None, name: str) -> Path:
    """A run directory that is new or empty: an existing run is never overwritten."""
    if out is None:
        out = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunDirError(f"{out}: already exists and is not empty; choose another --out")
    return out


def cmd_train_translation(args: argparse.Namespace) -> int:
    from vaswani.tasks.translation import (
        DEFAULT_CORPUS,
        evaluate_split,
        resume_translation,
        train_translation,
        write_test_metrics,
    )
    from vaswani.training.trainer import TrainingInterrupted

    started = time.perf_counter()
    try:
        if args.resume:
            run_dir = args.resume
            changes = {
                name: getattr(args, flag)
                for flag, name in TRAIN_FLAGS.items()
                if flag in ("max_steps", "max_minutes") and getattr(args, flag) is not None
            }
            metrics, translator, data = resume_translation(run_dir, args.quiet, **changes)
        else:
            run = run_config_from_args(args)
            run_dir = new_run_dir(args.out, "translation")
            metrics, translator, data = train_translation(run, run_dir, quiet=args.quiet)
    except TrainingInterrupted as exc:
        print(f"vaswani: {exc}; continue with: vaswani train translation --resume {run_dir}", file=sys.stderr)
        return exc.exit_status
    pairs = data.test or data.valid
    split = "test" if data.test else "valid"
    scores = evaluate_split(translator, pairs, quiet=args.quiet)
    metrics = write_test_metrics(run_dir, metrics, scores, split)
    print(f"\n{split} BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  ({len(pairs)} sentences)")
    print(f"  {scores['bleu_signature']}")
    print(
        f"valid loss {metrics['valid_loss']:.3f}, {metrics['steps']} steps, "
        f"{metrics['tokens_per_second']:,.0f} tokens/s, total {time.perf_counter() - started:.0f} s"
    )
    if data.train_name == DEFAULT_CORPUS:
        print()
        for sentence, translation in zip(EXAMPLES, translator.translate(EXAMPLES), strict=True):
            print(f"  {sentence}  →  {translation}")
    print(f'\nrun directory: {run_dir}\n  vaswani translate {run_dir} "Tom chases Jerry"')
    return 0


def cmd_translate(args: argparse.Namespace) -> None:
    from vaswani.tasks.translation import Translator

    translator = Translator.load(args.run_dir)
    sentences = list(args.text) if args.text else [line.rstrip("\r\n") for line in read_stdin()]
    for line in translator.translate(sentences, batch_size=args.batch_size):
        print(line, flush=True)


def read_stdin() -> list[str]:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        number = data[: exc.start].count(b"\n") + 1
        raise DataError(f"<stdin>:{number}: not valid UTF-8") from None


def cmd_evaluate(args: argparse.Namespace) -> None:
    from vaswani.tasks.translation import Translator, evaluate_split

    translator = Translator.load(args.run_dir)
    pairs = read_parallel(args.src, args.ref)
    scores = evaluate_split(translator, pairs, batch_size=args.batch_size)
    out = args.out or args.run_dir / f"hypotheses.{args.src.name}"
    Path(out).write_text("\n".join(scores.pop("hypotheses")) + "\n", encoding="utf-8")
    print(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  ({len(pairs)} sentences)")
    print(f"  {scores['bleu_signature']}\n  {scores['chrf_signature']}\nhypotheses: {out}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers: dict[tuple[str, str | None], Callable[[argparse.Namespace], int | None]] = {
        ("train", "translation"): cmd_train_translation,
        ("translate", None): cmd_translate,
        ("evaluate", None): cmd_evaluate,
    }
    try:
        status = handlers[(args.command, getattr(args, "task", None))](args)
    except VaswaniError as exc:
        if args.debug:
            raise
        print(f"vaswani: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vaswani: interrupted", file=sys.stderr)
        return 130
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
