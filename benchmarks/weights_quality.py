"""What int8 and bf16 inference weights cost in quality: the perplexity of an lm run on its own
validation split and the BLEU of a translation run on its own test split, fp32 beside
``--dtype bf16`` and ``--quantize int8`` (targets: perplexity within +1% relative, BLEU within 0.3).

    python benchmarks/weights_quality.py --lm runs/lm --translation runs/zh   # the default recipes' runs
    python benchmarks/weights_quality.py --quick     # a smoke run on tiny runs it trains

Every window of the validation text is scored (not the trainer's sample of ``eval_sentences``
windows); the translation is greedy, as ``vaswani evaluate`` does.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import math
import tempfile
from pathlib import Path

import quick
import torch
from timing import cpu_description

from vaswani.data.config import LMData, ParallelData
from vaswani.layers.quantize import prepare_weights
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.lm_text import encode_documents, split_text, stream_loss
from vaswani.pipelines.translation import Translator
from vaswani.rundir import RunDir
from vaswani.tasks.translation import evaluate_split, load_data

WEIGHTS = {"fp32": (None, None), "bf16": (None, "bf16"), "int8": ("int8", None)}
"""Each row's (--quantize, --dtype)."""


def lm_perplexities(run_dir: Path) -> dict[str, float]:
    """The perplexity of the lm run on its validation split, per kind of weights."""
    lm = LanguageModel.load(run_dir, "cpu")
    run = RunDir(run_dir).read_config("lm", LMData)
    _, valid, _ = split_text(run.data)  # type: ignore[arg-type]
    ids = encode_documents(lm.tokenizer, valid)
    found = {}
    for name, (quantize, dtype) in WEIGHTS.items():
        model = prepare_weights(copy.deepcopy(lm.model), quantize, dtype)
        found[name] = math.exp(stream_loss(model, ids, vocab_size=lm.tokenizer.vocab_size))
    print(f"lm {run_dir}: {len(ids):,} validation tokens")
    return found


def translation_bleus(run_dir: Path) -> dict[str, float]:
    """The BLEU of the translation run on its test split, per kind of weights."""
    translator = Translator.load(run_dir, "cpu")
    data = load_data(RunDir(run_dir).read_config("translation", ParallelData).data)  # type: ignore[arg-type]
    pairs = data.test or data.valid
    found = {}
    for name, (quantize, dtype) in WEIGHTS.items():
        model = prepare_weights(copy.deepcopy(translator.model), quantize, dtype)
        prepared = Translator(model, translator.src_tok, translator.tgt_tok, translator.bleu_tokenize)
        found[name] = evaluate_split(prepared, pairs)["bleu"]
    print(f"translation {run_dir}: {len(pairs)} test sentences")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lm", type=Path, help="an lm run (the default recipe's)")
    parser.add_argument("--translation", type=Path, help="a translation run (the default recipe's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny runs trained for it")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory()
    if args.quick:
        args.lm, args.translation = (quick.train(task, Path(scratch.name)) for task in ("lm", "translation"))
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_description()}; torch {torch.__version__}; {datetime.date.today()}")
    rows = []
    if args.lm is not None:
        ppl = lm_perplexities(args.lm)
        for name, value in ppl.items():
            change = value / ppl["fp32"] - 1
            rows.append(f"| lm perplexity (valid) | {name} | {value:.3f} | {change:+.2%} | +1% | "
                        f"{'met' if change <= 0.01 else 'missed'} |")  # fmt: skip
    if args.translation is not None:
        bleu = translation_bleus(args.translation)
        for name, value in bleu.items():
            change = value - bleu["fp32"]
            rows.append(f"| translation BLEU (test) | {name} | {value:.2f} | {change:+.2f} | -0.3 | "
                        f"{'met' if change >= -0.3 else 'missed'} |")  # fmt: skip
    print("\n| metric | weights | value | vs fp32 | target | |\n|---|---|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
