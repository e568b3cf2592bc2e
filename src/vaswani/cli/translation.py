"""``vaswani train translation``, ``vaswani translate`` and the translation side of ``evaluate``.

Decoding is greedy by default; ``--beam K`` turns on beam search (the paper used K = 4 with a
GNMT length penalty of alpha = 0.6), ``--temperature``/``--top-k``/``--top-p`` sampling; the
flags become one :class:`~vaswani.generation.config.DecodingConfig` (:mod:`vaswani.cli.decoding`).
"""

from __future__ import annotations

import argparse
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
from vaswani.cli.decoding import add_decoding_flags, add_sampling_flags, decoding_from_args, describe_decoding
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
PATH_FIELDS = ("src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "pairs")


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
    data.add_argument(
        "--pairs",
        type=Path,
        help="instead of --src/--tgt: one tab-separated file of sentence pairs (e.g. a Tatoeba "
        "export); test and valid pairs are held out at random (data.n_test, data.n_valid)",
    )
    data.add_argument(
        "--columns", metavar="SRC,TGT", help="the --pairs columns of source and target, from 0 (default 0,1)"
    )
    data.add_argument("--vocab-size", type=int, help="BPE vocabulary size per tokenizer")
    data.add_argument("--shared-vocab", action="store_true", default=None, help="one BPE for both languages")
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
    decoding = add_decoding_flags(translate)
    decoding.add_argument(
        "--n-best",
        type=int,
        metavar="N",
        help="print the N best beam hypotheses of each sentence as 'INDEX<TAB>SCORE<TAB>TEXT' (N <= K)",
    )
    add_sampling_flags(translate)
    translate.set_defaults(handler=cmd_translate, texts_field="text")


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    """Defaults < --config file < flags."""
    from vaswani.tasks.translation import default_settings

    if (args.src is None) != (args.tgt is None):
        raise ConfigError("--src and --tgt go together")
    if (args.valid_src is None) != (args.valid_tgt is None):
        raise ConfigError("--valid-src and --valid-tgt go together")
    if args.pairs is not None and args.src is not None:
        raise ConfigError("--pairs replaces --src and --tgt: give one or the other")
    if args.src is None and args.pairs is None:
        model, train, data = default_settings()
    else:
        model, train = dict(PRESETS["transformer-small"]), {}
        data = {"source": "files" if args.pairs is None else "tsv"}
        data.update({k: getattr(args, k) for k in PATH_FIELDS if getattr(args, k) is not None})
    if args.columns is not None:
        data["columns"] = parse_columns(args.columns)
    source = merge_settings(args, model, train, data)
    if model.get("arch", "encoder_decoder") != "encoder_decoder":
        raise ConfigError(
            f"{source}: config field 'model.arch': a translator is 'encoder_decoder', got {model['arch']!r}"
        )
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


def parse_columns(text: str) -> list[int]:
    """``"0,1"`` → ``[0, 1]``, for ``--columns``."""
    try:
        columns = [int(part) for part in text.split(",")]
    except ValueError:
        columns = []
    if len(columns) != 2:
        raise ConfigError(f"--columns: expected two column numbers such as 0,1; got {text!r}")
    return columns


def cmd_train(args: argparse.Namespace) -> int:
    from vaswani.tasks.translation import (
        DEFAULT_CORPUS,
        evaluate_split,
        resume_translation,
        train_translation,
        write_test_metrics,
    )

    started = time.perf_counter()
    if args.resume:
        run_dir = args.resume
        metrics, translator, data = resume_translation(run_dir, args.quiet, **resume_changes(args))
    else:
        run = run_config_from_args(args)
        run_dir = new_run_dir(args.out, "translation")
        metrics, translator, data = train_translation(run, run_dir, quiet=args.quiet)
    pairs = data.test or data.valid
    split = "test" if data.test else "valid"
    scores = evaluate_split(translator, pairs, quiet=args.quiet)
    metrics = write_test_metrics(run_dir, metrics, scores, split)
    print(f"\n{split} {describe_scores(scores)}  ({len(pairs)} sentences, greedy)")
    print(f"  {scores['bleu_signature']}")
    print(
        f"valid loss {metrics['valid_loss']:.3f}, {metrics['steps']} steps, "
        f"{metrics['tokens_per_second']:,.0f} tokens/s, total {time.perf_counter() - started:.0f} s"
    )
    if data.train_name == DEFAULT_CORPUS:
        print()
        for sentence, translation in zip(EXAMPLES, translator.translate(EXAMPLES), strict=True):
            print(f"  {sentence}  →  {translation}")
    example = EXAMPLES[0] if data.train_name == DEFAULT_CORPUS else pairs[0][0]
    print(f'\nrun directory: {run_dir}\n  vaswani translate {run_dir} "{example}"')
    return 0


def cmd_translate(args: argparse.Namespace) -> None:
    from vaswani.tasks.translation import Translator

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    decoding = decoding_from_args(args)
    if args.n_best is not None and decoding.strategy == "sample":
        raise ConfigError("--n-best lists come from beam search: drop --temperature, --top-k and --top-p")
    translator = Translator.load(args.run_dir)
    sentences = list(args.text) if args.text else [line.rstrip("\r\n") for line in read_stdin()]
    if args.n_best is None:
        for line in translator.translate(sentences, decoding, batch_size=args.batch_size):
            print(line, flush=True)
        return
    found = translator.translate_n_best(sentences, decoding, batch_size=args.batch_size)
    for index, hypotheses in enumerate(found):
        for hypothesis in hypotheses:
            print(f"{index}\t{hypothesis.score:.4f}\t{hypothesis.text}", flush=True)


def describe_scores(scores: dict[str, Any]) -> str:
    return f"BLEU {scores['bleu']:.2f} (lowercased {scores['bleu_lowercase']:.2f})  chrF {scores['chrf']:.2f}"


def cmd_evaluate(args: argparse.Namespace) -> None:
    """BLEU and chrF of a translation run on ``--src``/``--ref``, or on the run's own test split."""
    from vaswani.rundir import read_run_config
    from vaswani.tasks.translation import Translator, evaluate_split, load_data

    if args.text:
        raise ConfigError(
            "a translation run is evaluated on --src and --ref, or its own test split, not --text"
        )
    if (args.src is None) != (args.ref is None):
        raise ConfigError("--src and --ref go together")
    decoding = decoding_from_args(args)
    translator = Translator.load(args.run_dir)
    if args.src is not None:
        pairs, name = read_parallel(args.src, args.ref), args.src.name
    else:
        data = load_data(read_run_config(args.run_dir).data)
        pairs, name = (data.test, "test") if data.test else (data.valid, "valid")
    scores = evaluate_split(translator, pairs, batch_size=args.batch_size, quiet=False, decoding=decoding)
    out = args.out or args.run_dir / f"hypotheses.{name}"
    Path(out).write_text("\n".join(scores.pop("hypotheses")) + "\n", encoding="utf-8")
    print(f"{name}: {describe_scores(scores)}  ({len(pairs)} sentences, {describe_decoding(decoding)})")
    print(
        f"  {scores['bleu_signature']}\n  {scores['bleu_lowercase_signature']}\n"
        f"  {scores['chrf_signature']}\nhypotheses: {out}"
    )
