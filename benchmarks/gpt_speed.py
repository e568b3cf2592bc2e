"""Training and generation speed of our GPT against Hugging Face's ``GPT2LMHeadModel``, same weights.

Compares, in one process and side by side, a GPT-2-shaped model (6 layers, 6 heads, 384 dims,
context 256, 65 characters of vocabulary, dropout 0) built by ``transformers`` with random
weights and ours loaded from it through ``vaswani.interop.gpt2.state_from_hf``:

1. training tokens/s on batches of 16 × 256 random ids (forward, mean cross-entropy, backward,
   fused AdamW step with decay on the matrices, the trainer's ``make_optimizer`` for both),
   fp32 and bf16 autocast; each step of one model is timed next to one of the other, in
   A B B A order, so that a busy neighbour hits both alike;
2. the model FLOPs utilisation of those steps against the matmul peak measured in the same
   run (``torch.mm`` or, in float32 on the CPU, oneDNN's linear, at the model's own shapes, best
   of several: ``timing.matmul_peak``), with PaLM's 6·N + 12·L·d·T FLOPs per trained token;
3. peak memory of training: each model trains a few steps in a fresh (spawned) process, which
   reports its peak resident set size (``VmHWM``) and the growth over its size before the
   first step (the model built); on a GPU, in this process, the CUDA allocator's peak
   (``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``) over its bytes before;
4. greedy generation with a KV cache, batch 1, a 16-token prompt and 240 new tokens (fp32):
   ours through ``vaswani.generation.sampling.generate`` over ``lm_next_logits`` against
   ``GPT2LMHeadModel.generate``, both under ``torch.inference_mode``; and whether both produce
   the same tokens.

``--device cuda`` (or ``cuda:N``) runs all of it on that GPU: models, batches, prompts and the
matmul peak (there also at 8192³, the GPU's own peak), the clock read after ``torch.cuda.synchronize``.

Read the ratios, not the absolute speeds: the figures are medians and each ratio is the median
of the per-pair ratios.

    python benchmarks/gpt_speed.py              # the full comparison (a few minutes on 2 cores)
    python benchmarks/gpt_speed.py --quick      # smoke run on a tiny model (well under a minute)
    python benchmarks/gpt_speed.py --steps 20 --threads 2
    python benchmarks/gpt_speed.py --threads 1 --clock cpu   # steadiest on a busy machine
    python benchmarks/gpt_speed.py --device cuda --steps 200  # on a GPU
"""

from __future__ import annotations

import argparse
import datetime
import gc
import multiprocessing
import os
import platform
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from timing import (
    Row,
    add_clock_flag,
    autocast,
    available_cores,
    bench_device,
    device_description,
    interleave,
    matmul_peak,
    memory_around,
    record_rows,
    synced_clock,
    use_clock,
)
from torch import Tensor, nn

from vaswani.config import ModelConfig, TrainConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.interop.gpt2 import config_from_hf, state_from_hf
from vaswani.models.gpt import GPT
from vaswani.training.optimizer import make_optimizer

FULL = {"n_layer": 6, "n_head": 6, "n_embd": 384, "n_positions": 256, "vocab_size": 65}
QUICK = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64, "vocab_size": 65}
NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
NO_SPECIAL_TOKENS = {"bos_token_id": None, "eos_token_id": None}  # generation runs to max_new_tokens
NEVER_EOS = -1  # our generate(): argmax never returns -1
TRAIN = TrainConfig(optimizer="adamw", lr=3e-4, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, warmup_steps=0)
# (m, k, n) of the full model's projections on one 16 × 256 batch: q/k/v, FFN up, FFN down (--quick too)
MATMUL_SHAPES = [(4096, 384, 1152), (4096, 384, 1536), (4096, 1536, 384)]
GPU_PEAK_SHAPE = (8192, 8192, 8192)  # where a GPU reaches its matmul peak (the model's shapes are too small)
GPU_TIMED_FLOP = 1e12  # FLOPs per timed section on a GPU: one product of the model's shapes is a few µs
TRAIN_TARGET = 1.25  # ours / HF training tokens/s, fp32
TRAIN_BF16_TARGET = 1.5  # ours / HF training tokens/s, bf16
MFU_TARGET = 0.50  # ours, fp32
GENERATE_TARGET = 2.0  # ours / HF generated tokens/s
FLOPS_FORMULA = (
    "FLOPs per trained token = 6·N + 12·L·d·T (PaLM, appendix B): N = parameters but the position embedding "
    "(the tied token embedding counted once), L layers, d = d_model, T = context; MFU = FLOPs per token × "
    "tokens/s / matmul peak (torch.mm or oneDNN's linear, same run and precision)"
)


@dataclass(frozen=True)
class Setup:
    """The model (as a GPT-2 ``config.json``), the workloads and the device they run on."""

    hf_config: dict[str, Any]
    batch: int
    prompt: int
    new_tokens: int
    device: torch.device

    @property
    def context(self) -> int:
        return int(self.hf_config["n_positions"])


def build_pair(setup: Setup, seed: int = 0) -> tuple[GPT, nn.Module]:
    """Ours and Hugging Face's model with the same (GPT-2-initialised, random) weights, on the device."""
    torch.manual_seed(seed)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**setup.hf_config))
    cfg = config_from_hf(hf.config.to_dict())
    ours = GPT(cfg)
    ours.load_state_dict(state_from_hf(hf.state_dict(), cfg))
    return ours.to(setup.device), hf.to(setup.device)


def our_config(setup: Setup) -> ModelConfig:
    """Our config of the benchmark's GPT-2 shape."""
    return config_from_hf(transformers.GPT2Config(**setup.hf_config).to_dict())


def logits_of(model: nn.Module) -> Callable[[Tensor], Tensor]:
    """ids (batch, seq) → logits (batch, seq, vocab); Hugging Face's without its KV cache (training)."""
    if isinstance(model, GPT):
        return model
    return lambda ids: model(input_ids=ids, use_cache=False).logits


def random_batches(setup: Setup, n: int = 4, seed: int = 1) -> list[Tensor]:
    """``n`` batches of (batch, context + 1) random ids on the device (drawn on the CPU, the same
    everywhere): inputs and their next tokens."""
    g = torch.Generator().manual_seed(seed)
    vocab = int(setup.hf_config["vocab_size"])
    shape = (setup.batch, setup.context + 1)
    return [torch.randint(0, vocab, shape, generator=g).to(setup.device) for _ in range(n)]


@dataclass
class Trainee:
    """A model, its AdamW and the shared batches; times each training step."""

    name: str
    model: nn.Module
    batches: list[Tensor]
    bf16: bool
    seconds: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.model.train()
        self.forward = logits_of(self.model)
        self.optimizer = make_optimizer(self.model, TRAIN)
        self.device = self.batches[0].device
        self.steps = 0

    def step(self) -> float:
        """One training step on the next batch; its loss."""
        chunk = self.batches[self.steps % len(self.batches)]
        self.steps += 1
        with autocast(self.bf16, self.device.type):
            logits = self.forward(chunk[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), chunk[:, 1:].flatten())
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    def run(self, steps: int = 1, timed: bool = True) -> None:
        for _ in range(steps):
            start = synced_clock(self.device)
            loss = self.step()
            elapsed = synced_clock(self.device) - start
            if not loss < 100:  # ln(vocab) ≈ 4 at the start; catches NaN too
                raise RuntimeError(f"{self.name}: loss {loss} at step {self.steps}")
            if timed:
                self.seconds.append(elapsed)


def flops_per_token(model: GPT) -> float:
    """6·N + 12·L·d·T, with N the parameters less the position embedding (see FLOPS_FORMULA)."""
    cfg = model.config
    n = sum(p.numel() for p in model.parameters()) - cfg.max_len * cfg.d_model
    return 6 * n + 12 * cfg.n_layers * cfg.d_model * cfg.max_len


def bench_training(setup: Setup, bf16: bool, steps: int, warmup: int) -> Row:
    """Training tokens/s of both models from the same weights on the same batches, step by step."""
    ours_model, hf_model = build_pair(setup)
    batches = random_batches(setup)
    ours = Trainee("ours", ours_model, batches, bf16)
    hf = Trainee("HF", hf_model, batches, bf16)
    interleave(lambda: ours.run(warmup, timed=False), lambda: hf.run(warmup, timed=False), 1)
    interleave(ours.run, hf.run, steps)
    tokens = setup.batch * setup.context
    precision = "bf16" if bf16 else "fp32"
    row = Row(
        f"train tokens/s, batch {setup.batch}×{setup.context}", precision,
        [tokens / s for s in ours.seconds], [tokens / s for s in hf.seconds],
        f">= {TRAIN_BF16_TARGET if bf16 else TRAIN_TARGET}",
    )  # fmt: skip
    ours_rate, hf_rate = row.cells()
    print(
        f"[train {precision}] ours {ours_rate} tok/s, HF {hf_rate} tok/s, ours/HF {row.ratio:.3f}", flush=True
    )
    return row


def memory_child(side: str, setup: Setup, bf16: bool, steps: int, threads: int) -> tuple[int, int]:
    """Train ``side``'s model ``steps`` steps; in KiB, the memory before the first step and the peak
    after the last: on the CPU (in a fresh process) the resident size, on a GPU the CUDA allocator's."""
    torch.set_num_threads(threads)
    if side == "ours":
        model: nn.Module = GPT(our_config(setup))
    else:
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**setup.hf_config))
    trainee = Trainee(side, model.to(setup.device), random_batches(setup, n=1), bf16)
    return memory_around(setup.device, lambda: trainee.run(steps, timed=False))


def bench_memory(setup: Setup, bf16: bool, steps: int, threads: int) -> Row:
    """Peak memory of training (growth over the built model): RSS, each side in its own spawned
    process; on a GPU, the allocator's peak in this process."""
    peaks: dict[str, tuple[int, int]] = {}
    for side in ("ours", "HF"):
        if setup.device.type == "cuda":
            gc.collect()  # the models of the earlier benchmarks: freed before the peak is reset
            peaks[side] = memory_child(side, setup, bf16, steps, threads)
            continue
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            peaks[side] = pool.submit(memory_child, side, setup, bf16, steps, threads).result()
    precision = "bf16" if bf16 else "fp32"
    kind = "CUDA memory allocated" if setup.device.type == "cuda" else "RSS"
    mib = {side: ((peak - before) / 1024, peak / 1024) for side, (before, peak) in peaks.items()}
    for side, (growth, peak) in mib.items():
        print(
            f"[memory {precision}] {side}: peak {kind} {peak:,.0f} MiB, +{growth:,.0f} MiB while training",
            flush=True,
        )
    label = f"training peak {kind} growth, MiB (lower is better)"
    return Row(label, precision, [mib["ours"][0]], [mib["HF"][0]])


def our_generate(model: GPT, prompt: Tensor, new_tokens: int) -> Tensor:
    """Exactly ``new_tokens`` greedy tokens (1, new_tokens) after ``prompt`` (1, t), KV-cached."""
    mask = torch.ones_like(prompt, dtype=torch.bool)
    return generate(lm_next_logits(model, mask, use_cache=True), prompt, new_tokens, NEVER_EOS, 0).tokens


def hf_generate(model: Any, prompt: Tensor, new_tokens: int) -> Tensor:
    """The same with ``GenerationMixin.generate`` (its config has no EOS: it runs to the limit)."""
    out = model.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens, do_sample=False,
        pad_token_id=0,
    )  # fmt: skip
    return out[:, prompt.shape[1] :]


def bench_generation(setup: Setup, reps: int, dtype: torch.dtype) -> tuple[Row, str]:
    """Greedy tokens/s with the KV cache, batch 1, both models' weights in ``dtype``, and whether
    both give the same tokens. Batch-1 decoding streams every weight once per token, so halving
    the bytes (bf16) is what moves it on a CPU; both sides get the same cast."""
    ours, hf = build_pair(setup)
    ours.eval().to(dtype)
    hf.eval().to(dtype)
    precision = "bf16" if dtype == torch.bfloat16 else "fp32"
    g = torch.Generator().manual_seed(2)
    vocab = int(setup.hf_config["vocab_size"])
    prompt = torch.randint(0, vocab, (1, setup.prompt), generator=g).to(setup.device)
    rates: dict[str, list[float]] = {"ours": [], "HF": []}
    outputs: dict[str, Tensor] = {}

    def run(name: str, timed: bool = True) -> None:
        fn = our_generate if name == "ours" else hf_generate
        start = synced_clock(setup.device)
        with torch.inference_mode():
            tokens = fn(ours if name == "ours" else hf, prompt, setup.new_tokens)
        elapsed = synced_clock(setup.device) - start
        if tokens.shape != (1, setup.new_tokens):
            raise RuntimeError(f"{name}: expected {setup.new_tokens} new tokens, got {tuple(tokens.shape)}")
        outputs[name] = tokens
        if timed:
            rates[name].append(setup.new_tokens / elapsed)

    interleave(lambda: run("ours", timed=False), lambda: run("HF", timed=False), 1)
    interleave(lambda: run("ours"), lambda: run("HF"), reps)
    differ = (outputs["ours"] != outputs["HF"]).nonzero()
    same = "yes" if len(differ) == 0 else f"no (first difference at new token {int(differ[0, 1])})"
    row = Row(
        f"greedy generate tokens/s, batch 1, {setup.prompt} + {setup.new_tokens} tokens, KV cache", precision,
        rates["ours"], rates["HF"], f">= {GENERATE_TARGET}",
    )  # fmt: skip
    ours_rate, hf_rate = row.cells()
    print(
        f"[generate {precision}] ours {ours_rate} tok/s, HF {hf_rate} tok/s, ours/HF {row.ratio:.3f}; "
        f"same tokens: {same}",
        flush=True,
    )
    return row, same


def mfu_row(train: Row, flops: float, peak: float) -> Row:
    """The model FLOPs utilisation (%) of each timed training step of ``train``."""
    return Row(
        f"MFU of training, % of the matmul peak ({peak / 1e9:,.0f} GFLOP/s)", train.precision,
        [100 * flops * rate / peak for rate in train.ours], [100 * flops * rate / peak for rate in train.hf],
        f"ours >= {MFU_TARGET:.0%}" if train.precision == "fp32" else "",
    )  # fmt: skip


def markdown_table(
    rows: list[Row], same: dict[str, str], threads: int, clock_name: str, peaks: dict[str, float],
    device: torch.device,
) -> str:  # fmt: skip
    """The rows as a markdown table, then the environment, the peaks and the FLOP count."""
    lines = [
        "| benchmark | precision | ours (median) | HF (median) | ours/HF | ours/HF IQR | target |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ours, hf = r.cells()
        ratio, spread = r.ratio_cells()
        lines.append(f"| {r.benchmark} | {r.precision} | {ours} | {hf} | {ratio} | {spread} | {r.target} |")
    for precision, answer in same.items():
        lines.append(f"| same greedy tokens as HF | {precision} | {answer} | | | | yes |")
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    peak_text = ", ".join(f"{k} {v / 1e9:,.0f} GFLOP/s" for k, v in peaks.items())
    cpu = f"{platform.machine()}, {os.cpu_count()} CPUs ({device_description(torch.device('cpu'))})"
    gpu = f"; device {device}: {device_description(device)}" if device.type == "cuda" else ""
    lines.append(
        f"\ntorch {torch.__version__}, transformers {transformers.__version__}, {threads} threads, "
        f"{clock_name} clock, {cpu}{gpu}, python {platform.python_version()}, {now}; "
        f"matmul peak: {peak_text}\n\n{FLOPS_FORMULA}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny model, 2 steps: a smoke run")
    parser.add_argument("--steps", type=int, help="timed training steps per model, precision (10; --quick 2)")
    parser.add_argument("--reps", type=int, help="timed generations per model (3; --quick 1)")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    add_clock_flag(parser)
    args = parser.parse_args(argv)
    device = bench_device(args.device, args.clock, "gpt_speed.py")
    use_clock(args.clock)
    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    shape, (batch, prompt, new_tokens) = (QUICK, (4, 8, 24)) if args.quick else (FULL, (16, 16, 240))
    setup = Setup({**shape, **NO_DROPOUT, **NO_SPECIAL_TOKENS}, batch, prompt, new_tokens, device)
    steps = args.steps or (2 if args.quick else 10)
    reps = args.reps or (1 if args.quick else 3)
    warmup, memory_steps, peak_reps = (1, 1, 3) if args.quick else (2, 3, 10)
    c = setup.hf_config
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {threads} threads; GPT-2 shape "
        f"{c['n_layer']} layers, {c['n_head']} heads, d {c['n_embd']}, context {c['n_positions']}, "
        f"vocab {c['vocab_size']}; training batch {setup.batch}×{setup.context}; device {device} "
        f"({device_description(device)})",
        flush=True,
    )
    load = os.getloadavg()[0]
    if load > 0.5 and args.clock == "wall" and device.type == "cpu":
        print(
            f"note: load average {load:.1f} before the run: other processes compete for the cores and "
            "OpenMP threads stall behind them; if the IQRs are wide, rerun with --threads 1 --clock cpu",
            flush=True,
        )
    start = time.perf_counter()
    on_gpu = device.type == "cuda"
    shapes, timed_flop = ([*MATMUL_SHAPES, GPU_PEAK_SHAPE], GPU_TIMED_FLOP) if on_gpu else (MATMUL_SHAPES, 0)
    peaks = {
        "fp32": matmul_peak(shapes, torch.float32, peak_reps, device, timed_flop),
        "bf16": matmul_peak(shapes, torch.bfloat16, peak_reps, device, timed_flop),
    }
    print(", ".join(f"[peak {k}] {v / 1e9:,.0f} GFLOP/s" for k, v in peaks.items()), flush=True)
    generation = {
        p: bench_generation(setup, reps, d) for p, d in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    flops = flops_per_token(GPT(our_config(setup)))
    rows: list[Row] = []
    for bf16 in (False, True):
        train = bench_training(setup, bf16, steps, warmup)
        rows += [train, mfu_row(train, flops, peaks[train.precision])]
        rows.append(bench_memory(setup, bf16, memory_steps, threads))
    rows += [row for row, _ in generation.values()]
    same = {precision: answer for precision, (_, answer) in generation.items()}
    print(f"\ntotal {time.perf_counter() - start:.0f} s\n")
    record_rows(rows)
    print(markdown_table(rows, same, threads, args.clock, peaks, device))


if __name__ == "__main__":
    main()
