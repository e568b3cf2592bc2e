"""A draft for speculative decoding distilled from its target (``vaswani train lm --distill-from``):
the training stream is the target's greedy continuations, the draft keeps the target's tokenizer, a
resumed draft needs no target, and speculative decoding with it gives the target's greedy output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch

from tests.helpers import tiny_lm_args, tiny_lm_run, write_lm_text
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.generation.config import DecodingConfig
from vaswani.models.gpt import GPT
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.lm_text import encode_documents
from vaswani.tasks.lm import DISTILLED_FILE, distilled_ids
from vaswani.tokenizer import LMTokenizer


def _hand_greedy(model: GPT, prompt: list[int], steps: int, eos: int, vocab: int) -> list[int]:
    """Greedy continuation without a cache or a batch: the whole sequence re-read each step."""
    tokens = list(prompt)
    for _ in range(steps):
        logits = model(torch.tensor([tokens]))[0, -1, :vocab]
        tokens.append(int(logits.argmax()))
        if tokens[-1] == eos:
            break
    return tokens[len(prompt) :]


@pytest.mark.parametrize(("length", "eos_bias"), [(12, 0.0), (12, 0.03)])
def test_distilled_ids_are_each_prompt_followed_by_the_targets_greedy_continuation(length, eos_bias):
    text = "the cat sat on the mat and the dog ran off to see it\n" * 6
    tokenizer = LMTokenizer.train([text], "char", 64)
    torch.manual_seed(0)
    config = ModelConfig(
        arch="decoder_only", vocab_size=64, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=16,
        dropout=0.0, output_bias=True,
    )  # fmt: skip
    model = GPT(config).eval()
    eos, vocab = tokenizer.eos_id, tokenizer.vocab_size
    with torch.no_grad():  # a bias that ends the continuations at EOS after various lengths
        model.output.bias.zero_()
        model.output.bias[eos] = eos_bias
    ids = encode_documents(tokenizer, [text])
    got = distilled_ids(LanguageModel(model, tokenizer), ids, length)
    prompt = length // 4
    expected: list[int] = []
    continuations = []
    with torch.no_grad():
        for start in range(0, len(ids) - prompt + 1, length):
            head = ids[start : start + prompt].tolist()
            continuations.append(_hand_greedy(model, head, length - prompt, eos, vocab))
            expected += head + continuations[-1]
    assert got.tolist() == expected
    ended = {len(c) for c in continuations if c[-1] == eos}
    full = [c for c in continuations if c[-1] != eos]
    if eos_bias:  # the cases cover rows of a batch ending at different steps, and none ending
        assert len(ended) > 1
    else:
        assert full and all(len(c) == length - prompt for c in full)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A tiny target, and a narrower draft distilled from it on the same text."""
    folder = tmp_path_factory.mktemp("draft")
    target = tiny_lm_run(folder)
    text = write_lm_text(folder / "draft.txt", seed=1)
    draft_args = tiny_lm_args(
        text, folder / "draft", "--distill-from", str(target), "--checkpoint-every", "5"
    )
    draft_args[draft_args.index("--d-model") + 1] = "16"
    del draft_args[draft_args.index("--tokenizer") : draft_args.index("--tokenizer") + 2]  # the target's
    draft_args[draft_args.index("--max-steps") + 1] = "10"
    assert main(draft_args) == 0
    return target, folder / "draft", text


def test_a_draft_keeps_its_targets_tokenizer_and_trains_on_its_continuations(runs):
    target, draft, text = runs
    assert (draft / "tokenizer.json").read_bytes() == (target / "tokenizer.json").read_bytes()
    config = json.loads((draft / "config.json").read_text())
    assert config["data"]["distill_from"] == str(target.resolve())
    assert config["model"]["d_model"] == 16
    assert (
        config["model"]["vocab_size"]
        == json.loads((target / "config.json").read_text())["model"]["vocab_size"]
    )
    teacher = LanguageModel.load(target, "cpu")
    ids = encode_documents(teacher.tokenizer, [text.read_text()])
    kept = safetensors.torch.load_file(draft / DISTILLED_FILE)
    # The training split is the text's head: its chunks are the whole text's first chunks.
    assert kept["train"].tolist() == distilled_ids(teacher, ids, 32)[: len(kept["train"])].tolist()


def test_speculative_decoding_with_the_draft_gives_the_targets_greedy_output(runs):
    target, draft, _ = runs
    lm, small = LanguageModel.load(target, "cpu"), LanguageModel.load(draft, "cpu")
    decoding = DecodingConfig(max_new_tokens=40)
    for prompt in ("the cat", "a dog ran"):
        assert lm.generate([prompt], decoding, draft=small.model) == lm.generate([prompt], decoding)
        assert lm.speculation is not None and lm.speculation.proposed > 0


def test_a_resumed_draft_needs_no_target(runs, tmp_path):
    target, draft, _ = runs
    copy = shutil.copytree(draft, tmp_path / "draft")
    moved = shutil.move(str(target), str(tmp_path / "gone"))
    try:
        assert main(["train", "lm", "--resume", str(copy), "--max-steps", "15", "--quiet"]) == 0
    finally:
        shutil.move(moved, str(target))
    assert json.loads((copy / "metrics.json").read_text())["steps"] == 15
    assert (copy / DISTILLED_FILE).read_bytes() == (draft / DISTILLED_FILE).read_bytes()
