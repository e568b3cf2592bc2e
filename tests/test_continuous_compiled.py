"""Compiled continuous batching (``serve --compile``): the engines' steps through ``torch.compile`` on
static KV caches (rows padded to a power of two, a bucket of columns that doubles when full, up
to the context) give
every request exactly what eager decoding gives it alone, for a GPT and a translator, under every
position scheme, with rows joining, leaving and restarting their view; one graph serves each
bucket, whatever the rows' lengths. The graphs are traced by dynamo and run by its "eager" backend
(``tests/test_compiled_decoding.py`` says why; ``benchmarks/serve_load.py`` runs inductor)."""

from __future__ import annotations

import pytest
from torch._dynamo.testing import CompileCounterWithBackend

from tests import test_continuous as lm_case
from tests import test_continuous_seq2seq as seq2seq_case
from tests.helpers import position_gpt
from vaswani.generation.compiled import CompiledDecoding
from vaswani.generation.config import DecodingConfig
from vaswani.generation.continuous import ContinuousEngine
from vaswani.generation.continuous_seq2seq import Seq2SeqEngine


def _compiled() -> tuple[CompiledDecoding, CompileCounterWithBackend]:
    counter = CompileCounterWithBackend("eager")
    return CompiledDecoding(counter), counter


@pytest.mark.parametrize("position", ["learned", "relative", "rope", "alibi"])
@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
def test_compiled_lm_rows_joining_leaving_and_restarting_equal_each_alone(position, window, capsys):
    model = position_gpt(position, max_len=12, window=window)
    compiled, counter = _compiled()
    engine = ContinuousEngine(
        model, lm_case.NEVER, lm_case._ids, lm_case.VOCAB, max_batch=3, compiled=compiled
    )
    decodings = [DecodingConfig(max_new_tokens=n) for _, n, _ in lm_case.REQUESTS]
    got = lm_case._run(engine, lm_case.REQUESTS, decodings)
    for (prompt, n, _), ids in zip(lm_case.REQUESTS, got, strict=True):
        assert ids == lm_case._alone(model, prompt, n)
    assert compiled.failure is None and compiled.buckets <= {("lm", r, 12) for r in (1, 2, 4)}
    assert counter.frame_count == len(compiled.buckets) >= 2  # one graph a bucket, every length in it
    said = capsys.readouterr().err.splitlines()  # a line as each bucket's graph is compiled
    assert [line.split(" compiled in ")[0] for line in said] == [
        f"vaswani: --compile: {n} decoding graph{'s' * (n > 1)}" for n in range(1, len(compiled.buckets) + 1)
    ]
    assert engine.cache is None and engine.static_mask is None


def test_compiled_lm_caches_double_when_full_and_seeded_draws_hold():
    """A context of 200: rows outgrow the static caches' 64 columns, then 128, and are regrouped;
    seeded sampling among greedy rows gives each row's draws alone."""
    model = position_gpt("rope", max_len=200)
    requests = [([5, 6, 7], 150, 0), ([3, 4], 40, 0), ([12], 90, 5), ([2, 9], 70, 30)]
    decodings = [
        DecodingConfig(max_new_tokens=n, temperature=1.3, seed=i) for i, (_, n, _) in enumerate(requests)
    ]
    decodings[1] = DecodingConfig(max_new_tokens=requests[1][1])
    compiled, counter = _compiled()
    engine = ContinuousEngine(
        model, lm_case.NEVER, lm_case._ids, lm_case.VOCAB, max_batch=4, compiled=compiled
    )
    got = lm_case._run(engine, requests, decodings)
    for (prompt, n, _), decoding, ids in zip(requests, decodings, got, strict=True):
        assert ids == lm_case._alone(model, prompt, n, decoding)
    assert {columns for _, _, columns in compiled.buckets} == {64, 128, 200}  # at most the context
    assert counter.frame_count == len(compiled.buckets)


# One scheme of each place positions act in (the embedding, the scores, the queries and keys): the
# decoder's self-attention is the language model's, whose test above takes every scheme.
@pytest.mark.parametrize("position", ["sinusoidal", "relative", "rope"])
@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
def test_compiled_translations_joining_and_leaving_equal_each_alone(position, window):
    model = seq2seq_case._model(position, window)
    compiled, counter = _compiled()
    engine = Seq2SeqEngine(
        model, seq2seq_case.BOS, seq2seq_case.NEVER, seq2seq_case._ids, seq2seq_case.SUPPRESS, max_batch=3,
        compiled=compiled,
    )  # fmt: skip
    decodings = [DecodingConfig(max_new_tokens=n) for _, n, _ in seq2seq_case.REQUESTS]
    decodings[3] = DecodingConfig(max_new_tokens=3, temperature=2.0, seed=4)  # a seeded draw among them
    got = seq2seq_case._run(engine, seq2seq_case.REQUESTS, decodings)
    for (source, _, _), decoding, ids in zip(seq2seq_case.REQUESTS, decodings, got, strict=True):
        assert ids == seq2seq_case._alone(model, source, decoding)
    assert compiled.failure is None and {key[0] for key in compiled.buckets} == {"seq2seq-batch"}
    assert {key[2] for key in compiled.buckets} >= {8, 32}  # sources of up to 8 tokens, then of 17
    assert counter.frame_count == len(compiled.buckets)
    assert engine.cache is None and engine.memory is None


def test_a_failing_compilation_steps_the_batch_eagerly(capsys):
    def backend(gm, example_inputs):
        raise RuntimeError("no kernels today")

    model = position_gpt("learned", max_len=12)
    engine = ContinuousEngine(
        model, lm_case.NEVER, lm_case._ids, lm_case.VOCAB, max_batch=3, compiled=CompiledDecoding(backend)
    )
    decodings = [DecodingConfig(max_new_tokens=n) for _, n, _ in lm_case.REQUESTS]
    got = lm_case._run(engine, lm_case.REQUESTS, decodings)
    assert got == [lm_case._alone(model, prompt, n) for prompt, n, _ in lm_case.REQUESTS]
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vaswani:")]
    assert said == ["vaswani: --compile: torch.compile does not work here (RuntimeError: no kernels today); "
                    "decoding without it"]  # fmt: skip
    assert engine.compiled is not None and engine.compiled.failure == "RuntimeError: no kernels today"
