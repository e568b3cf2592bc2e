"""Training throughput and decoding speed of the default translation model.

Compares, in one process and side by side:

1. training tokens/s of ``vaswani.models.Transformer`` against a ``torch.nn.Transformer``
   built to do the same work (same dims, embeddings, sinusoidal positions, tied output
   projection, post-LN, ReLU, dropout 0), on the same synthetic batches, fp32 and bf16;
2. greedy decoding sentences/s of our model with and without the KV cache
   (exactly 50 new tokens: EOS is ``-1``, which argmax can never produce).

Each step (or decoding) of one contender is timed right next to one of the other, in
A B B A order, so that drift and bursts of a shared machine hit both alike; the figures
are medians and the ratio is the median of the per-pair ratios. Read the ratios, not the
absolute speeds.

    python benchmarks/translation_speed.py            # fp32 and bf16, ~1-3 min on 2 cores
    python benchmarks/translation_speed.py --quick    # a smoke run: seconds
    python benchmarks/translation_speed.py --bf16     # bf16 autocast only (--fp32: fp32 only)
    python benchmarks/translation_speed.py --threads 1 --clock cpu   # steadiest on a busy machine
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from timing import add_clock_flag, autocast, clock, interleave, record, use_clock
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_ids
from vaswani.layers.positions import sinusoidal_table
from vaswani.models import Transformer
from vaswani.tasks import registry
from vaswani.training.losses import label_smoothed_nll

PAD, BOS, EOS = 0, 1, 2
FIRST_ID = 4  # ids below are special tokens
SMOOTHING = 0.1
NEVER_EOS = -1  # argmax never returns -1: decoding always runs max_new_tokens steps
TRAIN_TARGET = 1.25  # ours / nn.Transformer training tokens/s, fp32


def default_model_config(src_vocab: int = 2048, tgt_vocab: int = 2048) -> ModelConfig:
    """The model of the default translation job (``src/vaswani/recipes/translation.yaml``)."""
    model = registry.configure("translation").model
    return model.replace(src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, pad_id=PAD)


class TorchTransformer(nn.Module):
    """``torch.nn.Transformer`` wrapped to do the same work as ours: scaled token embeddings
    plus the sinusoidal table, post-LN blocks without the final stack norms (ours has none
    in post-LN), and an output projection tied to the target embedding."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.pad_id = cfg.pad_id
        self.scale = math.sqrt(d)
        self.src_embed = nn.Embedding(cfg.src_vocab_size, d)
        self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, d)
        self.register_buffer("table", sinusoidal_table(cfg.max_len, d), persistent=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.transformer = nn.Transformer(
                d_model=d, nhead=cfg.n_heads, num_encoder_layers=cfg.n_encoder_layers,
                num_decoder_layers=cfg.n_decoder_layers, dim_feedforward=cfg.d_ff, dropout=0.0,
                activation="relu", batch_first=True, norm_first=False,
            )  # fmt: skip
        self.transformer.encoder.norm = None
        self.transformer.decoder.norm = None
        self.output = nn.Linear(d, cfg.tgt_vocab_size, bias=False)
        for embed in (self.src_embed, self.tgt_embed):
            nn.init.normal_(embed.weight, 0.0, 1.0 / math.sqrt(d))
        self.output.weight = self.tgt_embed.weight

    def embed(self, embedding: nn.Embedding, tokens: Tensor) -> Tensor:
        return embedding(tokens) * self.scale + self.table[: tokens.shape[1]]

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        src_pad = src == self.pad_id
        tgt_pad = tgt_in == self.pad_id
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=tgt_in.device)
        h = self.transformer(
            self.embed(self.src_embed, src), self.embed(self.tgt_embed, tgt_in),
            tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )  # fmt: skip
        return self.output(h)


@dataclass
class Batch:
    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    n_src: int
    n_tgt: int


def synthetic_batches(
    n: int, batch: int, src_len: int, tgt_len: int, cfg: ModelConfig, seed: int = 0
) -> list[Batch]:
    """Random ids, right-padded: lengths are uniform in [len/2, len], one row per batch full."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src_lens = torch.randint(src_len // 2, src_len + 1, (batch,), generator=g)
        tgt_lens = torch.randint(tgt_len // 2, tgt_len, (batch,), generator=g)  # + BOS/EOS
        src_lens[0], tgt_lens[0] = src_len, tgt_len - 1
        src = torch.randint(FIRST_ID, cfg.src_vocab_size, (batch, src_len), generator=g)
        src[torch.arange(src_len)[None, :] >= src_lens[:, None]] = PAD
        words = torch.randint(FIRST_ID, cfg.tgt_vocab_size, (batch, tgt_len - 1), generator=g)
        tgt_in = torch.cat([torch.full((batch, 1), BOS), words], dim=1)
        tgt_out = torch.cat([words, torch.full((batch, 1), PAD)], dim=1)
        tgt_out[torch.arange(batch), tgt_lens] = EOS
        tgt_in[torch.arange(tgt_len)[None, :] > tgt_lens[:, None]] = PAD
        tgt_out[torch.arange(tgt_len)[None, :] > tgt_lens[:, None]] = PAD
        out.append(Batch(src, tgt_in, tgt_out, int((src != PAD).sum()), int((tgt_out != PAD).sum())))
    return out


class Trainee:
    """A model, its Adam, and an endless stream of the shared batches; times each step."""

    def __init__(self, name: str, model: nn.Module, batches: list[Batch], bf16: bool) -> None:
        self.name = name
        self.model = model.train()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.bf16 = bf16
        self._stream = self._cycle(batches)
        self.seconds: list[float] = []
        self.tokens: list[int] = []

    @staticmethod
    def _cycle(batches: list[Batch]) -> Iterator[Batch]:
        while True:
            yield from batches

    def step(self, batch: Batch) -> Tensor:
        with autocast(self.bf16):
            logits = self.model(batch.src, batch.tgt_in)
            loss = label_smoothed_nll(logits, batch.tgt_out, PAD, SMOOTHING) / batch.n_tgt
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def run(self, steps: int = 1, timed: bool = True) -> None:
        for _ in range(steps):
            batch = next(self._stream)
            start = clock()
            loss = float(self.step(batch))
            elapsed = clock() - start
            if not math.isfinite(loss):
                raise RuntimeError(f"{self.name}: non-finite loss {loss}")
            if timed:
                self.seconds.append(elapsed)
                self.tokens.append(batch.n_src + batch.n_tgt)

    def rates(self) -> list[float]:
        return [n / t for n, t in zip(self.tokens, self.seconds, strict=True)]


@dataclass
class Row:
    """A against B: medians of the per-measurement rates, and the ratio of each adjacent pair."""

    benchmark: str
    precision: str
    a_label: str
    a_rates: list[float]
    b_label: str
    b_rates: list[float]
    unit: str
    target: str = ""  # ">= X": the ratio A/B the issue asks for

    @property
    def a(self) -> float:
        return statistics.median(self.a_rates)

    @property
    def b(self) -> float:
        return statistics.median(self.b_rates)

    @property
    def pair_ratios(self) -> list[float]:
        return sorted(x / y for x, y in zip(self.a_rates, self.b_rates, strict=True))

    @property
    def ratio(self) -> float:
        """The median of the paired ratios: robust to the bursts of a shared machine."""
        return statistics.median(self.pair_ratios)

    @property
    def spread(self) -> str:
        r = self.pair_ratios
        if len(r) < 4:
            return f"{r[0]:.2f}–{r[-1]:.2f}"
        q1, _, q3 = statistics.quantiles(r, n=4)
        return f"{q1:.2f}–{q3:.2f}"

    def line(self) -> str:
        return (
            f"{self.a_label} {self.a:,.1f} {self.unit}, {self.b_label} {self.b:,.1f} {self.unit}, "
            f"{self.a_label}/{self.b_label} = {self.ratio:.3f} (median of {len(self.a_rates)} pairs, "
            f"IQR {self.spread})"
        )


def bench_training(cfg: ModelConfig, batches: list[Batch], bf16: bool, steps: int, warmup: int) -> Row:
    precision = "bf16" if bf16 else "fp32"
    torch.manual_seed(0)
    ours = Trainee("ours", Transformer(cfg), batches, bf16)
    torch.manual_seed(0)
    ref = Trainee("nn.Transformer", TorchTransformer(cfg), batches, bf16)
    interleave(lambda: ours.run(warmup, timed=False), lambda: ref.run(warmup, timed=False), 1)
    interleave(ours.run, ref.run, steps)
    row = Row(
        "train tokens/s (src+tgt, non-pad)", precision, "ours", ours.rates(), "nn.Transformer",
        ref.rates(), "tok/s", "" if bf16 else f">= {TRAIN_TARGET}",
    )  # fmt: skip
    print(f"[train {precision}] batch {batches[0].src.shape[0]}: {row.line()}", flush=True)
    return row


def source_batch(cfg: ModelConfig, batch: int, length: int, seed: int = 1) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(FIRST_ID, cfg.src_vocab_size, (batch, length), generator=g)
    lens = torch.randint(length - 5, length + 1, (batch,), generator=g)
    lens[0] = length
    src[torch.arange(length)[None, :] >= lens[:, None]] = PAD
    return src


def bench_decoding(
    model: Transformer, src: Tensor, new_tokens: int, bf16: bool, reps: int, warmup: bool = True
) -> Row:
    """sentences/s of greedy decoding with and without the KV cache, interleaved."""
    rates: dict[bool, list[float]] = {True: [], False: []}

    def run(use_cache: bool, timed: bool = True) -> None:
        start = clock()
        with autocast(bf16):
            decoding = DecodingConfig(max_new_tokens=new_tokens, use_cache=use_cache)
            out = translate_ids(model, src, BOS, NEVER_EOS, decoding)
        elapsed = clock() - start
        if out.tokens.shape != (src.shape[0], new_tokens):
            raise RuntimeError(f"expected {new_tokens} tokens per sentence, got {tuple(out.tokens.shape)}")
        if timed:
            rates[use_cache].append(src.shape[0] / elapsed)

    if warmup:
        interleave(lambda: run(True, timed=False), lambda: run(False, timed=False), 1)
    interleave(lambda: run(True), lambda: run(False), reps)
    precision = "bf16" if bf16 else "fp32"
    row = Row(
        f"decode sent/s, batch {src.shape[0]}, {new_tokens} new tokens", precision, "cached",
        rates[True], "uncached", rates[False], "sent/s",
    )  # fmt: skip
    print(f"[decode {precision}] batch {src.shape[0]}: {row.line()}", flush=True)
    return row


def markdown_table(rows: list[Row], threads: int, clock_name: str) -> str:
    lines = [
        "| benchmark | precision | A (median) | B (median) | A/B | A/B IQR |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.benchmark} | {r.precision} | {r.a_label}: {r.a:,.1f} | {r.b_label}: {r.b:,.1f} "
            f"| **{r.ratio:.2f}** | {r.spread} |"
        )
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines.append(
        f"| environment | torch {torch.__version__} | torch threads: {threads}, {clock_name} clock | "
        f"{platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()} | | {now} |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="timed training steps per model (20; --quick 3)"
    )
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument("--bf16", action="store_true", help="bf16 autocast only (default: fp32 and bf16)")
    precision.add_argument("--fp32", action="store_true", help="fp32 only (default: fp32 and bf16)")
    parser.add_argument("--quick", action="store_true", help="few steps, small batches (a smoke run)")
    parser.add_argument("--batch", type=int, default=64, help="training sentences per batch")
    parser.add_argument("--src-len", type=int, default=20)
    parser.add_argument("--tgt-len", type=int, default=20)
    parser.add_argument("--decode-batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    add_clock_flag(parser)
    args = parser.parse_args(argv)
    use_clock(args.clock)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    steps = args.steps if args.steps is not None else (3 if args.quick else 20)
    warmup = 1 if args.quick else 2
    decode_reps = 1 if args.quick else 3
    if args.quick:  # a smoke run: small batches, short outputs
        args.batch, args.decode_batch, args.new_tokens = 8, 4, 8
    precisions = [True] if args.bf16 else [False] if args.fp32 else [False, True]
    # nn.MultiheadAttention warns about the (standard) float causal mask next to bool padding masks
    warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask")

    cfg = default_model_config()
    print(
        f"torch {torch.__version__}, {threads} threads, {args.clock} clock; model "
        f"d_model={cfg.d_model} heads={cfg.n_heads} d_ff={cfg.d_ff} "
        f"layers={cfg.n_encoder_layers}+{cfg.n_decoder_layers} vocab "
        f"{cfg.src_vocab_size}/{cfg.tgt_vocab_size}",
        flush=True,
    )
    load = os.getloadavg()[0]
    if load > 0.5 and args.clock == "wall":
        print(
            f"note: load average {load:.1f} on {os.cpu_count()} CPUs before the run: other processes "
            "compete for the cores and OpenMP threads stall behind them; if the ratios' IQRs are wide, "
            "rerun with --threads 1 --clock cpu",
            flush=True,
        )
    start = time.perf_counter()
    batches = synthetic_batches(8, args.batch, args.src_len, args.tgt_len, cfg)
    rows = [bench_training(cfg, batches, bf16, steps, warmup) for bf16 in precisions]

    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    for bf16 in precisions:
        for batch, reps in ((args.decode_batch, decode_reps), (1, 4 * decode_reps)):
            src = source_batch(cfg, batch, args.src_len)
            rows.append(bench_decoding(model, src, args.new_tokens, bf16, reps, warmup=not args.quick))
    print(f"\ntotal {time.perf_counter() - start:.0f} s\n")
    for r in rows:
        record(r.benchmark, r.precision, r.a_rates, r.b_rates, r.b_label, r.target, r.a_label)
    print(markdown_table(rows, threads, args.clock))


if __name__ == "__main__":
    main()
