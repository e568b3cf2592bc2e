"""BLEU and speed of Mask-Predict (a nat run) against autoregressive decoding (a translation run), on
the test split both runs were trained with (their valid split without one).

    python benchmarks/mask_predict.py --nat runs/nat --ar runs/zh
    python benchmarks/mask_predict.py --quick     # a smoke run on tiny runs it trains

prints a markdown table: test BLEU (cased, lowercased) and chrF of the translation run greedy and with
beam 5, and of the nat run at T ∈ {1, 4, 10} × l ∈ {1, 3, 5}; and sentences/s at batch 1 over the
first --timed test sentences (one sentence per call, after one warm-up call) and at batch 64 over the
whole split, for every row. ``benchmarks/translation_results.py`` makes these rows for every model of
its table.

    python benchmarks/mask_predict.py --ceiling --threads 1 [--dtype bf16]

needs no run: how much faster batch 64 can be than batch 1 on this CPU. A CMLM of
``configs/multi30k.yaml``'s shape (3 + 3 layers, d_model 256, an 8,000-token vocabulary) with random
weights, its length classifier set to the same five lengths around 14 for every source, decodes
sources of 6 to 24 tokens at T = 10, l = 5; torch's FLOP counter gives the FLOPs a sentence (matrix
products and attention), the best of a few matrix products of the decoder's shapes the machine's
peak, and the ceiling of batch 64 over batch 1 is that peak over batch 1's FLOP/s: batch 1 already
decodes its five candidates together, rows enough to keep the products near the peak.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import quick
import torch
from timing import cpu_description, matmul_peak
from torch.utils.flop_counter import FlopCounterMode
from translation_results import decodings, scores, test_pairs, timed

from vaswani.config import ModelConfig
from vaswani.generation.mask_predict import MaskPredictConfig, mask_predict
from vaswani.layers import kernels
from vaswani.layers.quantize import prepare_weights
from vaswani.models.cmlm import CMLM

# configs/multi30k.yaml's model, and a tiny one for --quick
M30K_SHAPE = {"d_model": 256, "n_heads": 8, "d_ff": 1024, "n_layers": 3, "max_len": 256}
QUICK_SHAPE = {"d_model": 32, "n_heads": 2, "d_ff": 64, "n_layers": 1, "max_len": 64}
MASK_ID = 3
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def ceiling(quick_run: bool, dtype: str) -> None:
    """``--ceiling``: sentences/s at batch 1 and 64, FLOPs a sentence, the matrix products' peak (in
    the weights' ``dtype``, fp32 or bf16), and the most batch 64 could gain over batch 1 (see the
    module's docstring)."""
    shape, vocab, n = (QUICK_SHAPE, 64, 8) if quick_run else (M30K_SHAPE, 8000, 320)
    torch.manual_seed(0)
    cfg = ModelConfig(arch="encoder_decoder", dropout=0.0, src_vocab_size=vocab, tgt_vocab_size=vocab,
                      tie_embeddings="all", fused_qkv=True, **shape)  # fmt: skip
    model = CMLM(cfg).eval()
    with torch.no_grad():  # every source's five most likely lengths: 12 … 16
        model.length.weight.zero_()
        model.length.bias.copy_(-(((torch.arange(cfg.max_len) - 14.0) / 3) ** 2))
    prepare_weights(model, dtype=dtype)
    lengths = torch.randint(6, 25, (n,), generator=torch.Generator().manual_seed(1)).tolist()
    rows = [torch.randint(4, vocab, (length,)) for length in lengths]
    config = MaskPredictConfig(10, 5)

    def decode(batch: int, count: int) -> float:
        """Sentences/s over the first ``count`` sources in calls of ``batch``."""
        start = time.perf_counter()
        for i in range(0, count, batch):
            part = rows[i : i + batch]
            src = torch.zeros(len(part), max(map(len, part)), dtype=torch.long)
            for j, row in enumerate(part):
                src[j, : len(row)] = row
            mask_predict(model, src, MASK_ID, config)
        return count / (time.perf_counter() - start)

    onednn, kernels.ONEDNN_LINEAR = kernels.ONEDNN_LINEAR, None  # the counter sees F.linear's products
    with FlopCounterMode(display=False) as counter:
        decode(64, min(n, 64))
    kernels.ONEDNN_LINEAR = onednn
    flop = counter.get_total_flops() / min(n, 64)
    d, f = cfg.d_model, cfg.d_ff
    products = [(4096, d, f), (4096, f, d), (2048, d, vocab)]
    peak = matmul_peak(products, DTYPES[dtype], 3, torch.device("cpu"))
    decode(64, min(n, 64))  # warm-up
    batch1, batch64 = decode(1, n // 4), decode(64, n)
    print(
        f"Mask-Predict T = 10, l = 5, {'tiny' if quick_run else 'configs/multi30k.yaml'} shape, random "
        f"weights, {dtype}: {flop / 1e9:.2f} GFLOP a sentence; matrix products' peak "
        f"{peak / 1e9:.0f} GFLOP/s\n"
    )
    print("| batch | sentences/s | GFLOP/s | of the peak |\n| ---: | ---: | ---: | ---: |")
    for batch, rate in ((1, batch1), (64, batch64)):
        print(f"| {batch} | {rate:.2f} | {rate * flop / 1e9:.0f} | {rate * flop / peak:.0%} |")
    print(
        f"\nbatch 64 / batch 1: {batch64 / batch1:.2f}×; the most it could be, batch 64 at the peak: "
        f"{peak / (batch1 * flop):.2f}×"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nat", type=Path, help="a nat run (vaswani train nat)")
    parser.add_argument("--ar", type=Path, help="a translation run on the same data")
    parser.add_argument("--timed", type=int, default=100, help="test sentences timed at batch 1")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny runs trained for it")
    parser.add_argument(
        "--ceiling", action="store_true", help="no run: batch 64 against batch 1 and the peak, random weights"
    )
    parser.add_argument("--dtype", choices=DTYPES, default="fp32", help="--ceiling's weights (fp32)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.ceiling or args.quick:
        print(f"torch {torch.__version__}, {cpu_description()}, {torch.get_num_threads()} threads, load "
              f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}\n")  # fmt: skip
        ceiling(args.quick, args.dtype)
        if args.ceiling:
            return
    scratch = tempfile.TemporaryDirectory()
    if args.quick:
        args.ar, args.nat = (quick.train(task, Path(scratch.name)) for task in ("translation", "nat"))
        args.timed = 4
    elif args.nat is None or args.ar is None:
        parser.error("give --nat and --ar (or --quick, or --ceiling)")
    pairs = test_pairs(args.nat)
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    print(f"torch {torch.__version__}, {cpu_description()}, {torch.get_num_threads()} threads, load "
          f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}, {len(pairs)} test pairs, {args.timed} "
          "timed at batch 1\n")  # fmt: skip
    print(
        "| run | decoding | BLEU | BLEU (lowercased) | chrF | sentences/s, batch 1 | sentences/s, batch 64 |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for run in (args.ar, args.nat):
        for name, translate, tokenize in decodings(run):
            hyps, batch64 = timed(translate, sources, 64)
            batch1 = timed(translate, sources[: args.timed], 1)[1]
            cells = scores(hyps, refs, tokenize)[0]
            print(f"| {run.name} | {name} | {cells} | {batch1:.1f} | {batch64:.1f} |", flush=True)


if __name__ == "__main__":
    main()
