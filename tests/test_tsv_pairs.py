"""Sentence pairs from one tab-separated file (Tatoeba exports): reading, the held-out split,
training on it and scoring its test split (bad command lines: test_bad_inputs.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.helpers import WORDS
from vaswani.cli import main
from vaswani.data.readers import read_tsv_pairs
from vaswani.data.splits import hold_out
from vaswani.errors import DataError


def tatoeba_like(n: int = 300, seed: int = 0) -> list[tuple[str, str]]:
    """Pairs where some sources have several translations, as in Tatoeba."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        src = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
        pairs.append((src, " ".join(reversed(src.split()))))
        if i % 7 == 0:
            pairs.append((src, f"{src} x"))
    return pairs


def test_hold_out_is_exact_deterministic_and_keeps_a_source_in_one_split():
    pairs = tatoeba_like()
    train, valid, test = hold_out(pairs, n_valid=20, n_test=30, seed=3)
    assert (len(valid), len(test)) == (20, 30)
    assert sorted(train + valid + test) == sorted(pairs)
    sources = [{s for s, _ in split} for split in (train, valid, test)]
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])
    assert hold_out(list(pairs), 20, 30, seed=3) == (train, valid, test)
    assert hold_out(pairs, 20, 30, seed=4)[2] != test
    assert train == [p for p in pairs if p in set(train)]  # corpus order kept


def test_hold_out_refuses_a_corpus_too_small():
    with pytest.raises(ValueError, match="too few"):
        hold_out(tatoeba_like(10), n_valid=10, n_test=10)


def test_tsv_reader_takes_the_chosen_columns_and_names_bad_lines(tmp_path):
    path = tmp_path / "cmn.txt"
    path.write_text("Hi.\t嗨。\tCC-BY\nRun!\t跑！\tCC-BY\n", encoding="utf-8")
    assert read_tsv_pairs(path) == [("Hi.", "嗨。"), ("Run!", "跑！")]
    assert read_tsv_pairs(path, (1, 0)) == [("嗨。", "Hi."), ("跑！", "Run!")]
    path.write_text("Hi.\t嗨。\nRun!\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"cmn.txt:2: 1 tab-separated field"):
        read_tsv_pairs(path)
    path.write_text("Hi.\t \n", encoding="utf-8")
    with pytest.raises(DataError, match=r"cmn.txt:1: column 1 is empty"):
        read_tsv_pairs(path)


@pytest.fixture(scope="module")
def tsv_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tsv")
    (folder / "pairs.tsv").write_text("".join(f"{s}\t{t}\tnote\n" for s, t in tatoeba_like()))
    (folder / "split.yaml").write_text("data:\n  n_valid: 15\n  n_test: 25\n  seed: 1\n")
    args = [
        "train", "translation", "--pairs", str(folder / "pairs.tsv"), "--config", str(folder / "split.yaml"),
        "--out", str(folder / "run"), "--preset", "tiny", "--vocab-size", "60", "--batch-tokens", "400",
        "--max-steps", "6", "--eval-every", "1000", "--warmup", "2", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    return folder / "run"


def test_training_on_pairs_scores_the_held_out_test_split(tsv_run, capsys):
    assert main(["evaluate", str(tsv_run), "--beam", "2"]) == 0
    printed = capsys.readouterr().out
    assert "test: BLEU" in printed and "lowercased" in printed and "case:lc" in printed
    hypotheses = (tsv_run / "hypotheses.test").read_text().splitlines()
    _, _, test = hold_out(tatoeba_like(), n_valid=15, n_test=25, seed=1)
    assert len(hypotheses) == len(test) == 25
