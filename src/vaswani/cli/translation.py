"""``vaswani train translation``, ``vaswani translate`` and the translation side of ``evaluate``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from vaswani.cli.common import (
    add_model_flags,
    add_run_flags,
    add_train_flags,
    merge_settings,
    new_run_dir,
    read_stdin,
    resume_changes,
)
from vaswani.config import BLEU_TOKENIZERS, PRESETS, DataConfig, ModelConfig, RunConfig, TrainConfig
from vaswani.data.readers import read_parallel
from vaswani.errors import ConfigError

EXAMPLES = [
    "Tom chases Jerry",
    "Tom chased Jerry yesterday",
    "Does Jerry like the small cat?",
    "The dog that Tom saw is eating rice",
    "Mary did not buy three books",
]
PATH_FIELDS = ("src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt")


def add_parser(sub: Any) -> None:
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
    add_run_flags(p)
    model = add_model_flags(p, "encoder and decoder layers")
    model.add_argument("--encoder-layers", type=int)
    model.add_argument("--decoder-layers", type=int)
    add_train_flags(p)
    p.set_defaults(handler=cmd_train)


def add_translate_parser(commands: Any) -> None:
    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained run",
        description="Translate the TEXT arguments, or standard input one line per sentence.",
    )
    translate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    translate.add_argument("text", nargs="*", help="sentences (default: read standard input)")
    translate.add_argument("--batch-size", type=int, default=64)
    translate.set_defaults(handler=cmd_translate)


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    """Defaults < --config file < flags."""
    from vaswani.tasks.translation import default_settings

    if (args.src is None) != (args.tgt is None):
        raise ConfigError("--src and --tgt go together")
    if (args.valid_src is None) != (args.valid_tgt is None):
        raise ConfigError("--valid-src and --valid-tgt go together")
    if args.src is None:
        model, train, data = default_settings()
    else:
        model, train = dict(PRESETS["transformer-small"]), {}
        data = {"source": "files"}
        data.update({k: getattr(args, k) for k in PATH_FIELDS if getattr(args, k) is not None})
    source = merge_settings(args, model, train, data)
    if args.layers is not None:
        model["n_encoder_layers"] = model["n_decoder_layers"] = args.layers
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
    return RunConfig(
        "translation",
        ModelConfig.from_dict(model, source=source),
        TrainConfig.from_dict(train, source=source),
        DataConfig.from_dict(data, source=source),
    )


def cmd_train(args: argparse.Namespace) -> int:
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
            metrics, translator, data = resume_translation(run_dir, args.quiet, **resume_changes(args))
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


def cmd_evaluate(args: argparse.Namespace) -> None:
    """BLEU and chrF of a translation run on ``--src``/``--ref``."""
    from vaswani.tasks.translation import Translator, evaluate_split

    if args.src is None or args.ref is None:
        raise ConfigError("a translation run is evaluated with --src and --ref")
    translator = Translator.load(args.run_dir)
    pairs = read_parallel(args.src, args.ref)
    scores = evaluate_split(translator, pairs, batch_size=args.batch_size)
    out = args.out or args.run_dir / f"hypotheses.{args.src.name}"
    Path(out).write_text("\n".join(scores.pop("hypotheses")) + "\n", encoding="utf-8")
    print(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  ({len(pairs)} sentences)")
    print(f"  {scores['bleu_signature']}\n  {scores['chrf_signature']}\nhypotheses: {out}")
