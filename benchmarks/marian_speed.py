"""Beam-search translation speed of our Transformer against ``transformers.MarianMTModel``, same weights.

In one process, a Marian model of a Multi30k-like size (d_model 256, 3 + 3 layers, 4 heads, FFN
1024, SiLU ("swish", OPUS-MT's), scaled embeddings, one shared vocabulary of 8,000 BPE pieces
with the head tied, 256 positions) is built by ``transformers`` with random weights, and ours is
loaded from it through ``vaswani.interop.marian`` (``config_from_hf`` + ``state_from_hf``). Both
translate the 1,000 German sentences of Multi30k's test2016 with beam 5:

- Sources are real: a byte-pair tokenizer with Marian's special ids (``</s>`` 0, ``<unk>`` 1,
  ``<pad>`` the last id) is trained here with ``tokenizers`` on the German side of Multi30k's
  training set (vocabulary = the model's), and every test sentence is encoded with ``</s>``
  appended, as ``MarianTokenizer`` does. Its roles (``</s>`` ends, ``<pad>`` starts the decoder
  and is never generated) are read by :class:`vaswani.tokenizer.TextTokenizer`.
- Weights are random, drawn wider than the training initialisation (std 1/sqrt(fan-in) for
  every matrix and embedding, 0.1 for biases, LayerNorm gains near 1), and the ``</s>`` logit
  bias is then raised by a quantile of its distance to the best token (over teacher-forced
  random targets), as ``tests/test_interop_marian.py`` does, so that translations end at
  plausible lengths (the mean is reported). A random model still repeats a few tokens: the
  translations are not text, but the decoding work (lengths, beams, batches) is real.
- The sources are sorted by length and cut into batches of 32, the same for both. Each batch
  is decoded with beam 5, length penalty |y|^1.0 (HF's default, our ``length_penalty_kind="simple"``
  and ``length_penalty=1.0``), early stopping, ``<pad>`` suppressed, and at most min(2·|x| + 10, 255)
  new tokens with |x| the longest source of the batch (the Translator's rule, one number per batch as
  ``generate`` takes it). Ours: ``vaswani.generation.seq2seq.translate_beam_ids``; Hugging Face's:
  ``MarianMTModel.generate(num_beams=5, length_penalty=1.0, early_stopping=True,
  bad_words_ids=[[pad]], forced_eos_token_id=None)`` and nothing else. Both under
  ``torch.inference_mode``; fp32, and (``--bf16``) bf16 autocast for information.

Whole passes over the test set are timed, ours and HF's alternating (A B B A), after one warm-up
pass each; the table gives the median sentences/s, the median of the per-pair ratios ours/HF and
their spread, and how many translations differ in their token ids (with the first difference).

    python benchmarks/marian_speed.py                  # fp32, 3 timed passes each (minutes on 2 cores)
    python benchmarks/marian_speed.py --bf16           # and the same in bf16 autocast
    python benchmarks/marian_speed.py --quick          # smoke run: tiny model, 16 sentences (seconds)
    python benchmarks/marian_speed.py --sentences 128 --reps 1   # a quicker look at the full-size model
    python benchmarks/marian_speed.py --reps 5 --threads 2 --data PATH/multi30k
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from timing import Row, autocast, available_cores, interleave, record_rows
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from torch import Tensor

from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_beam_ids
from vaswani.interop.marian import config_from_hf
from vaswani.interop.marian_folder import state_from_hf
from vaswani.models.transformer import Transformer
from vaswani.tokenizer import TextTokenizer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
EOS, UNK, PAD = "</s>", "<unk>", "<pad>"  # Marian's ids 0, 1 and the last one
FULL = {
    "d_model": 256, "encoder_layers": 3, "decoder_layers": 3, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024,
    "max_position_embeddings": 256,
}  # fmt: skip
QUICK = {
    "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    "max_position_embeddings": 128,
}  # fmt: skip
MARIAN = {
    "activation_function": "swish", "scale_embedding": True, "dropout": 0.0, "attention_dropout": 0.0,
    "eos_token_id": 0, "forced_eos_token_id": None,
}  # fmt: skip
BEAM, ALPHA = 5, 1.0
GAIN = 1.0  # random weights: std GAIN / sqrt(columns) for matrices and embeddings
EOS_QUANTILE = 0.3  # the </s> bias puts </s> first at about this share of teacher-forced positions
Work = list[tuple[Tensor, list[int]]]  # batches of sources and the indices of their sentences
RATIO_TARGET = 1.5  # ours / HF sentences/s, fp32


@dataclass(frozen=True)
class Setup:
    """The model's shape, the tokenizer's training lines, the test sentences and the batching."""

    hf_config: dict[str, Any]
    vocab: int
    train_lines: int
    sentences: int
    batch: int


def marian_bpe(lines: list[str], vocab: int) -> TextTokenizer:
    """A BPE tokenizer of ``vocab`` ids (or fewer, if the text has fewer pieces) with Marian's
    special ids: ``</s>`` 0, ``<unk>`` 1, ``<pad>`` the last; sources get ``</s>`` appended."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab - 1, special_tokens=[EOS, UNK], show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    tokenizer.add_special_tokens([PAD])
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[(EOS, 0)])
    return TextTokenizer(tokenizer)


def batches(ids: list[list[int]], size: int, pad: int) -> Work:
    """The sources sorted by length (longest first) in right-padded batches of ``size``, each with
    the indices of its sentences in ``ids``."""
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    out = []
    for first in range(0, len(order), size):
        chunk = order[first : first + size]
        src = torch.full((len(chunk), len(ids[chunk[0]])), pad, dtype=torch.long)
        for row, i in enumerate(chunk):
            src[row, : len(ids[i])] = torch.tensor(ids[i])
        out.append((src, chunk))
    return out


def budget(src: Tensor, pad: int, max_len: int) -> int:
    """The batch's most new tokens: the Translator's rule at its longest source."""
    longest = (src != pad).sum(dim=1).max()
    return int(DecodingConfig().target_budget(longest[None], max_len)[0])


def build_pair(setup: Setup, tok: TextTokenizer, sample: Tensor, seed: int = 0) -> tuple[Transformer, Any]:
    """Hugging Face's Marian model with random weights and a calibrated ``</s>`` bias (see the module
    docstring), and ours with the same weights. ``sample`` is a batch of sources."""
    torch.manual_seed(seed)
    config = transformers.MarianConfig(
        vocab_size=tok.vocab_size, pad_token_id=tok.pad_id, decoder_start_token_id=tok.bos_id,
        **setup.hf_config, **MARIAN,
    )  # fmt: skip
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "embed_positions" in name:
                continue
            if "layer_norm" in name:  # gains near 1, biases near 0
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("weight") else 0.0))
            elif name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
            else:  # embeddings (vocab, d_model) and (out, in) matrices alike: GAIN / sqrt(columns)
                p.copy_(torch.randn_like(p) * GAIN / p.shape[1] ** 0.5)
        hf.final_logits_bias.copy_(torch.randn_like(hf.final_logits_bias) * 0.05)
        targets = torch.randint(0, tok.pad_id, sample.shape, generator=torch.Generator().manual_seed(seed))
        targets[:, 0] = tok.bos_id
        logits = hf(input_ids=sample, attention_mask=sample != tok.pad_id, decoder_input_ids=targets).logits
        margin = logits.max(dim=-1).values - logits[..., tok.eos_id]
        hf.final_logits_bias[0, tok.eos_id] += margin.flatten().quantile(EOS_QUANTILE)
    cfg = config_from_hf(hf.config.to_dict())
    ours = Transformer(cfg).eval()
    ours.load_state_dict(state_from_hf(hf.state_dict(), cfg))
    return ours, hf


def trained_pair(run_dir: Path, folder: Path) -> tuple[Transformer, Any, TextTokenizer, TextTokenizer]:
    """A trained translation run and the ``MarianMTModel`` it exports to (``vaswani export-hf``
    into ``folder``), with the run's source and target tokenizers."""
    from vaswani.interop.marian_folder import export_run
    from vaswani.pipelines.translation import Translator
    from vaswani.rundir import RunDir

    translator = Translator.load(run_dir)
    export_run(run_dir, RunDir(run_dir).read_config(), folder)
    hf = transformers.MarianMTModel.from_pretrained(folder).eval()
    return translator.model.eval(), hf, translator.src_tok, translator.tgt_tok


def until_eos(row: list[int], eos: int, pad: int) -> list[int]:
    """A translation's ids up to and including its ``</s>`` (or up to its padding)."""
    if eos in row:
        return row[: row.index(eos) + 1]
    return [t for t in row if t != pad]


def ours_pass(model: Transformer, work: Work, tok: TextTokenizer) -> dict[int, list[int]]:
    """Our translation ids of every sentence (by its index), batch by batch."""
    out: dict[int, list[int]] = {}
    for src, index in work:
        decoding = DecodingConfig(
            beam=BEAM, length_penalty_kind="simple", length_penalty=ALPHA, early_stopping=True,
            max_new_tokens=budget(src, tok.pad_id, model.config.max_len),
        )  # fmt: skip
        beams = translate_beam_ids(model, src, tok.bos_id, tok.eos_id, decoding, tok.suppressed_ids)
        for i, row in zip(index, beams.tokens[:, 0].tolist(), strict=True):
            out[i] = until_eos(row, tok.eos_id, tok.pad_id)
    return out


def hf_pass(model: Any, work: Work, tok: TextTokenizer) -> dict[int, list[int]]:
    """The same with ``MarianMTModel.generate`` (its first id, the decoder start, dropped)."""
    out: dict[int, list[int]] = {}
    for src, index in work:
        sequences = model.generate(
            input_ids=src, attention_mask=src != tok.pad_id, num_beams=BEAM, length_penalty=ALPHA,
            early_stopping=True, max_new_tokens=budget(src, tok.pad_id, model.config.max_position_embeddings),
            bad_words_ids=[[i] for i in tok.suppressed_ids] or None, forced_eos_token_id=None,
            no_repeat_ngram_size=0, repetition_penalty=1.0, min_length=0, do_sample=False,
        )  # fmt: skip
        for i, row in zip(index, sequences[:, 1:].tolist(), strict=True):
            out[i] = until_eos(row, tok.eos_id, tok.pad_id)
    return out


def compare(ours: dict[int, list[int]], hf: dict[int, list[int]]) -> str:
    """How many translations differ, and the first (lowest sentence index) difference."""
    differ = [i for i in sorted(ours) if ours[i] != hf[i]]
    if not differ:
        return f"yes (all {len(ours)})"
    i = differ[0]
    pairs = enumerate(zip(ours[i], hf[i], strict=False))
    at = next((k for k, (a, b) in pairs if a != b), min(len(ours[i]), len(hf[i])))
    return (
        f"no: {len(differ)} of {len(ours)} differ; first: sentence {i}, token {at}: "
        f"ours {ours[i][at : at + 3]}…, HF {hf[i][at : at + 3]}…"
    )


def bench(
    ours: Transformer, hf: Any, work: Work, tok: TextTokenizer, reps: int, bf16: bool
) -> tuple[Row, str, float]:
    """Sentences/s of whole passes of both models, A B B A after one warm-up pass each; whether
    they agree, and the mean length of our translations (``</s>`` included)."""
    n = sum(len(index) for _, index in work)
    rates: dict[str, list[float]] = {"ours": [], "HF": []}
    outputs: dict[str, dict[int, list[int]]] = {}

    def run(name: str, timed: bool = True) -> None:
        start = time.perf_counter()
        with torch.inference_mode(), autocast(bf16):
            outputs[name] = ours_pass(ours, work, tok) if name == "ours" else hf_pass(hf, work, tok)
        if timed:
            rates[name].append(n / (time.perf_counter() - start))

    interleave(lambda: run("ours", timed=False), lambda: run("HF", timed=False), 1)
    interleave(lambda: run("ours"), lambda: run("HF"), reps)
    precision = "bf16" if bf16 else "fp32"
    row = Row(
        f"beam {BEAM} sentences/s, {n} sentences, batch {len(work[0][1])}", precision, rates["ours"],
        rates["HF"], "" if bf16 else f">= {RATIO_TARGET}",
    )  # fmt: skip
    same = compare(outputs["ours"], outputs["HF"])
    mean_length = statistics.mean(len(t) for t in outputs["ours"].values())
    ours_rate, hf_rate = row.cells()
    print(
        f"[beam {precision}] ours {ours_rate} sent/s, HF {hf_rate} sent/s, ours/HF {row.ratio:.3f}; "
        f"mean length {mean_length:.1f}; same ids: {same}",
        flush=True,
    )
    return row, same, mean_length


def markdown_table(results: list[tuple[Row, str, float]], threads: int) -> str:
    """The rows as a markdown table, then the environment."""
    lines = [
        "| benchmark | precision | ours (median) | HF (median) | ours/HF | ours/HF spread | target "
        "| mean length | same ids as HF |",
        "|---|---|---:|---:|---:|---|---|---:|---|",
    ]
    for r, same, mean_length in results:
        ours, hf = r.cells()
        ratio, spread = r.ratio_cells()
        lines.append(
            f"| {r.benchmark} | {r.precision} | {ours} | {hf} | {ratio} | {spread} | {r.target} "
            f"| {mean_length:.1f} | {same} |"
        )
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines.append(
        f"\ntorch {torch.__version__}, transformers {transformers.__version__}, {threads} threads, "
        f"wall clock, {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, {now}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny model, 16 sentences, 1 pass: a smoke run")
    parser.add_argument("--bf16", action="store_true", help="also time both in bf16 autocast")
    parser.add_argument("--reps", type=int, help="timed passes per model and precision (3; --quick 1)")
    parser.add_argument("--sentences", type=int, help="the first N test sentences only (all; --quick 16)")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    parser.add_argument("--data", type=Path, default=DATA, help=f"the Multi30k folder (default {DATA})")
    parser.add_argument(
        "--run",
        type=Path,
        help="a trained Multi30k run (e.g. of configs/multi30k.yaml) instead of random weights",
    )
    args = parser.parse_args(argv)
    test_file, train_file = args.data / "test2016.de", args.data / "train.de"
    if not (test_file.is_file() and train_file.is_file()):
        print(f"skipped: no Multi30k German test2016.de and train.de in {args.data} (see --data)")
        return
    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    if args.quick:
        setup = Setup(QUICK, vocab=500, train_lines=2000, sentences=16, batch=8)
    else:
        setup = Setup(FULL, vocab=8000, train_lines=29000, sentences=1000, batch=32)
    reps = args.reps or (1 if args.quick else 3)
    start = time.perf_counter()
    test = test_file.read_text(encoding="utf-8").splitlines()[: args.sentences or setup.sentences]
    with tempfile.TemporaryDirectory() as folder:
        if args.run is None:
            train = train_file.read_text(encoding="utf-8").splitlines()[: setup.train_lines]
            src_tok = tok = marian_bpe(train, setup.vocab)
            work = batches(tok.encode_batch(test), setup.batch, tok.pad_id)
            ours, hf = build_pair(setup, tok, work[len(work) // 2][0])
        else:
            ours, hf, src_tok, tok = trained_pair(args.run, Path(folder))
            work = batches(src_tok.encode_batch(test), setup.batch, tok.pad_id)
    weights = "random weights" if args.run is None else f"trained weights of {args.run}"
    c = hf.config
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {threads} threads; Marian "
        f"d_model {c.d_model}, {c.encoder_layers}+{c.decoder_layers} layers, "
        f"{c.encoder_attention_heads} heads, "
        f"FFN {c.encoder_ffn_dim}, {c.activation_function}, vocab {c.vocab_size}, {weights}; "
        f"{len(test)} sentences of {test_file}, "
        f"{statistics.mean(len(ids) for ids in src_tok.encode_batch(test)):.1f} source tokens on average",
        flush=True,
    )
    results = [bench(ours, hf, work, tok, reps, bf16) for bf16 in ((False, True) if args.bf16 else (False,))]
    print(f"\ntotal {time.perf_counter() - start:.0f} s\n")
    record_rows([row for row, _, _ in results])
    print(markdown_table(results, threads))


if __name__ == "__main__":
    main()
