"""``vaswani.training.batches``: the processes' rows of a batch cover it exactly once, in order, and
a batch of any kind (tensor, dataclass, tuple, dict) is cut and moved field by field."""

from __future__ import annotations

import pytest
import torch

from vaswani.data.batching import Seq2SeqBatch
from vaswani.training.batches import batch_rows, rows_of_process, share, take_rows, to_device


@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("rows", [0, 1, 2, 5, 16, 17])
def test_the_shares_cover_every_row_once_in_order(rows, world):
    covered = [i for rank in range(world) for i in range(*share(rows, rank, world))]
    assert covered == list(range(rows))
    sizes = [len(range(*share(rows, rank, world))) for rank in range(world)]
    assert max(sizes) - min(sizes) <= 1


def test_a_dataclass_batch_is_cut_by_rows_and_keeps_its_other_fields():
    src, tgt = torch.arange(12).view(4, 3), torch.arange(20).view(4, 5)
    batch = Seq2SeqBatch(src, tgt, tgt + 1, pad_id=0)
    part = take_rows(batch, 1, 3)
    assert isinstance(part, Seq2SeqBatch) and part.pad_id == 0
    assert torch.equal(part.src, src[1:3]) and torch.equal(part.tgt_out, tgt[1:3] + 1)
    assert batch_rows(batch) == 4 and batch_rows({"ids": src, "n": 3}) == 4 and batch_rows(7) == -1
    nested = take_rows((src, {"t": tgt}), 0, 1)
    assert torch.equal(nested[0], src[:1]) and torch.equal(nested[1]["t"], tgt[:1])


def test_a_process_with_no_rows_runs_the_first_row_with_weight_zero():
    ids = torch.arange(6).view(2, 3)
    assert [rows_of_process(ids, r, 1, take_rows)[1] for r in range(1)] == [True]
    parts = [rows_of_process(ids, r, 3, take_rows) for r in range(3)]
    assert [real for _, real in parts] == [False, True, True]
    assert torch.equal(parts[0][0], ids[:1]) and torch.equal(parts[2][0], ids[1:])


def test_to_device_on_the_cpu_moves_nothing():
    batch = Seq2SeqBatch(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 2, dtype=torch.long),
                         torch.ones(2, 2, dtype=torch.long), pad_id=0)  # fmt: skip
    moved = to_device(batch, torch.device("cpu"))
    assert moved.src.data_ptr() == batch.src.data_ptr()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_device_on_cuda_moves_every_tensor():
    batch = (torch.ones(2, 3), {"mask": torch.ones(2, 3, dtype=torch.bool)}, 5)
    moved = to_device(batch, torch.device("cuda"))
    assert moved[0].is_cuda and moved[1]["mask"].is_cuda and moved[2] == 5
