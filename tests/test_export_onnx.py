"""``vaswani export-onnx`` checked against onnxruntime: trained runs' graphs give vaswani's logits
(within 1e-4) on batches of other shapes than the traced one, and greedy loops over the ONNX graphs
(recomputing the prefix, or with past keys and values) give vaswani's greedy ids (needs the
``onnx`` extra; skipped without it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import (
    encoder_run,
    one_line,
    tiny_args,
    tiny_classify_args,
    tiny_lm_run,
    tiny_mlm_run,
    write_reverse_task,
    write_sentiment,
)
from vaswani.cli import main
from vaswani.data.batching import pad
from vaswani.errors import RunDirError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.generation.seq2seq import translate_ids
from vaswani.interop.onnx_export import export_run
from vaswani.layers import kernels
from vaswani.pipelines.classify import TextClassifier
from vaswani.pipelines.encoder import SentenceEncoder
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.translation import Translator
from vaswani.tokenizer import WordPieceTokenizer

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def greedy_loop(step, prefix: np.ndarray, steps: int, eos: int, pad_id: int) -> list[list[int]]:
    """Greedy decoding with ``step(tokens) → logits`` (batch, len, vocab) recomputed over the whole
    prefix: each row's new tokens up to (without) its first ``eos``."""
    tokens, done = prefix, np.zeros(len(prefix), dtype=bool)
    for _ in range(steps):
        best = step(tokens)[:, -1].argmax(-1)
        best[done] = pad_id
        tokens = np.concatenate([tokens, best[:, None]], axis=1)
        done |= best == eos
        if done.all():
            break
    rows = tokens[:, prefix.shape[1] :].tolist()
    return [row[: row.index(eos)] if eos in row else row for row in rows]


def cached_loop(
    graph: ort.InferenceSession,
    prompts: np.ndarray,
    mask: np.ndarray,
    steps: int,
    eos: int,
    pad_id: int,
    **extra,
) -> tuple[list[list[int]], list[np.ndarray]]:
    """Greedy decoding with a ``_with_past`` graph from an empty past: the prompts (batch, len),
    whose ``mask`` is 0 on left padding, fed one token at a time, then each step's best token;
    ``extra`` inputs (the translator's encoder output and source) go with every step. Each row's
    new tokens up to (without) its first ``eos``, and the logits of every step."""
    layers, heads, d_head = (graph.get_inputs()[-1].shape[i] for i in (0, 3, 5))
    past = np.zeros((layers, 2, len(prompts), heads, 0, d_head), dtype=np.float32)
    seen = np.zeros((len(prompts), 0), dtype=np.int64)
    name = "decoder_input_ids" if extra else "input_ids"
    tokens, column, done, new, logged = prompts[:, :1], mask[:, :1], np.zeros(len(prompts), bool), [], []
    for t in range(prompts.shape[1] - 1 + steps):
        seen = np.concatenate([seen, column], axis=1)
        masks = {} if extra else {"attention_mask": seen}
        logits, past = graph.run(None, {name: tokens, **masks, "past_key_values": past, **extra})
        logged.append(logits[:, -1])
        if t + 1 < prompts.shape[1]:  # still reading the prompt
            tokens, column = prompts[:, t + 1 : t + 2], mask[:, t + 1 : t + 2]
            continue
        best = logits[:, -1].argmax(-1)
        best[done] = pad_id
        new.append(best)
        done |= best == eos
        if done.all():
            break
        tokens, column = best[:, None], np.ones((len(prompts), 1), dtype=np.int64)
    rows = np.stack(new, axis=1).tolist()
    return [row[: row.index(eos)] if eos in row else row for row in rows], logged


def before_eos(rows: torch.Tensor, eos: int) -> list[list[int]]:
    return [row[: row.index(eos)] if eos in row else row for row in rows.tolist()]


def test_language_model_logits_and_greedy_ids(tmp_path, capsys, monkeypatch):
    run = tiny_lm_run(tmp_path)
    # the kernel choice of CPUs where MKL skips AVX-512 (AMD): the export traces F.linear all the same
    monkeypatch.setattr(kernels, "MKL_SKIPS_AVX512", True)
    assert main(["export-onnx", str(run), str(tmp_path / "onnx")]) == 0
    assert "wrote model.onnx" in capsys.readouterr().out
    lm = LanguageModel.load(run, "cpu")
    graph = session(tmp_path / "onnx" / "model.onnx")
    ids = torch.randint(3, lm.tokenizer.vocab_size, (3, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = lm.model(ids).numpy()
    logits = graph.run(None, {"input_ids": ids.numpy()})[0]
    assert np.abs(logits - expected).max() < 1e-4
    prompts, mask = lm.encode_prompts(["the cat", "a red h"])
    assert bool(mask.all())  # prompts of one length: no padding
    eos, pad_id = lm.tokenizer.eos_id, lm.tokenizer.pad_id
    ours = generate(lm_next_logits(lm.model, mask), prompts, 20, eos, pad_id).tokens
    theirs = greedy_loop(lambda t: graph.run(None, {"input_ids": t})[0], prompts.numpy(), 20, eos, pad_id)
    assert theirs == before_eos(ours, eos) and any(len(row) > 5 for row in theirs)
    step = session(tmp_path / "onnx" / "model_with_past.onnx")
    assert cached_loop(step, prompts.numpy(), mask.long().numpy(), 20, eos, pad_id)[0] == theirs
    prompts, mask = lm.encode_prompts(["the cat sat", "a dog"])  # left-padded
    assert not bool(mask.all())
    ours = generate(lm_next_logits(lm.model, mask), prompts, 20, eos, pad_id).tokens
    assert cached_loop(step, prompts.numpy(), mask.long().numpy(), 20, eos, pad_id)[0] == before_eos(
        ours, eos
    )


def test_translation_encoder_and_decoder_give_logits_and_greedy_ids(tmp_path, monkeypatch):
    src, tgt = write_reverse_task(tmp_path)
    assert main(tiny_args(src, tgt, tmp_path / "run", "--max-steps", "150")) == 0
    monkeypatch.setattr(kernels, "MKL_SKIPS_AVX512", True)  # as on an AMD CPU
    files = ["encoder.onnx", "decoder.onnx", "decoder_with_past.onnx"]
    assert export_run(tmp_path / "run", tmp_path / "onnx") == files
    meta = json.loads((tmp_path / "onnx" / "onnx.json").read_text(encoding="utf-8"))
    translator = Translator.load(tmp_path / "run", "cpu")
    tok = translator.tgt_tok
    assert (meta["decoder_start_token_id"], meta["eos_token_id"]) == (tok.bos_id, tok.eos_id)
    encoder, decoder = (
        session(tmp_path / "onnx" / "encoder.onnx"),
        session(tmp_path / "onnx" / "decoder.onnx"),
    )
    texts = ["a b c", "l h g f e d", "d", "k j i h g f e"]
    source = pad(translator.src_tok.encode_batch(texts), translator.src_tok.pad_id)
    target = torch.randint(4, tok.vocab_size, (4, 9), generator=torch.Generator().manual_seed(2))
    memory = encoder.run(None, {"input_ids": source.numpy()})[0]
    inputs = {"encoder_hidden_states": memory, "input_ids": source.numpy()}
    logits = decoder.run(None, {"decoder_input_ids": target.numpy(), **inputs})[0]
    with torch.no_grad():
        assert np.abs(memory - translator.model.encode(source).memory.numpy()).max() < 1e-4
        assert np.abs(logits - translator.model(source, target).numpy()).max() < 1e-4
    greedy = translate_ids(
        translator.model, source, tok.bos_id, tok.eos_id, DecodingConfig(max_new_tokens=20)
    )
    start = np.full((len(texts), 1), tok.bos_id, dtype=np.int64)
    theirs = greedy_loop(
        lambda t: decoder.run(None, {"decoder_input_ids": t, **inputs})[0], start, 20, tok.eos_id, tok.pad_id
    )
    assert theirs == before_eos(greedy.tokens, tok.eos_id) and any(len(row) > 3 for row in theirs)
    step = session(tmp_path / "onnx" / "decoder_with_past.onnx")
    ones = np.ones_like(start)
    cached, _ = cached_loop(step, start, ones, 20, tok.eos_id, tok.pad_id, **inputs)
    assert cached == theirs
    prefix = np.concatenate([start, np.array(cached[0][:3])[None].repeat(len(texts), 0)], axis=1)
    with torch.no_grad():  # the step logits of a prefix: the full model's at its positions
        full = translator.model(source, torch.from_numpy(prefix)).numpy()
    _, logged = cached_loop(step, prefix, np.ones_like(prefix), 1, tok.eos_id, tok.pad_id, **inputs)
    assert max(np.abs(logits - full[:, i]).max() for i, logits in enumerate(logged)) < 1e-4


def bert_inputs(tok: WordPieceTokenizer, texts: list[str], pairs: list[str]) -> dict[str, np.ndarray]:
    """The graph's inputs for ``[CLS] text [SEP] pair [SEP]`` of each text, right-padded."""
    encoded = tok.encode_segments_batch(texts, pairs)
    tokens = pad([ids for ids, _ in encoded], tok.pad_id)
    segments = pad([types for _, types in encoded], 0)
    mask = (tokens != tok.pad_id).long()
    return {"input_ids": tokens.numpy(), "token_type_ids": segments.numpy(), "attention_mask": mask.numpy()}


def test_bert_classifier_logits(tmp_path):
    train, dev = write_sentiment(tmp_path, "train", 100, seed=0), write_sentiment(tmp_path, "dev", 20, seed=1)
    assert main(tiny_classify_args(train, dev, tmp_path / "cls")) == 0
    export_run(tmp_path / "cls", tmp_path / "onnx")
    classifier = TextClassifier.load(tmp_path / "cls", "cpu")
    assert isinstance(classifier.tokenizer, WordPieceTokenizer)
    inputs = bert_inputs(classifier.tokenizer, ["a great movie", "the plot was very dull and bad"], ["", ""])
    logits = session(tmp_path / "onnx" / "model.onnx").run(None, inputs)[0]
    with torch.no_grad():
        args = [torch.from_numpy(inputs[k]) for k in ("input_ids", "token_type_ids", "attention_mask")]
        expected = classifier.model(args[0], args[1], args[2].bool()).numpy()
    assert np.abs(logits - expected).max() < 1e-4
    meta = json.loads((tmp_path / "onnx" / "onnx.json").read_text(encoding="utf-8"))
    assert meta["labels"] == list(classifier.labels)


@pytest.mark.parametrize("kind", ["mlm", "encoder"])
def test_bert_encoder_hidden_states(tmp_path, kind):
    run = tiny_mlm_run(tmp_path, "--max-steps", "5") if kind == "mlm" else encoder_run(tmp_path)
    export_run(run, tmp_path / "onnx")
    encoder = SentenceEncoder.load(run, "cpu")
    inputs = bert_inputs(encoder.tokenizer, ["one two three four", "five"], ["six seven", "eight nine ten"])
    hidden = session(tmp_path / "onnx" / "encoder.onnx").run(None, inputs)[0]
    with torch.no_grad():
        args = [torch.from_numpy(inputs[k]) for k in ("input_ids", "token_type_ids", "attention_mask")]
        expected = encoder.model(args[0], args[1], args[2].bool()).numpy()
    real = inputs["attention_mask"].astype(bool)
    assert np.abs(hidden - expected)[real].max() < 1e-4


def test_output_folder_is_refused_unless_forced_and_other_runs_in_one_line(tmp_path, capsys):
    run = tiny_lm_run(tmp_path, "--max-steps", "1")
    out = tmp_path / "onnx"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["export-onnx", str(run), str(out)]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert main(["export-onnx", str(run), str(out), "--force"]) == 0
    assert (out / "model.onnx").is_file() and (out / "notes.txt").read_text(encoding="utf-8") == "mine"
    src, tgt = write_reverse_task(tmp_path)
    assert main(tiny_args(src, tgt, tmp_path / "rnn", "--arch", "rnn", "--max-steps", "1")) == 0
    with pytest.raises(RunDirError) as exc:
        export_run(tmp_path / "rnn", tmp_path / "rnn_onnx")
    assert "have no ONNX export" in one_line(exc) and not (tmp_path / "rnn_onnx").exists()
    (tmp_path / "alibi").mkdir()
    alibi = tiny_lm_run(tmp_path / "alibi", "--position", "alibi", "--max-steps", "1")
    with pytest.raises(RunDirError) as exc:
        export_run(alibi, tmp_path / "alibi_onnx")
    assert "the run has position 'alibi'" in one_line(exc) and not (tmp_path / "alibi_onnx").exists()
