"""``vaswani.io``: atomic writes leave the old file or the new one, never a mix, and fail in one
line; weights round-trip through safetensors with their ties restored."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from torch import nn

from vaswani import io
from vaswani.errors import VaswaniError


def test_atomic_write_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "a.txt"
    io.atomic_write_text(path, "old")
    io.atomic_write_text(path, "néw")
    assert path.read_bytes() == "néw".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_failed_atomic_write_keeps_the_old_content_and_says_why_in_one_line(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    io.atomic_write_text(path, "old")

    def full(target: Path, data: bytes, flags: int = 0) -> None:
        target.write_bytes(data[:1])  # a partial write, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(io, "write_file", full)
    with pytest.raises(VaswaniError) as info:
        io.atomic_write_text(path, "new")
    assert str(info.value) == f"{path}: cannot write: no space left on device"
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_tied_weights_are_stored_once_and_tied_again_on_loading(tmp_path):
    def tied() -> nn.Module:
        model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
        model[1].weight = model[0].weight
        return model

    torch.manual_seed(0)
    saved, loaded = tied(), tied()
    io.atomic_save_model(saved, tmp_path / io.WEIGHTS)
    io.load_weights(loaded, tmp_path / io.WEIGHTS)
    assert loaded[1].weight is loaded[0].weight
    assert torch.equal(loaded[0].weight, saved[0].weight)


def test_first_line():
    assert io.first_line(ValueError("one\ntwo")) == "one"
    assert io.first_line(KeyError()) == "KeyError"
