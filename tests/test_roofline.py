"""The bytes a decoding step reads, as ``benchmarks/roofline.py`` counts them for its roofline:
counted apart from the parameters' own listing, for a tied and an untied head, fp32, bf16 and int8;
and the bandwidth each timed run is held against: the better of the copies just before and after it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from vaswani.interop.gpt2 import config_from_hf
from vaswani.layers.quantize import prepare_weights
from vaswani.models.gpt import GPT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from roofline import timed_generation, weight_bytes

SHAPE = {"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 24, "vocab_size": 50}


def model(tied: bool) -> GPT:
    return GPT(config_from_hf({**SHAPE, "tie_word_embeddings": tied}))


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_step_reads_every_weight_once_and_one_row_of_a_table_no_head_uses(tied, dtype):
    gpt = prepare_weights(model(tied), dtype=dtype)
    size = 4 if dtype == "fp32" else 2
    d, vocab, positions = SHAPE["n_embd"], SHAPE["vocab_size"], SHAPE["n_positions"]
    everything = sum(p.numel() for p in gpt.parameters()) * size  # a tied table listed once
    unread = (positions - 1) * d * size + (0 if tied else (vocab - 1) * d * size)
    assert weight_bytes(gpt) == everything - unread


@pytest.mark.parametrize("tied", [True, False])
def test_int8_reads_a_byte_a_weight_and_a_scale_a_row(tied):
    fp32 = model(tied)
    linears = [m for m in fp32.modules() if isinstance(m, torch.nn.Linear)]
    matrices = sum(m.weight.numel() for m in linears)
    rows = sum(m.out_features for m in linears)
    before = weight_bytes(fp32)
    after = weight_bytes(prepare_weights(fp32, quantize="int8"))
    # every matrix from 4 bytes a weight to 1, plus a float32 scale a row; a tied table, no longer
    # the head's (the head reads its own int8 copy), is read one row a token
    table_row = 4 * SHAPE["n_embd"] if tied else 0
    assert after == before - 3 * matrices + 4 * rows + table_row


class ScriptedMeter:
    """A copy meter that reports the given bandwidths in turn."""

    def __init__(self, figures: list[float]) -> None:
        self.figures = iter(figures)

    def bandwidth(self) -> float:
        return next(self.figures)


def test_each_timed_run_is_held_against_the_better_copy_beside_it():
    gpt = model(tied=True).eval()
    prompt = torch.tensor([[1, 2, 3]])
    meter = ScriptedMeter([10.0, 30.0, 20.0, 5.0])  # before runs 1, 2, 3, and after run 3
    rates, bandwidths = timed_generation(gpt, prompt, 4, 3, None, meter)
    assert len(rates) == 3 and all(r > 0 for r in rates)
    assert bandwidths == [30.0, 30.0, 20.0]
