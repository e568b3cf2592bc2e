"""Generation speed and KV-cache memory of a windowed GPT against the same GPT with full attention.

Both models have the same random weights (GPT-2 initialisation, seed 0): 4 layers, 4 heads, 256
dims, d_ff 1024, pre-LN, rotary positions, 256 tokens of vocabulary, context (``max_len``) 4,096,
dropout 0; one has ``attn_window`` 256 (each query sees itself and the 256 keys before it, decoding
with ``layers/cache.py`` ``RollingKVCache``), the other full causal attention (the growing
``KVCache``). Each generates greedily, batch 1, from a 16-token random prompt until its context holds
4,096 tokens, under ``torch.inference_mode``: the prompt in one call, then one token per call of
``GPT.forward`` with the cache (what ``generation.lm.lm_next_logits`` does for an unpadded prompt),
and the argmax. Timed per stretch of the context (16–512, 512–1024, 1024–2048, 2048–4096 tokens
held) and as a whole; the caches' memory is the bytes of their key and value buffers (``nbytes``,
summed over the layers) at the end of each stretch. The models alternate A B B A over ``--rounds``
rounds, and the tables give the median of each model's rates and of the per-round ratios.

    python benchmarks/window_generation.py --threads 1 --clock cpu --rounds 2   # steadiest; ~50 CPU s
    python benchmarks/window_generation.py            # 2 threads, wall clock: for a quiet machine
    python benchmarks/window_generation.py --quick    # 2 layers, 128 dims, window 64, context 512
    python benchmarks/window_generation.py --rounds 3 --device cuda
"""

from __future__ import annotations

import argparse
import datetime
import statistics
from dataclasses import dataclass, replace

import torch
from timing import (
    add_clock_flag,
    available_cores,
    bench_device,
    device_description,
    interleave,
    record,
    synced_clock,
    use_clock,
)

from vaswani.config import ModelConfig
from vaswani.models.gpt import GPT

FULL = ModelConfig(
    arch="decoder_only", vocab_size=256, d_model=256, n_heads=4, d_ff=1024, n_layers=4,
    dropout=0.0, norm="pre_ln", position="rope", max_len=4096, attn_window=256,
)  # fmt: skip
QUICK = replace(FULL, d_model=128, d_ff=512, n_layers=2, max_len=512, attn_window=64)
PROMPT = 16


@dataclass
class Run:
    """One generation: seconds per stretch of the context and the caches' bytes at each stretch's end."""

    seconds: list[float]
    cache_bytes: list[int]


def stretches(context: int) -> list[int]:
    """The context lengths at which a stretch ends: 512, 1024, … up to ``context`` (one if ≤ 512)."""
    ends = [512]
    while ends[-1] < context:
        ends.append(2 * ends[-1])
    return [min(end, context) for end in ends]


def generate(model: GPT, prompt: torch.Tensor, ends: list[int], device: torch.device) -> Run:
    """Greedy decoding of ``prompt`` (1, PROMPT) with the model's cache until ``ends[-1]`` tokens."""
    cache = model.new_cache()
    seconds, cache_bytes = [], []
    with torch.inference_mode():
        start = synced_clock(device)
        logits = model(prompt, cache=cache, last_only=True)
        length = prompt.shape[1]
        for end in ends:
            while length < end:
                token = logits[:, -1].argmax(dim=-1, keepdim=True)
                logits = model(token, cache=cache, last_only=True)
                length += 1
            now = synced_clock(device)
            seconds.append(now - start)
            cache_bytes.append(sum(layer.self_attn.nbytes for layer in cache))
            start = now
    return Run(seconds, cache_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small model, context 512 (smoke run)")
    parser.add_argument("--rounds", type=int, default=1, help="A B rounds, alternating order (default 1)")
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    add_clock_flag(parser)
    args = parser.parse_args()
    device = bench_device(args.device, args.clock, "window_generation.py")
    use_clock(args.clock)
    torch.set_num_threads(args.threads)
    cfg = QUICK if args.quick else FULL
    torch.manual_seed(0)
    windowed = GPT(cfg).to(device).eval()
    full = GPT(replace(cfg, attn_window=None)).to(device).eval()
    full.load_state_dict(windowed.state_dict())
    prompt = torch.randint(0, cfg.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)
    ends = stretches(cfg.max_len)
    generate(windowed, prompt[:, :8], [PROMPT], device)  # warm-up
    generate(full, prompt[:, :8], [PROMPT], device)
    runs: dict[str, list[Run]] = {"window": [], "full": []}
    interleave(
        lambda: runs["window"].append(generate(windowed, prompt, ends, device)),
        lambda: runs["full"].append(generate(full, prompt, ends, device)),
        args.rounds,
    )
    print(
        f"device: {device_description(device)}; torch {torch.__version__}; {args.threads} threads, "
        f"{args.clock} clock"
    )
    print(
        f"GPT: {cfg.n_layers} layers, {cfg.n_heads} heads, {cfg.d_model} dims, d_ff {cfg.d_ff}, "
        f"{cfg.position}, vocab {cfg.vocab_size}; window {cfg.attn_window} against full attention; "
        f"batch 1, greedy, prompt {PROMPT}, context up to {cfg.max_len}; {args.rounds} round(s); "
        f"{datetime.date.today()}"
    )
    print()
    print("| context (tokens held) | window tokens/s | full tokens/s | window/full | window cache MiB "
          "| full cache MiB | full/window |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    starts = [PROMPT, *ends[:-1]]
    spans = [(f"{a:,}–{b:,}", [i], b - a) for i, (a, b) in enumerate(zip(starts, ends, strict=True))]
    spans.append((f"all, {PROMPT:,}–{ends[-1]:,}", list(range(len(ends))), ends[-1] - PROMPT))
    for label, parts, tokens in spans:
        rates = {k: [tokens / sum(r.seconds[i] for i in parts) for r in rs] for k, rs in runs.items()}
        ratio = statistics.median(w / f for w, f in zip(rates["window"], rates["full"], strict=True))
        rate = {k: statistics.median(r) for k, r in rates.items()}
        mib = {k: rs[0].cache_bytes[parts[-1]] / 2**20 for k, rs in runs.items()}
        if len(parts) > 1:
            window = f"window {cfg.attn_window}"
            record(
                f"generated tokens/s, context {label}",
                "fp32",
                rates["window"],
                rates["full"],
                "full",
                "",
                window,
            )
            record(
                f"KV cache MiB at context {ends[-1]:,} (lower is better)",
                "fp32",
                [mib["window"]],
                [mib["full"]],
                "full",
                "",
                window,
            )
        print(
            f"| {label} | {rate['window']:,.1f} | {rate['full']:,.1f} | **{ratio:.2f}** "
            f"| {mib['window']:.2f} | {mib['full']:.2f} | **{mib['full'] / mib['window']:.1f}** |"
        )


if __name__ == "__main__":
    main()
