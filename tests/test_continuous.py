"""Continuous batching (generation/continuous.py): requests that join and leave a running batch at
different steps get exactly what they get alone; cancellation frees the slot; the cache stays
bounded by the batch."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from tests.helpers import position_gpt, tiny_lm_run
from vaswani.errors import ConfigError, DataError, InputError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.continuous import ContinuousEngine, EngineClosed, QueueFull
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.pipelines.lm import LanguageModel

NEVER = 99  # an EOS id that the tiny GPTs never produce: every step is compared
VOCAB = 24
# (prompt, max_new_tokens, the step at which it is submitted): they join and leave at different
# steps, and with a context of 12 the longer ones restart their view, each at its own step.
REQUESTS = [([5, 6, 7, 8, 9, 10, 11], 20, 0), ([3, 4], 5, 0), ([12], 25, 2), ([2, 9, 9, 4, 17], 3, 3)]
REQUESTS += [([1, 2, 3], 12, 4), ([8], 1, 6), ([20, 21, 3, 3], 9, 7)]


def _ids(ids) -> str:
    return " ".join(str(i) for i in ids)


def _alone(model, prompt: list[int], steps: int, decoding: DecodingConfig | None = None) -> list[int]:
    mask = torch.ones(1, len(prompt), dtype=torch.bool)
    decoding = decoding or DecodingConfig()
    out = generate(
        lm_next_logits(model, mask, True, VOCAB), torch.tensor([prompt]), steps, NEVER, 0, decoding,
        decoding.generator(),
    )  # fmt: skip
    return out.tokens[0].tolist()


def _run(engine: ContinuousEngine, requests, decodings) -> list[list[int]]:
    """Submit each request at its step, step until all end; the ids of each."""
    handles = {}
    step = 0
    while len(handles) < len(requests) or engine.rows or engine.pending:
        for i, (prompt, _, at) in enumerate(requests):
            if at == step:
                handles[i] = engine.submit(prompt, decodings[i])
        engine.step()
        assert len(engine.rows) <= engine.max_batch
        step += 1
    return [handles[i].result().ids for i in range(len(requests))]


@pytest.mark.parametrize("position", ["learned", "relative", "rope", "alibi"])
@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
@pytest.mark.parametrize("max_batch", [3, 8])
def test_greedy_rows_joining_and_leaving_equal_each_alone(position, window, max_batch):
    model = position_gpt(position, max_len=12, window=window)
    engine = ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB, max_batch=max_batch)
    decodings = [DecodingConfig(max_new_tokens=n) for _, n, _ in REQUESTS]
    got = _run(engine, REQUESTS, decodings)
    for (prompt, n, _), ids in zip(REQUESTS, got, strict=True):
        assert ids == _alone(model, prompt, n)
    assert len(set(got[0])) >= 3 and len(set(got[2])) >= 3  # not one repeated token
    assert engine.cache is None and engine.rows == []


def test_seeded_sampling_is_the_same_alone_and_batched():
    model = position_gpt("rope", max_len=12)
    options = [dict(temperature=1.5), dict(temperature=1.0, top_k=5), dict(temperature=1.2, top_p=0.8)]
    decodings = [
        DecodingConfig(max_new_tokens=n, seed=10 + i, **options[i % 3])
        for i, (_, n, _) in enumerate(REQUESTS)
    ]
    decodings[1] = DecodingConfig(max_new_tokens=REQUESTS[1][1])  # a greedy row among them
    engine = ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB, max_batch=4)
    got = _run(engine, REQUESTS, decodings)
    for (prompt, n, _), decoding, ids in zip(REQUESTS, decodings, got, strict=True):
        assert ids == _alone(model, prompt, n, decoding)
    greedy = _run(ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB), REQUESTS[:1], decodings[1:2])
    assert got[0] != greedy[0][: len(got[0])]  # the draws are not the argmax


def test_cancelling_frees_the_slot():
    model = position_gpt("learned", max_len=32)
    engine = ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB, max_batch=1)
    first = engine.submit([1, 2], DecodingConfig(max_new_tokens=20))
    second = engine.submit([4, 5], DecodingConfig(max_new_tokens=4))
    engine.step()
    engine.step()
    assert engine.rows == [first] and engine.pending == 1
    first.cancel()
    engine.step()
    assert engine.rows == [second] and engine.pending == 0
    result = first.result()
    assert result.finish_reason == "cancelled" and len(result.ids) == 2
    while engine.rows:
        engine.step()
    assert second.result().ids == _alone(model, [4, 5], 4)
    assert second.result().finish_reason == "length"


def test_a_cancelled_waiting_request_never_runs():
    engine = ContinuousEngine(position_gpt("learned"), NEVER, _ids, max_batch=1)
    running, waiting = engine.submit([1], DecodingConfig(max_new_tokens=3)), engine.submit([2])
    waiting.cancel()
    for _ in range(4):
        engine.step()
    assert running.result().finish_reason == "length"
    assert waiting.result().ids == [] and waiting.result().finish_reason == "cancelled"


def test_the_cache_stays_bounded_by_the_batch():
    """Many long requests through 3 slots, past the context of 16: the cache never holds more than
    3 rows of max_len columns (its buffers at most twice that: they grow by doubling)."""
    model = position_gpt("learned", max_len=16)
    cfg = model.config
    engine = ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB, max_batch=3)
    budgets = [10 + 7 * i for i in range(9)]
    handles = [
        engine.submit([1 + i % 7] * (1 + i % 5), DecodingConfig(max_new_tokens=n))
        for i, n in enumerate(budgets)
    ]
    per_column = 2 * cfg.n_layers * cfg.d_model * 8  # keys and values of every layer, float64
    bound = 3 * 2 * cfg.max_len * per_column
    peak = 0
    while engine.rows or engine.pending:
        engine.step()
        assert len(engine.rows) <= 3 and engine.width <= cfg.max_len
        peak = max(peak, engine.cache_bytes)
        assert engine.cache_bytes <= bound
    assert peak > bound // 4
    assert [len(h.result().ids) for h in handles] == budgets


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return LanguageModel.load(tiny_lm_run(tmp_path_factory.mktemp("continuous")))


def _engine(lm: LanguageModel, max_batch: int = 4) -> ContinuousEngine:
    tokenizer = lm.tokenizer
    return ContinuousEngine(lm.model, tokenizer.eos_id, tokenizer.decode, tokenizer.vocab_size, max_batch)


PROMPTS = ["the cat sat on the", "a", "dog ran to the red hat and", "", "birds sang while the"]


@pytest.mark.parametrize(
    "decoding",
    [
        DecodingConfig(max_new_tokens=40),
        DecodingConfig(max_new_tokens=30, temperature=0.9, top_p=0.9, seed=3),
        DecodingConfig(max_new_tokens=40, stop=("the", "\n")),
    ],
    ids=["greedy", "seeded", "stop"],
)
def test_texts_of_a_trained_model_equal_language_model_generate_alone(tiny_lm, decoding):
    """Through the engine's thread, with the prompts submitted at once from several threads: the
    text of each equals ``LanguageModel.generate`` alone, and the streamed pieces join into it."""
    engine = _engine(tiny_lm, max_batch=3).start()
    handles: dict[int, object] = {}

    def submit(i: int) -> None:
        handles[i] = engine.submit(tiny_lm.tokenizer.encode(PROMPTS[i]), decoding)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        for i, prompt in enumerate(PROMPTS):
            streamed = "".join(handles[i].pieces())
            result = handles[i].result()
            assert result.text == streamed == tiny_lm.generate([prompt], decoding)[0]
            assert result.finish_reason in ("stop", "length")
    finally:
        engine.close()
    assert any(len(set(handles[i].result().text)) >= 3 for i in handles)


def test_stop_strings_end_a_row_and_its_finish_reason(tiny_lm):
    engine = _engine(tiny_lm)
    ids = tiny_lm.tokenizer.encode("the cat")
    free = engine.submit(ids, DecodingConfig(max_new_tokens=30))
    while engine.rows or engine.pending:
        engine.step()
    text = free.result().text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    stopped = engine.submit(ids, DecodingConfig(max_new_tokens=30, stop=(stop,)))
    while engine.rows or engine.pending:
        engine.step()
    result = stopped.result()
    assert result.finish_reason == "stop" and text.startswith(result.text) and stop not in result.text
    assert len(result.ids) < 30 and free.result().finish_reason == "length"


def test_bad_requests_are_refused_at_submit():
    model = position_gpt("learned", max_len=12)
    engine = ContinuousEngine(model, NEVER, _ids, VOCAB, max_batch=1, max_pending=1)
    with pytest.raises(DataError, match="context of 12"):
        engine.submit(list(range(12)))
    with pytest.raises(InputError, match=r"\[0, 24\)"):
        engine.submit([3, 24])
    with pytest.raises(ConfigError, match=r"decoding\.beam"):
        engine.submit([3], DecodingConfig(beam=2))
    engine.submit([3])
    with pytest.raises(QueueFull, match="max_pending"):
        engine.submit([4])
    engine.close()
    with pytest.raises(EngineClosed):
        engine.submit([3])


def test_draining_without_waiting_sees_every_step_and_on_step_the_batch_sizes():
    model = position_gpt("learned", max_len=32)
    sizes: list[int] = []
    engine = ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB, max_batch=2, on_step=sizes.append).start()
    woken = threading.Event()
    requests = [
        engine.submit([1 + i], DecodingConfig(max_new_tokens=5 + i), on_event=lambda r: woken.set())
        for i in range(3)
    ]
    try:
        drained: list[list[int]] = [[] for _ in requests]
        while not all(r.ended for r in requests):
            woken.wait(5)
            woken.clear()
            for got, request in zip(drained, requests, strict=True):
                got.extend(request.drain())
    finally:
        engine.close()
    assert drained == [r.result().ids for r in requests] == [_alone(model, [1 + i], 5 + i) for i in range(3)]
    assert max(sizes) == 2 and sum(sizes) == 5 + 6 + 7 == engine.tokens_generated


def test_a_failing_step_ends_its_requests_and_the_engine_goes_on(monkeypatch):
    model = position_gpt("learned", max_len=32)
    engine = ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB, max_batch=2)
    forward = type(model).forward
    calls = {"n": 0}

    def failing_once(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom")
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", failing_once)
    engine.start()
    try:
        first = engine.submit([1, 2], DecodingConfig(max_new_tokens=8))
        with pytest.raises(RuntimeError, match="boom"):
            first.result()
        assert first.finish_reason == "error"
        later = engine.submit([4, 5], DecodingConfig(max_new_tokens=4))
        assert later.result().ids == _alone(model, [4, 5], 4)
    finally:
        engine.close()


def test_a_failing_on_event_cancels_its_request_alone():
    model = position_gpt("learned", max_len=32)
    engine = ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB, max_batch=2)

    def gone(request):
        raise RuntimeError("the loop is closed")

    broken = engine.submit([1, 2], DecodingConfig(max_new_tokens=10), on_event=gone)
    fine = engine.submit([3], DecodingConfig(max_new_tokens=6))
    while engine.rows or engine.pending:
        engine.step()
    assert broken.result().finish_reason == "cancelled" and len(broken.result().ids) == 1
    assert fine.result().ids == _alone(model, [3], 6)


def test_calls_run_in_the_engine_thread_between_steps_and_end_with_it():
    """``engine.call`` runs other work in the engine's thread, never inside a step: rows that run
    meanwhile still get what they get alone; a failure is the caller's; a call still waiting when
    the engine closes is cancelled, and a closed engine takes none."""
    model = position_gpt("learned", max_len=32)
    engine = ContinuousEngine(model, NEVER, _ids, vocab_size=VOCAB, max_batch=2)
    stepping = threading.Event()
    step = engine.step

    def watched_step() -> int:
        stepping.set()
        try:
            return step()
        finally:
            stepping.clear()

    engine.step = watched_step  # type: ignore[method-assign]
    engine.start()
    try:
        row = engine.submit([3], DecodingConfig(max_new_tokens=20))
        seen = [engine.call(lambda: (threading.get_ident(), stepping.is_set())).result(5) for _ in range(5)]
        assert {ident for ident, _ in seen} == {engine._thread.ident} != {threading.get_ident()}
        assert not any(during for _, during in seen)
        assert engine.call(lambda a, b: a * b, 6, 7).result(5) == 42
        with pytest.raises(ZeroDivisionError):
            engine.call(lambda: 1 / 0).result(5)
        assert row.result().ids == _alone(model, [3], 20)
        running, release = threading.Event(), threading.Event()
        blocking = engine.call(lambda: (running.set(), release.wait(5))[1])
        assert running.wait(5)
        waiting = engine.call(lambda: "never")
    finally:
        closing = threading.Thread(target=engine.close)
        closing.start()
        while not engine._closed:  # closed while the first call runs and the second waits
            time.sleep(0.001)
        release.set()
        closing.join(10)
    assert blocking.result(5) is True and waiting.cancelled()
    with pytest.raises(EngineClosed):
        engine.call(lambda: None)
