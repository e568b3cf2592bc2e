"""``/v1/completions`` through the continuous-batching engine (serve/engine.py), against a real
server on 127.0.0.1: concurrent completions equal ``LanguageModel.generate`` alone, streamed text
joined equals the one-shot text, and a client that goes away frees its row."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.helpers import tiny_lm_run
from tests.serving import serving
from vaswani.generation.config import DecodingConfig
from vaswani.pipelines.lm import LanguageModel
from vaswani.serve.app import create_app
from vaswani.serve.settings import ServeSettings

PROMPTS = ["the cat sat on the", "a", "dog ran to the red hat and", "", "birds sang while the"]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    return tiny_lm_run(tmp_path_factory.mktemp("serve-engine"))


@pytest.fixture(scope="module")
def served(lm_run):
    app = create_app([lm_run], ServeSettings(max_batch=3))
    with serving(app) as client:
        yield app, str(client.base_url).rstrip("/")


def _events(response: httpx.Response) -> list[dict]:
    lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def test_concurrent_completions_equal_each_alone_and_streams_join_to_them(served, lm_run):
    app, url = served
    lm = LanguageModel.load(lm_run, "cpu")
    greedy = DecodingConfig(max_new_tokens=30)
    alone = [lm.generate([p], greedy)[0] for p in PROMPTS]
    body = {"max_tokens": 30}

    def one_shot(prompt: str) -> dict:
        return httpx.post(f"{url}/v1/completions", json={**body, "prompt": prompt}, timeout=60).json()

    def streamed(prompt: str) -> list[dict]:
        with httpx.stream("POST", f"{url}/v1/completions", json={**body, "prompt": prompt, "stream": True},
                          timeout=60) as response:  # fmt: skip
            assert response.status_code == 200
            return _events(response)

    with ThreadPoolExecutor(8) as pool:
        shots = list(pool.map(one_shot, PROMPTS))
        streams = list(pool.map(streamed, PROMPTS))
    for text, shot, events in zip(alone, shots, streams, strict=True):
        (choice,) = shot["choices"]
        assert choice["text"] == text
        assert "".join(e["choices"][0]["text"] for e in events) == text
        reasons = [e["choices"][0]["finish_reason"] for e in events]
        assert reasons[-1] == choice["finish_reason"] and reasons.count(None) == len(reasons) - 1
    assert any(len(set(text)) >= 3 for text in alone)
    assert shots[0]["usage"]["completion_tokens"] == len(lm.tokenizer.encode(alone[0]))
    engine = app.state.engines[next(iter(app.state.engines))]
    deadline = time.monotonic() + 10  # the last answer may come just before its row leaves the batch
    while engine.rows or engine.pending:
        assert time.monotonic() < deadline, "a finished row stayed in the batch"
        time.sleep(0.01)
    metrics = httpx.get(f"{url}/metrics").text
    assert 'vaswani_batch_size_count{model="run"}' in metrics


def test_a_paced_stream_gathers_tokens_into_fewer_events_and_joins_to_the_one_shot_text(lm_run):
    """With a long stream interval, the first token comes alone and the rest gather (the end cuts
    the pause short); the text is the same."""
    body = {"prompt": PROMPTS[0], "max_tokens": 30}
    with serving(create_app([lm_run], ServeSettings(stream_interval_ms=1000))) as client:
        (shot,) = client.post("/v1/completions", json=body, timeout=60).json()["choices"]
        with client.stream("POST", "/v1/completions", json={**body, "stream": True}, timeout=60) as response:
            found = _events(response)
    texts = [e["choices"][0]["text"] for e in found]
    assert "".join(texts) == shot["text"] and len(shot["text"]) > 10
    assert len(found) < 10  # 30 tokens: the first, what gathered until the end, the finish reason
    assert found[-1]["choices"][0]["finish_reason"] == shot["finish_reason"]


def test_seeded_choices_differ_and_repeat(served):
    _, url = served
    body = {"prompt": "the", "max_tokens": 20, "temperature": 1.0, "seed": 5, "n": 3}
    first = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()
    again = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()
    texts = [c["text"] for c in first["choices"]]
    assert texts == [c["text"] for c in again["choices"]]
    assert len(set(texts)) > 1


def test_a_client_that_goes_away_frees_its_row(served):
    app, url = served
    engine = app.state.engines[next(iter(app.state.engines))]
    before = engine.tokens_generated
    body = {"prompt": "the", "max_tokens": 500, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line:
                break  # the first piece has come: go away
    deadline, seen = time.monotonic() + 30, -1
    while engine.rows or engine.pending or engine.tokens_generated != seen:  # until it stays idle
        assert time.monotonic() < deadline, "the row was never freed"
        seen = engine.tokens_generated
        time.sleep(0.2)
    assert engine.tokens_generated - before < 250  # stopped, not run to its 500 tokens
    assert 'vaswani_generations_cancelled_total{model="run"} 1.0' in httpx.get(f"{url}/metrics").text


def test_a_prompt_too_long_is_a_422_naming_it(served):
    _, url = served
    response = httpx.post(f"{url}/v1/completions", json={"prompt": "x" * 40, "max_tokens": 5}, timeout=60)
    assert response.status_code == 422
    assert "prompt" in response.json()["error"]["message"]
