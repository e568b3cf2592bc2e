"""Language modelling around the GPT: its data (documents, the held-out tail, next-token
windows, the streamed loss) and the commands ``train lm``, ``generate`` and
``evaluate --text`` (their bad input is in test_bad_inputs.py)."""

from __future__ import annotations

import io
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import log_rows, tiny_lm_args, tiny_lm_run, write_lm_text
from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.data.text import read_documents, split_documents
from vaswani.errors import DataError
from vaswani.generation.config import DecodingConfig
from vaswani.models.gpt import GPT
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.lm_text import next_token_loss, stream_loss, windows
from vaswani.tasks.lm import LMTask
from vaswani.tokenizer import LMTokenizer

# ---------------------------------------------------------------------------------------------
# Documents and the held-out split


def test_read_documents_of_a_folder_is_sorted_and_skips_hidden_files(tmp_path):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / "b.txt").write_text("bee\n")
    (folder / "a.txt").write_text("ay\r\nsecond line\n\n")
    (folder / "sub" / "c.txt").write_text("sea")
    (folder / ".hidden.txt").write_text("hidden")
    (folder / "sub" / ".swap").write_text("hidden")
    (folder / ".git" / "HEAD").write_text("hidden")
    extra = tmp_path / "extra.txt"
    extra.write_text("extra\n")
    assert read_documents([str(folder), str(extra)]) == ["ay\nsecond line\n", "bee", "sea", "extra"]


def _bad_inputs(tmp_path: Path) -> list[tuple[list[str], list[str]]]:
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"fine\nalso fine\nGr\xfc\xdfe\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    hidden_only = tmp_path / "hidden_only"
    hidden_only.mkdir()
    (hidden_only / ".x").write_text("x")
    return [
        ([str(tmp_path / "nope.txt")], ["nope.txt", "no such file"]),
        ([str(latin1)], ["latin1.txt:3", "UTF-8"]),
        ([str(empty)], ["empty.txt", "empty"]),
        ([str(hidden_only)], ["hidden_only", "no files"]),
    ]


def test_read_documents_errors_name_the_file(tmp_path):
    for paths, words in _bad_inputs(tmp_path):
        with pytest.raises(DataError) as caught:
            read_documents(paths)
        for word in words:
            assert word in str(caught.value), (word, str(caught.value))


def test_split_documents_holds_out_the_tail():
    docs = ["a" * 50, "b" * 30, "c" * 20]
    train, valid = split_documents(docs, 0.1)
    assert train == ["a" * 50, "b" * 30, "c" * 10] and valid == ["c" * 10]
    train, valid = split_documents(docs, 0.5)  # the cut falls on a document boundary
    assert train == ["a" * 50] and valid == ["b" * 30, "c" * 20]
    train, valid = split_documents(docs, 0.25)
    assert "".join(train) + "".join(valid) == "".join(docs)
    assert "".join(valid) == "b" * 5 + "c" * 20


@pytest.mark.parametrize(("docs", "fraction"), [(["a"], 0.1), (["ab"], 0.6), (["", ""], 0.1), ([], 0.1)])
def test_split_documents_refuses_too_little_text(docs, fraction):
    with pytest.raises(DataError, match="not enough text"):
        split_documents(docs, fraction)


# ---------------------------------------------------------------------------------------------
# Next-token windows and losses


class _PlusOne(nn.Module):
    """Predicts token x + 1 after token x, with certainty: zero loss exactly when the targets are
    the inputs shifted by one. Given ``targets``, it returns the summed loss, as the GPT does."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.calls: list[tuple[int, ...]] = []

    def forward(
        self, tokens: torch.Tensor, targets: torch.Tensor | None = None, n_classes: int | None = None
    ):
        self.calls.append(tuple(tokens.shape))
        logits = F.one_hot((tokens + 1) % self.vocab, self.vocab).double() * 100.0
        if targets is None:
            return logits
        return F.cross_entropy(logits[..., :n_classes].flatten(0, 1), targets.flatten(), reduction="sum")


def test_windows_and_next_token_loss_shift_by_one():
    ids = torch.arange(20)
    w = windows(ids, torch.tensor([0, 3, 15]), 5)
    assert w.tolist() == [[0, 1, 2, 3, 4], [3, 4, 5, 6, 7], [15, 16, 17, 18, 19]]
    model = _PlusOne(20)
    loss, count = next_token_loss(model, w)
    assert count == 3 * 4 and model.calls == [(3, 4)]
    assert float(loss) < 1e-6
    wrong, _ = next_token_loss(model, w.flip(1))  # targets not the next ids: a large loss
    assert float(wrong) > 100


def _run_config(max_len=8, batch_tokens=32, seed=0) -> RunConfig:
    model = ModelConfig(
        arch="decoder_only", tgt_vocab_size=64, d_model=16, n_heads=2, d_ff=32, n_decoder_layers=1,
        dropout=0.0, max_len=max_len, position="learned", norm="pre_ln", tie_embeddings="output",
    )  # fmt: skip
    train = TrainConfig(batch_tokens=batch_tokens, seed=seed, eval_sentences=10)
    return RunConfig("lm", model, train, TextData(source="default"))


def test_next_token_loss_leaves_the_padded_vocabulary_out_of_the_softmax():
    torch.manual_seed(0)
    model = GPT(_run_config().model)  # ids >= 40 of its 64 pad the embedding: never targets
    chunk = torch.randint(0, 40, (2, 6))
    loss, count = next_token_loss(model, chunk, vocab_size=40)
    logits = model(chunk[:, :-1])
    expected = F.cross_entropy(logits[..., :40].flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum")
    assert count == 10
    torch.testing.assert_close(loss, expected)
    full, _ = next_token_loss(model, chunk)
    assert float(full) > float(loss)  # the padded rows would have taken probability


def test_lm_task_batches_are_every_window_of_max_len_plus_one_once():
    ids = torch.arange(60) % 64
    task = LMTask(_run_config(max_len=8, batch_tokens=32), ids, ids[:20], 64)
    assert task.batch_size == 4
    assert sorted(task.starts.tolist()) == list(range(60 - 8))  # every offset is a window
    model = _PlusOne(64)
    for batch in task.train_batches():
        loss, count = task.loss(model, batch)
        assert float(loss) < 1e-6 and count == 4 * 8
    assert set(model.calls) == {(4, 8)}
    other = LMTask(_run_config(seed=1), ids, ids[:20], 64)
    assert not torch.equal(other.starts, task.starts)  # shuffled by the seed


def test_lm_task_refuses_text_shorter_than_the_context():
    with pytest.raises(DataError, match="fewer than the context"):
        LMTask(_run_config(max_len=8), torch.arange(8), torch.arange(8), 64)


@torch.no_grad()
def _hand_stream_loss(model: GPT, ids: torch.Tensor) -> float:
    """Each token after the first predicted once, from the tokens before it in its window of
    max_len (the windows start at 0, max_len, 2·max_len, …)."""
    context = model.config.max_len
    losses = []
    for t in range(1, len(ids)):
        start = (t - 1) // context * context
        logits = model(ids[start:t][None])[0, -1].double()
        losses.append(float(F.cross_entropy(logits[None], ids[t][None])))
    return sum(losses) / len(losses)


@pytest.mark.parametrize("length", [2, 9, 17, 23])
def test_stream_loss_predicts_every_token_once(length):
    torch.manual_seed(0)
    model = GPT(_run_config(max_len=8).model).double().eval()
    ids = torch.randint(0, 64, (length,), generator=torch.Generator().manual_seed(length))
    expected = _hand_stream_loss(model, ids)
    assert stream_loss(model, ids, batch_size=2) == pytest.approx(expected, rel=1e-6)  # float32 loss
    assert stream_loss(model, ids, batch_size=16) == pytest.approx(expected, rel=1e-6)


@torch.no_grad()
def test_stream_loss_with_max_windows_uses_that_many_windows():
    model = GPT(_run_config(max_len=4).model).double().eval()
    ids = torch.randint(0, 64, (41,), generator=torch.Generator().manual_seed(0))  # 10 windows
    spread = stream_loss(model, ids, max_windows=2)  # the first and the last window
    first = [float(F.cross_entropy(model(ids[None, :4])[0].double(), ids[1:5], reduction="sum"))]
    last = [float(F.cross_entropy(model(ids[None, 36:40])[0].double(), ids[37:41], reduction="sum"))]
    assert spread == pytest.approx((first[0] + last[0]) / 8, rel=1e-6)
    with pytest.raises(DataError, match="fewer than two tokens"):
        stream_loss(model, ids[:1])


# ---------------------------------------------------------------------------------------------
# The command line


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return tiny_lm_run(tmp_path_factory.mktemp("lm"))


def test_train_lm_writes_a_complete_run_directory(run):
    names = {p.name for p in run.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "metrics.json", "train_log.csv"} <= names
    assert (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir())
    metrics = json.loads((run / "metrics.json").read_text())
    for key in ("valid_loss", "perplexity", "train_seconds", "steps", "tokens_per_second"):
        assert key in metrics, key
    assert metrics["steps"] == 100
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["valid_loss"]))
    assert metrics["valid_loss"] < math.log(20)  # learned something: below a uniform guess
    config = json.loads((run / "config.json").read_text())
    assert config["task"] == "lm" and config["model"]["arch"] == "decoder_only"
    assert config["model"]["max_len"] == 32 and config["data"]["tokenizer"] == "char"
    assert LanguageModel.load(run).tokenizer.vocab_size <= config["model"]["vocab_size"]


def test_a_new_runs_config_holds_the_neutral_names_and_no_encoder_fields(run):
    model = json.loads((run / "config.json").read_text())["model"]
    assert model["n_layers"] == 1  # --layers 1
    assert model["vocab_size"] == LanguageModel.load(run).model.embed.token.num_embeddings
    for unused in ("src_vocab_size", "tgt_vocab_size", "n_encoder_layers", "n_decoder_layers"):
        assert model[unused] is None, unused


class _Recorder(io.StringIO):
    """Standard output that remembers each write (to see the tokens stream)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def _generate(monkeypatch, *args: str) -> tuple[int, _Recorder]:
    out = _Recorder()
    monkeypatch.setattr(sys, "stdout", out)
    return main(["generate", *args]), out


def test_generate_streams_what_the_api_returns(run, monkeypatch):
    prompt = "the cat"
    status, out = _generate(monkeypatch, str(run), prompt, "--max-new-tokens", "30", "--seed", "3")
    assert status == 0
    sampled = DecodingConfig(max_new_tokens=30, temperature=1.0, seed=3)
    expected = LanguageModel.load(run).generate([prompt], sampled)[0]
    assert out.getvalue() == prompt + expected + "\n"
    assert len(out.writes) >= 10  # streamed piece by piece, not printed at the end
    again = LanguageModel.load(run).generate([prompt], sampled, stream=print)
    assert again == [expected]


def test_generate_greedy_is_deterministic_and_seed_matters_when_sampling(run, monkeypatch):
    greedy = [_generate(monkeypatch, str(run), "a", "--temperature", "0", "--seed", str(s))[1].getvalue()
              for s in (1, 2)]  # fmt: skip
    assert greedy[0] == greedy[1]
    sampled = [_generate(monkeypatch, str(run), "a", "--seed", str(s))[1].getvalue() for s in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]


def test_stop_cuts_the_text_before_the_stop_string(run, monkeypatch):
    prompt = "the dog"
    args = [str(run), prompt, "--max-new-tokens", "40", "--seed", "0", "--top-k", "5"]
    full = _generate(monkeypatch, *args)[1].getvalue()[len(prompt) : -1]
    stop = full[6:8]  # a string the completion does contain
    assert stop in full
    status, out = _generate(monkeypatch, *args, "--stop", stop)
    assert status == 0
    assert out.getvalue() == prompt + full[: full.index(stop)] + "\n"
    assert stop not in "".join(out.writes)[len(prompt) :]  # never streamed, even in part-flushes
    # Two stop strings: the earlier one cuts.
    other = full[20:23]
    status, out = _generate(monkeypatch, *args, "--stop", other, "--stop", stop)
    assert out.getvalue() == prompt + full[: min(full.index(stop), full.index(other))] + "\n"
    # A stop string never found: generation runs to --max-new-tokens.
    status, out = _generate(monkeypatch, *args, "--stop", "QQ")
    assert status == 0 and out.getvalue() == prompt + full + "\n"


def test_stop_with_the_api_in_a_batch(run):
    lm = LanguageModel.load(run)
    prompts = ["the dog", "a"]
    full = lm.generate(prompts, DecodingConfig(max_new_tokens=30, temperature=0))
    stop = full[0][3:5]
    stopped = lm.generate(prompts, DecodingConfig(max_new_tokens=30, temperature=0, stop=(stop,)))
    assert stopped == [text[: text.index(stop)] if stop in text else text for text in full]


def _scripted(monkeypatch, tok: LMTokenizer, script: list[int]) -> LanguageModel:
    """A language model that produces ``script`` (token ids), then ``<|endoftext|>``."""
    import vaswani.pipelines.lm as lm_module

    def scripted_next_logits(model, mask, use_cache=True, vocab_size=None):
        def next_logits(tokens):
            step = tokens.shape[1] - mask.shape[1]
            token = script[step] if step < len(script) else tok.eos_id
            return F.one_hot(torch.full((tokens.shape[0],), token), tok.vocab_size).float() * 10

        return next_logits

    monkeypatch.setattr(lm_module, "lm_next_logits", scripted_next_logits)
    cfg = _run_config(max_len=32).model
    return LanguageModel(GPT(cfg), tok)


def test_streaming_never_shows_half_a_character_or_half_a_stop_string(monkeypatch):
    """Byte-level BPE emits 汤 and 😀 a byte at a time: the stream holds back the incomplete
    character (decoded as U+FFFD) and a possible beginning of a stop string, and its pieces add
    up to the returned text."""
    tok = LMTokenizer.train(["the cat sat on the mat " * 20], "bpe", vocab_size=300)
    text = "a汤b😀! ok, STOP here"
    script = tok.encode(text)
    assert len(script) > len(text)  # some characters take several tokens
    lm = _scripted(monkeypatch, tok, script)
    pieces: list[str] = []
    out = lm.generate(["x"], DecodingConfig(max_new_tokens=50), stream=pieces.append)
    assert out == [text] and "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)
    assert len(pieces) > 5
    pieces.clear()
    out = lm.generate(["x"], DecodingConfig(max_new_tokens=50, stop=("STOP", "ok?")), stream=pieces.append)
    assert out == ["a汤b😀! ok, "] and "".join(pieces) == out[0]
    assert not any("S" in piece or "\ufffd" in piece for piece in pieces)


def test_num_samples_prints_that_many_completions(run, monkeypatch):
    status, out = _generate(monkeypatch, str(run), "the", "--num-samples", "3", "--max-new-tokens", "15",
                            "--seed", "0")  # fmt: skip
    assert status == 0
    samples = out.getvalue().rstrip("\n").split("\n" + "-" * 40 + "\n")
    assert len(samples) == 3
    assert all(s.startswith("the") for s in samples)
    assert len(set(samples)) > 1  # each drawn on its own


def test_prompt_file_is_the_prompt(run, monkeypatch, tmp_path):
    prompt = "the cat sat\non the"
    (tmp_path / "prompt.txt").write_text(prompt + "\n")
    status, out = _generate(monkeypatch, str(run), "--prompt-file", str(tmp_path / "prompt.txt"),
                            "--temperature", "0", "--max-new-tokens", "12")  # fmt: skip
    assert status == 0
    expected = LanguageModel.load(run).generate([prompt], DecodingConfig(max_new_tokens=12, temperature=0))[0]
    assert out.getvalue() == prompt + expected + "\n"


def test_evaluate_reports_the_loss_and_perplexity_of_the_text(run, capsys, tmp_path):
    text = write_lm_text(tmp_path / "held_out.txt", lines=40, seed=7)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--text", str(text)]) == 0
    printed = capsys.readouterr().out
    found = re.search(r"loss ([0-9.]+)\s+perplexity ([0-9.]+)", printed)
    assert found, printed
    loss, perplexity = float(found[1]), float(found[2])
    expected = LanguageModel.load(run).loss(text.read_text().rstrip("\n"))
    assert loss == pytest.approx(expected, abs=1e-4)
    assert perplexity == pytest.approx(math.exp(expected), abs=0.01)
    assert loss < math.log(20)


def test_resume_continues_a_stopped_run(tmp_path, capsys):
    text = write_lm_text(tmp_path / "train.txt")
    out = tmp_path / "run"
    first = tiny_lm_args(text, out, "--checkpoint-every", "5")
    first[first.index("--max-steps") + 1] = "10"
    assert main(first) == 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == 10
    first_log = (out / "train_log.csv").read_text().splitlines()
    assert main(["train", "lm", "--resume", str(out), "--max-steps", "20", "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 20
    config = json.loads((out / "config.json").read_text())
    assert config["train"]["max_steps"] == 20
    # Continued, not restarted: the log of the first 10 steps is kept and the next rows are step 20's.
    log = (out / "train_log.csv").read_text().splitlines()
    assert log[: len(first_log)] == first_log
    assert [(row["step"], row["kind"]) for row in log_rows(out)] == [
        ("10", "train"),
        ("10", "eval"),
        ("20", "train"),
        ("20", "eval"),
    ]
    assert "step_00000020" in {p.name for p in (out / "checkpoints").iterdir()}


def test_loss_of_a_model_fresh_from_training_has_no_dropout(tmp_path):
    """``train_lm`` returns the model in training mode; its ``loss`` must not apply dropout."""
    from vaswani.tasks.lm import train_lm

    text = write_lm_text(tmp_path / "train.txt", lines=100)
    run = _run_config(max_len=16, batch_tokens=64)
    run = RunConfig(
        "lm", run.model.replace(dropout=0.5), run.train.replace(max_steps=3, warmup_steps=1, eval_every=100),
        TextData(source="text", text=(str(text),), tokenizer="char"),
    )  # fmt: skip
    _, lm, _ = train_lm(run, tmp_path / "run", quiet=True)
    sample = "the cat sat on the mat and the dog ran"
    first = lm.loss(sample)
    assert lm.loss(sample) == first
    assert LanguageModel.load(tmp_path / "run").loss(sample) == pytest.approx(first, abs=1e-6)


def test_train_lm_never_overwrites_an_existing_run(run, capsys):
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    text = run.parent / "train.txt"
    assert main(tiny_lm_args(text, run)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already exists" in err and str(run) in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_generate_help_states_the_context_policy(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "context" in text and "oldest half" in text
