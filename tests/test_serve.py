"""``vaswani serve`` as people use it: a real server on 127.0.0.1, an HTTP client, tiny runs
(English → Chinese on the embedded grammar corpus; a byte-level language model on CJK and emoji).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.serving import changed_settings, events, free_port, metric, serving
from vaswani.cli import main
from vaswani.data import grammar
from vaswani.generation import compiled as compiled_decoding
from vaswani.generation.config import DecodingConfig
from vaswani.serve.app import create_app
from vaswani.serve.settings import ServeSettings

pytestmark = pytest.mark.slow
LINE = "汤姆追逐杰瑞 🐱🐭 猫和老鼠是好朋友 😀 café\n"
PROMPT = "汤姆"
CAPS = ServeSettings(
    device="cpu", max_tokens=48, max_inputs=4, max_input_chars=300, max_body_bytes=4000, max_wait_ms=50,
    max_beam=8, max_prompt_tokens=40, stream_interval_ms=0,  # an event per token (test_serve_engine: paced)
)  # fmt: skip


def train_translation(folder: Path) -> Path:
    corpus = grammar.default_corpus(seed=0, n_train=1500, n_valid=20, n_test=20)
    (folder / "g.en").write_text("".join(en + "\n" for en, _ in corpus.train), encoding="utf-8")
    (folder / "g.zh").write_text("".join(zh + "\n" for _, zh in corpus.train), encoding="utf-8")
    assert main([
        "train", "translation", "--src", str(folder / "g.en"), "--tgt", str(folder / "g.zh"),
        "--out", str(folder / "zh"), "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1",
        "--vocab-size", "200", "--batch-tokens", "600", "--max-steps", "200", "--warmup", "10",
        "--lr", "1e-2", "--quiet", "--no-bf16", "--eval-every", "1000",
    ]) == 0  # fmt: skip
    return folder / "zh"


def train_lm(folder: Path) -> Path:
    (folder / "cjk.txt").write_text(LINE * 150, encoding="utf-8")
    assert main([
        "train", "lm", "--text", str(folder / "cjk.txt"), "--out", str(folder / "lm"), "--tokenizer", "bpe",
        "--vocab-size", "270", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1",
        "--max-len", "32", "--batch-tokens", "256", "--max-steps", "150", "--lr", "1e-2", "--warmup", "5",
        "--eval-every", "1000", "--quiet", "--no-bf16",
    ]) == 0  # fmt: skip
    return folder / "lm"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("serve")
    return train_translation(folder), train_lm(folder)


@pytest.fixture(scope="module")
def app(runs):
    return create_app(list(runs), CAPS)


@pytest.fixture(scope="module")
def client(app):
    with serving(app) as client:
        yield client


def error_of(response, status: int, param: str | None, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and "\n" not in error["message"] and "Traceback" not in response.text
    for word in words:
        assert word in error["message"]


def joined(found: list) -> tuple[str, list]:
    """The text of a stream's chunks and each chunk's finish_reason; the stream ends in [DONE]."""
    assert found[-1] == "[DONE]" and "[DONE]" not in found[:-1]
    chunks = found[:-1]
    texts = [c["choices"][0]["text"] if "choices" in c else c["text"] for c in chunks]
    finishes = [c["choices"][0]["finish_reason"] if "choices" in c else c["finish_reason"] for c in chunks]
    assert not any("\ufffd" in text for text in texts)
    return "".join(texts), finishes


def test_health_and_models(client):
    assert client.get("/health").json() == {"status": "ok", "models": ["zh", "lm"]}
    cards = {card["id"]: card for card in client.get("/v1/models").json()["data"]}
    assert cards["zh"]["task"] == "translation" and "/v1/translations" in cards["zh"]["endpoints"]
    assert cards["lm"]["task"] == "lm" and "/v1/completions" in cards["lm"]["endpoints"]
    assert "/v1/translations" in client.get("/openapi.json").json()["paths"]


def test_translations_streamed_join_to_the_one_shot_text(client, app):
    sentences = ["Tom chases Jerry", "The birds are not running in the park now"]
    one_shot = client.post("/v1/translations", json={"model": "zh", "input": sentences}).json()
    texts = [row["text"] for row in one_shot["data"]]
    assert texts == app.state.models["zh"].wrapper.translate(sentences)
    assert any("\u4e00" <= c <= "\u9fff" for c in "".join(texts))  # Chinese
    for sentence, text in zip(sentences, texts, strict=True):
        streamed, finishes = joined(events(client, "/v1/translations", {"input": sentence, "stream": True}))
        assert streamed == text
        assert finishes[:-1] == [None] * (len(finishes) - 1) and finishes[-1] in ("stop", "length")


def test_beam_search_gives_the_n_best(client, app):
    body = {"model": "zh", "input": "Tom chases Jerry", "beam": 3, "n_best": 2, "length_penalty": 0.6}
    row = client.post("/v1/translations", json=body).json()["data"][0]
    best = app.state.models["zh"].wrapper.translate_n_best(
        ["Tom chases Jerry"], DecodingConfig(beam=3, n_best=2)
    )
    assert [h["text"] for h in row["hypotheses"]] == [h.text for h in best[0]] and row["text"] == best[0][
        0
    ].text


def test_a_beam_search_runs_in_its_model_engine_thread(client, app, monkeypatch):
    """The queue's one-shot work runs in the thread of the model's engine (one thread, and one pool
    of OpenMP workers, per model)."""
    translator, threads = app.state.models["zh"].wrapper, []
    n_best = translator.translate_n_best

    def recorded(*args, **kwargs):
        threads.append(threading.get_ident())
        return n_best(*args, **kwargs)

    monkeypatch.setattr(translator, "translate_n_best", recorded)
    body = {"model": "zh", "input": "Tom chases Jerry", "beam": 3}
    assert client.post("/v1/translations", json=body).status_code == 200
    assert threads == [app.state.engines["zh"]._thread.ident]


def test_completions_streamed_join_to_the_one_shot_text_without_u_fffd(client, app):
    lm = app.state.models["lm"].wrapper
    assert len(lm.tokenizer.encode(PROMPT)) > len(PROMPT)  # its characters span several tokens
    body = {"model": "lm", "prompt": PROMPT, "max_tokens": 40}
    one_shot = client.post("/v1/completions", json=body).json()
    (choice,) = one_shot["choices"]
    reference = lm.generate([PROMPT], DecodingConfig(max_new_tokens=40))[0]
    assert choice["text"] == reference.removesuffix("\ufffd") and "\ufffd" not in choice["text"]
    assert choice["finish_reason"] == "length" and one_shot["object"] == "text_completion"
    assert one_shot["usage"]["completion_tokens"] == 40
    found = events(client, "/v1/completions", {**body, "stream": True})
    streamed, finishes = joined(found)
    assert streamed == choice["text"] and len({c["id"] for c in found[:-1]}) == 1
    assert finishes.count("length") == 1 and finishes[-1] == "length" and set(finishes[:-1]) == {None}


def test_stop_n_and_seed(client):
    body = {"prompt": PROMPT, "max_tokens": 30, "stop": ["猫"]}
    (choice,) = client.post("/v1/completions", json=body).json()["choices"]
    assert "猫" not in choice["text"] and choice["finish_reason"] == "stop"
    sampled = {"prompt": PROMPT, "max_tokens": 8, "temperature": 1.5, "seed": 3, "n": 3}
    first = [c["text"] for c in client.post("/v1/completions", json=sampled).json()["choices"]]
    again = [c["text"] for c in client.post("/v1/completions", json=sampled).json()["choices"]]
    assert len(first) == 3 and first == again


@pytest.mark.parametrize(
    ("path", "body", "status", "param", "words"),
    [
        ("/v1/translations", {"input": "Tom", "beams": 2}, 422, "beams", ["unknown field"]),
        ("/v1/translations", {"input": "Tom", "beam": 0}, 422, "beam", ["decoding.beam"]),
        ("/v1/translations", {"input": "Tom", "top_p": 2.0}, 422, "top_p", ["decoding.top_p"]),
        ("/v1/translations", {"input": 3}, 422, "input", ["input"]),
        ("/v1/translations", {"input": ["a"] * 5}, 422, "input", ["--max-inputs 4"]),
        ("/v1/translations", {"input": "a" * 301}, 422, "input", ["--max-input-chars 300"]),
        ("/v1/translations", {"input": "Tom", "stream": True, "beam": 2}, 422, "stream", ["greedy"]),
        ("/v1/translations", {"input": "Tom", "model": "nope"}, 404, "model", ["nope"]),
        ("/v1/translations", {"input": "Tom", "model": "lm"}, 422, "model", ["lm run"]),
        ("/v1/completions", {"prompt": "a", "max_tokens": 49}, 422, "max_tokens", ["--max-tokens"]),
        ("/v1/completions", {"prompt": "a", "max_tokens": 0}, 422, "max_tokens", ["echo"]),
        ("/v1/completions", {"prompt": "a", "n": 5}, 422, "n", ["n"]),
        ("/v1/completions", {"prompt": "a", "temperature": -1}, 422, "temperature", ["decoding.temperature"]),
        ("/v1/completions", {"prompt": "汤姆" * 40}, 422, "prompt", ["--max-prompt-tokens 40"]),
        ("/v1/completions", {"max_tokens": 3}, 422, "prompt", ["prompt"]),
        # Issue 34: caps before any work starts (beam 1e5 took 40 s, 1e18 was a 500).
        ("/v1/translations", {"input": "a b c", "beam": 100000}, 422, "beam", ["at most 8", "--max-beam"]),
        ("/v1/translations", {"input": "a b c", "beam": 10**18}, 422, "beam", ["--max-beam"]),
        ("/v1/translations", {"input": "Tom " * 60}, 422, "input", ["--max-prompt-tokens 40"]),
        # ... the server refuses what the command line refuses (both were translated or coerced).
        ("/v1/translations", {"input": ""}, 422, "input", ["empty"]),
        ("/v1/translations", {"input": "   "}, 422, "input", ["empty"]),
        ("/v1/translations", {"input": ["Tom", "\t"]}, 422, "input", ["text 2 is empty"]),
        ("/v1/translations", {"input": "Tom", "beam": True}, 422, "beam", ["integer"]),
        ("/v1/translations", {"input": "Tom", "beam": "4"}, 422, "beam", ["integer"]),
        ("/v1/completions", {"prompt": "a", "n": "2"}, 422, "n", ["integer"]),
        ("/v1/completions", {"prompt": "a", "stream": 1}, 422, "stream", ["boolean"]),
    ],
)
def test_each_bad_request_is_refused_in_one_line_naming_its_field(client, path, body, status, param, words):
    error_of(client.post(path, json=body), status, param, *words)


def test_a_prompt_within_the_token_cap_but_past_the_context_is_refused(client, app):
    with changed_settings(app, max_prompt_tokens=1000):
        error_of(client.post("/v1/completions", json={"prompt": "汤姆" * 40}), 422, "prompt", "context")


def test_a_request_whose_decoding_would_not_fit_is_a_413_before_it_starts(client, app):
    body = {"input": ["Tom chases Jerry"] * 4, "beam": 8, "max_tokens": 48}
    started = time.monotonic()
    with changed_settings(app, max_request_mib=0.5):
        error_of(client.post("/v1/translations", json=body), 413, "beam", "MiB", "--max-request-mib 0.5")
    lm = {"prompt": ["汤姆"] * 4, "n": 1, "max_tokens": 48}
    with changed_settings(app, max_request_mib=0.01):
        error_of(client.post("/v1/completions", json=lm), 413, "max_tokens", "--max-request-mib 0.01")
    assert time.monotonic() - started < 5
    assert client.post("/v1/translations", json=body).status_code == 200


def test_a_405_and_every_4xx_is_a_client_error_and_docs_need_no_cdn(client):
    response = client.get("/v1/translations")
    assert response.status_code == 405 and response.json()["error"]["type"] == "invalid_request_error"
    assert client.get("/docs").status_code == 404  # Swagger's page fetched its scripts from a CDN
    assert "/v1/translations" in client.get("/openapi.json").json()["paths"]


def test_any_finite_temperature_samples_in_the_server_and_the_cli(client, app, runs, capsys):
    """1e-300 is argmax (the greedy text); 1e308 samples (was a 500 and an internal error)."""
    greedy = app.state.models["zh"].wrapper.translate(["Tom chases Jerry"])[0]
    tiny = {"input": "Tom chases Jerry", "temperature": 1e-300, "seed": 1}
    assert client.post("/v1/translations", json=tiny).json()["data"][0]["text"] == greedy
    assert client.post("/v1/translations", json={**tiny, "temperature": 1e308}).status_code == 200
    prompt = {"prompt": PROMPT, "max_tokens": 10}
    one = client.post("/v1/completions", json=prompt).json()["choices"][0]["text"]
    assert (
        client.post("/v1/completions", json={**prompt, "temperature": 1e-300}).json()["choices"][0]["text"]
        == one
    )
    assert client.post("/v1/completions", json={**prompt, "temperature": 1e308}).status_code == 200
    capsys.readouterr()
    assert (
        main(["translate", str(runs[0]), "Tom chases Jerry", "--temperature", "1e-300", "--device", "cpu"])
        == 0
    )
    assert capsys.readouterr().out.strip() == greedy
    assert main(["generate", str(runs[1]), PROMPT, "--temperature", "1e308", "--max-new-tokens", "5",
                 "--device", "cpu"]) == 0  # fmt: skip


# Each row: the CLI flags and the request fields of one value, and whether both accept it.
PARITY = [
    ("Tom chases Jerry", [], {}, True),
    ("", [], {}, False),
    ("   ", [], {}, False),
    ("Tom", ["--beam", "0"], {"beam": 0}, False),
    ("Tom", ["--beam", "2"], {"beam": 2}, True),
    ("Tom", ["--beam", "true"], {"beam": True}, False),
    ("Tom", ["--beam", "2.5"], {"beam": 2.5}, False),
    ("Tom", ["--temperature", "-1"], {"temperature": -1}, False),
    ("Tom", ["--temperature", "1e-300"], {"temperature": 1e-300}, True),
    ("Tom", ["--top-p", "2"], {"top_p": 2}, False),
    ("Tom", ["--top-k", "0"], {"top_k": 0}, False),
    ("Tom", ["--max-new-tokens", "0"], {"max_new_tokens": 0}, False),
    ("Tom", ["--beam", "2", "--top-k", "3"], {"beam": 2, "top_k": 3}, False),
]


def accepted_by_the_cli(argv: list[str]) -> bool:
    """Whether ``vaswani ARGV`` succeeds (argparse's refusals exit 2)."""
    try:
        return main(argv) == 0
    except SystemExit as exc:
        return exc.code == 0


def test_the_server_and_the_cli_refuse_and_accept_the_same_values(client, runs, capsys):
    for text, flags, fields, accepted in PARITY:
        cli = accepted_by_the_cli(["translate", str(runs[0]), text, *flags, "--device", "cpu"])
        capsys.readouterr()
        response = client.post("/v1/translations", json={"input": text, **fields})
        assert (cli, response.status_code == 200) == (accepted, accepted), (text, flags, response.text)
        if not accepted:
            param = response.json()["error"]["param"]  # two fields that do not go together: none named
            assert response.status_code == 422 and (param in ("input", *fields) or len(fields) > 1)


def test_sigterm_ends_the_server_in_bounded_time_with_a_request_in_flight(runs, tmp_path):
    """A beam search waits in its batch for --max-wait-ms 10 s; SIGTERM cancels it after
    --shutdown-s 1 and the process ends (with --max-wait-ms inf it never answered nor ended)."""
    port = free_port()
    command = [sys.executable, "-m", "vaswani", "serve", str(runs[0]), "--port", str(port), "--device", "cpu",
               "--max-wait-ms", "10000", "--shutdown-s", "1"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/health").status_code == 200:
                        break
                time.sleep(0.1)
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(http.post, "/v1/translations", json={"input": "Tom", "beam": 2})
                time.sleep(0.5)
                assert not waiting.done()
                sent = time.monotonic()
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=8)
                with contextlib.suppress(httpx.HTTPError):
                    waiting.result()
        log = server.stderr.read()
        assert time.monotonic() - sent < 6 and server.returncode in (0, -signal.SIGTERM), log
        assert "shutting down" in log and "Traceback" not in log
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_body_too_large_and_a_body_not_json(client):
    error_of(client.post("/v1/translations", json={"input": "x" * 5000}), 413, "body", "--max-body-bytes")
    bad = client.post("/v1/translations", content=b"{not json", headers={"content-type": "application/json"})
    error_of(bad, 422, None, "JSON")


def test_a_full_queue_answers_503_with_retry_after(client, app):
    with app.state.queues["zh"].hold():
        for _ in range(CAPS.queue_size - 1):
            app.state.queues["zh"].busy += 1
        try:
            response = client.post("/v1/translations", json={"input": "Tom"})
        finally:
            app.state.queues["zh"].busy -= CAPS.queue_size - 1
    error_of(response, 503, None, "busy")
    assert response.headers["retry-after"] == "1"
    assert client.post("/v1/translations", json={"input": "Tom"}).status_code == 200


def test_a_failing_request_is_a_one_line_500_and_the_server_carries_on(client, app, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(app.state.models["zh"].wrapper.model, "encode", broken)  # the engine's prefill
    monkeypatch.setattr(app.state.models["zh"].wrapper, "translate_n_best", broken)  # the beam's batch
    error_of(client.post("/v1/translations", json={"input": "Tom"}), 500, None, "internal error")
    error_of(client.post("/v1/translations", json={"input": "Tom", "beam": 2}), 500, None, "internal error")
    monkeypatch.undo()
    assert client.post("/v1/translations", json={"input": "Tom"}).status_code == 200
    assert client.get("/health").status_code == 200


def test_a_client_that_disconnects_stops_its_stream(client, app, slow_lm):
    cancelled = metric(client, "vaswani_generations_cancelled_total", model="lm")
    tokens_before = metric(client, "vaswani_tokens_generated_total", model="lm")
    with client.stream(
        "POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 48, "stream": True}
    ) as r:
        next(line for line in r.iter_lines() if line.startswith("data: "))
    deadline = time.monotonic() + 20
    while metric(client, "vaswani_generations_cancelled_total", model="lm") < cancelled + 1:
        assert time.monotonic() < deadline, "generation went on after the client left"
        time.sleep(0.05)
    assert metric(client, "vaswani_tokens_generated_total", model="lm") == tokens_before  # never finished
    assert len(app.state.queues["lm"]) == 0


def test_metrics_count_requests_latency_tokens_and_batches(client):
    client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 5})
    assert metric(client, "vaswani_requests_total", endpoint="/v1/completions", status="200") >= 1
    assert metric(client, "vaswani_request_seconds_count", endpoint="/v1/completions") >= 1
    assert metric(client, "vaswani_tokens_generated_total", model="lm") >= 5
    assert metric(client, "vaswani_batch_size_count", model="lm") >= 1
    assert "vaswani_queue_length" in client.get("/metrics").text


def test_attention_of_a_translation(client):
    found = client.post("/v1/attention", json={"model": "zh", "input": "Tom chases Jerry"}).json()
    maps = {m["name"]: m for m in found["maps"]}
    cross = maps["cross-attention"]
    assert set(maps) == {"cross-attention", "decoder self-attention"} and found["output"] is not None
    layers, heads = len(cross["weights"]), len(cross["weights"][0])
    assert (layers, heads) == (1, 2) and len(cross["weights"][0][0]) == len(cross["queries"])
    assert all(abs(sum(row) - 1) < 1e-4 for row in cross["weights"][0][0])
    assert len(cross["weights"][0][0][0]) == len(cross["keys"])


def test_an_api_key_is_required_and_cors_is_off_unless_asked(runs):
    settings = ServeSettings(device="cpu", api_key="s3cret", cors_origins=("http://example.org",))
    with serving(create_app([runs[0]], settings)) as client:
        error_of(client.get("/v1/models"), 401, "authorization", "API key")
        error_of(client.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401, "authorization")
        assert client.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.get("/health").status_code == 200
        allowed = client.get("/health", headers={"Origin": "http://example.org"})
        assert allowed.headers["access-control-allow-origin"] == "http://example.org"
    closed = create_app([runs[0]], ServeSettings(device="cpu"))
    with serving(closed) as client:
        assert (
            "access-control-allow-origin"
            not in client.get("/health", headers={"Origin": "http://x.org"}).headers
        )


def test_a_run_that_does_not_load_stops_serve_before_it_binds(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing"), "--port", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing" in err and "Traceback" not in err


@pytest.fixture
def slow_lm(app, monkeypatch):
    """The served language model, 50 ms a forward pass: a generation lasts long enough to leave."""
    model = app.state.models["lm"].wrapper.model
    forward = model.forward

    def slow(*args, **kwargs):
        time.sleep(0.05)
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", slow)
    return model


def test_a_client_that_leaves_a_one_shot_completion_stops_it(client, app, slow_lm):
    cancelled = metric(client, "vaswani_generations_cancelled_total", model="lm")
    tokens = metric(client, "vaswani_tokens_generated_total", model="lm")
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 48}, timeout=0.5)
    deadline = time.monotonic() + 20
    while metric(client, "vaswani_generations_cancelled_total", model="lm") < cancelled + 1:
        assert time.monotonic() < deadline, "generation went on after the client left"
        time.sleep(0.05)
    assert metric(client, "vaswani_tokens_generated_total", model="lm") == tokens
    assert len(app.state.queues["lm"]) == 0


def test_a_client_that_leaves_a_one_shot_translation_stops_it(client, app, monkeypatch):
    translator = app.state.models["zh"].wrapper
    decode, steps = translator.model.decode, []

    def slow(*args, **kwargs):
        steps.append(1)
        time.sleep(0.2)
        return decode(*args, **kwargs)

    monkeypatch.setattr(translator.model, "decode", slow)
    translator.translate(["Tom chases Jerry"])
    whole, steps[:] = len(steps), []
    cancelled = metric(client, "vaswani_generations_cancelled_total", model="zh")
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/translations", json={"input": "Tom chases Jerry"}, timeout=0.5)
    deadline = time.monotonic() + 20
    while metric(client, "vaswani_generations_cancelled_total", model="zh") < cancelled + 1:
        assert time.monotonic() < deadline, "translation went on after the client left"
        time.sleep(0.05)
    assert len(steps) < whole and len(app.state.queues["zh"]) == 0


@pytest.fixture
def slow_zh(app, monkeypatch):
    """The served translation model, 30 ms a decoding step: concurrent requests overlap."""
    model = app.state.models["zh"].wrapper.model
    decode = model.decode

    def slow(*args, **kwargs):
        time.sleep(0.03)
        return decode(*args, **kwargs)

    monkeypatch.setattr(model, "decode", slow)
    return model


def test_concurrent_requests_share_a_batch_and_get_their_own_answers(client, app, slow_zh):
    """Greedy translations join one running batch (its steps decode several requests: batch
    sizes are the rows of each step) and each gets its own translation alone."""
    sentences = ["Tom chases Jerry", "I eat", "Mary reads a book now", "They are in the park"]
    alone = app.state.models["zh"].wrapper.translate(sentences, batch_size=1)
    steps = metric(client, "vaswani_batch_size_count", model="zh")
    rows = metric(client, "vaswani_batch_size_sum", model="zh")
    with ThreadPoolExecutor(len(sentences)) as pool:
        answers = list(pool.map(
            lambda s: client.post("/v1/translations", json={"input": s}).json()["data"][0]["text"], sentences
        ))  # fmt: skip
    assert answers == alone
    steps, rows = (
        metric(client, "vaswani_batch_size_count", model="zh") - steps,
        metric(client, "vaswani_batch_size_sum", model="zh") - rows,
    )
    assert rows > steps > 0  # batched: some steps decoded several requests


def test_sampled_translations_batched_equal_each_alone_and_stream_alike(client, app, slow_zh):
    translator = app.state.models["zh"].wrapper
    sentences = ["Tom chases Jerry", "I eat", "The birds are not running in the park now"]
    fields = {"temperature": 1.5, "top_k": 20, "seed": 7}
    alone = [translator.translate([s], DecodingConfig(**fields))[0] for s in sentences]
    assert alone != translator.translate(sentences)  # draws, not the argmax

    def streamed(sentence: str) -> str:
        return joined(events(client, "/v1/translations", {"input": sentence, "stream": True, **fields}))[0]

    with ThreadPoolExecutor(2 * len(sentences)) as pool:
        shots = pool.map(
            lambda s: client.post("/v1/translations", json={"input": s, **fields}).json(), sentences
        )
        streams = pool.map(streamed, sentences)
        assert [shot["data"][0]["text"] for shot in shots] == alone == list(streams)


def test_a_client_that_leaves_a_beam_search_stops_it(client, app, monkeypatch):
    translator = app.state.models["zh"].wrapper
    decode, steps = translator.model.decode, []

    def slow(*args, **kwargs):
        steps.append(1)
        time.sleep(0.2)
        return decode(*args, **kwargs)

    monkeypatch.setattr(translator.model, "decode", slow)
    body = {"input": "The birds are not running in the park now", "beam": 3, "early_stopping": "never"}
    translator.translate_n_best([body["input"]], DecodingConfig(beam=3, early_stopping="never"))
    whole, steps[:] = len(steps), []
    cancelled = metric(client, "vaswani_generations_cancelled_total", model="zh")
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/translations", json=body, timeout=0.5)
    deadline = time.monotonic() + 20
    while metric(client, "vaswani_generations_cancelled_total", model="zh") < cancelled + 1:
        assert time.monotonic() < deadline, "the beam search went on after the client left"
        time.sleep(0.05)
    assert len(steps) < whole / 2 and len(app.state.queues["zh"]) == 0
    monkeypatch.undo()
    assert client.post("/v1/translations", json={**body, "n_best": 2}).json()["data"][0]["hypotheses"]


def test_attention_of_a_prompt_labels_its_byte_level_tokens(client, app):
    found = client.post("/v1/attention", json={"model": "lm", "input": PROMPT + " 🐱"}).json()
    (self_attention,) = found["maps"]
    n = len(app.state.models["lm"].wrapper.tokenizer.encode(PROMPT + " 🐱"))
    assert self_attention["name"] == "self-attention" and len(self_attention["queries"]) == n
    weights = self_attention["weights"][0][0]
    assert all(w == 0 for row, i in zip(weights, range(n), strict=True) for w in row[i + 1 :])  # causal


def test_serve_compile_steps_both_engines_through_the_compiled_graphs(runs, client, monkeypatch):
    """``serve --compile``: completions and translations (greedy and seeded sampling, several at
    once) step through the compiled graphs on static caches (dynamo's "eager" backend here), with
    the texts of the server without it."""
    monkeypatch.setattr(compiled_decoding, "BACKEND", "eager")
    sentences = ["Tom chases Jerry", "The birds are not running in the park now"]
    bodies = [
        ("/v1/translations", {"model": "zh", "input": sentences}),
        ("/v1/translations", {"model": "zh", "input": sentences[1:], "temperature": 1.2, "seed": 5}),
        ("/v1/completions", {"model": "lm", "prompt": PROMPT, "max_tokens": 30}),
        ("/v1/completions", {"model": "lm", "prompt": PROMPT, "max_tokens": 20, "temperature": 1.5, "seed": 3,
                             "n": 3}),
    ]  # fmt: skip

    def texts(http) -> list[list[str]]:
        with ThreadPoolExecutor(len(bodies)) as pool:
            answers = list(pool.map(lambda b: http.post(b[0], json=b[1]).json(), bodies))
        return [[row["text"] for row in a.get("data", a.get("choices"))] for a in answers]

    app = create_app(list(runs), dataclasses.replace(CAPS, compile=True))
    with serving(app) as compiled_client:
        found = texts(compiled_client)
    assert found == texts(client) and len(found[3]) == 3
    for name in ("zh", "lm"):
        compiled = app.state.models[name].wrapper.compiled
        assert compiled is not None and compiled.failure is None and compiled.buckets, name
