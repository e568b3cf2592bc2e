"""KV-cache memory and decoding speed of grouped-query and multi-query attention (``n_kv_heads``).

One GPT shape (llama-mini's: pre-RMSNorm, rotary positions, SwiGLU, no biases; 8 query heads of
24 dims, 192 wide, 4 layers, d_ff 512, vocabulary 256, context 2,048, dropout 0, random weights)
with 8 (multi-head), 4, 2 (llama-mini's) and 1 (multi-query) key/value heads. Each generates
greedily, batch 1, from a 16-token random prompt until its context holds 2,048 tokens, under
``torch.inference_mode`` (``window_generation.generate``: the prompt in one call, then one token
per ``GPT.forward`` with the cache). The cache's memory is the bytes of its key and value buffers
(``nbytes``, summed over the layers; the buffers grow by doubling, so a buffer holds up to twice the
tokens); the rate is tokens/s over the whole generation, the median over ``--rounds`` rounds in
which the models take turns. The bytes follow n_kv_heads exactly (2 · layers · kv_heads · d_head ·
capacity · 4 bytes); the rate shows what reading fewer keys saves at this size.

    python benchmarks/gqa_cache.py --threads 1 --clock cpu --rounds 2    # steadiest
    python benchmarks/gqa_cache.py --quick                               # seconds
"""

from __future__ import annotations

import argparse
import datetime
import statistics
from dataclasses import replace

import torch
from timing import add_clock_flag, available_cores, bench_device, device_description, use_clock
from window_generation import PROMPT, Run, generate, stretches

from vaswani.config import ModelConfig
from vaswani.models.gpt import GPT

BASE = ModelConfig.preset("llama-mini", vocab_size=256, max_len=2048, dropout=0.0)
QUICK = replace(BASE, n_layers=2, max_len=256)
KV_HEADS = (8, 4, 2, 1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 layers, context 256 (smoke run)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, the models taking turns (default 1)")
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    add_clock_flag(parser)
    args = parser.parse_args()
    device = bench_device(args.device, args.clock, "gqa_cache.py")
    use_clock(args.clock)
    torch.set_num_threads(args.threads)
    base = QUICK if args.quick else BASE
    models = {}
    for kv in KV_HEADS:
        torch.manual_seed(0)
        models[kv] = GPT(replace(base, n_kv_heads=kv)).to(device).eval()
    prompt = torch.randint(0, base.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)
    ends = stretches(base.max_len)
    for model in models.values():
        generate(model, prompt[:, :8], [PROMPT], device)  # warm-up
    runs: dict[int, list[Run]] = {kv: [] for kv in KV_HEADS}
    for round_ in range(args.rounds):
        order = KV_HEADS if round_ % 2 == 0 else KV_HEADS[::-1]
        for kv in order:
            runs[kv].append(generate(models[kv], prompt, [ends[-1]], device))
    print(
        f"device: {device_description(device)}; torch {torch.__version__}; {args.threads} threads, "
        f"{args.clock} clock"
    )
    d_head = base.d_model // base.n_heads
    print(
        f"GPT ({'llama-mini, shortened' if args.quick else 'llama-mini'}): {base.n_layers} layers, "
        f"{base.n_heads} query heads of {d_head}, {base.d_model} dims, d_ff {base.d_ff}, {base.position}, "
        f"{base.ffn} {base.activation}; batch 1, greedy, prompt {PROMPT}, context {ends[-1]:,}; "
        f"{args.rounds} round(s); {datetime.date.today()}"
    )
    print()
    print("| key/value heads | attention | cache MiB | cache / multi-head | tokens/s | speed / multi-head |")
    print("|---:|---|---:|---:|---:|---:|")
    tokens = ends[-1] - PROMPT
    rate = {kv: statistics.median(tokens / r.seconds[0] for r in rs) for kv, rs in runs.items()}
    mib = {kv: rs[0].cache_bytes[0] / 2**20 for kv, rs in runs.items()}
    names = {base.n_heads: "multi-head", 1: "multi-query"}
    for kv in KV_HEADS:
        print(
            f"| {kv} | {names.get(kv, 'grouped-query')} | {mib[kv]:.2f} | {mib[kv] / mib[KV_HEADS[0]]:.3f} "
            f"| {rate[kv]:,.1f} | {rate[kv] / rate[KV_HEADS[0]]:.2f} |"
        )


if __name__ == "__main__":
    main()
