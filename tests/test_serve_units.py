"""The parts of ``vaswani serve`` that need no server: incremental detokenization, the batching
queue, the error lines, the settings, and generation's per-step hook."""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from types import SimpleNamespace

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_ids
from vaswani.models.transformer import Transformer
from vaswani.serve import limits
from vaswani.serve.batching import BatchQueue, QueueFull
from vaswani.serve.engine import Waker
from vaswani.serve.errors import validation_message, vaswani_param
from vaswani.serve.settings import ServeSettings, exposure_warning
from vaswani.serve.streaming import TextStream
from vaswani.tokenizer import LMTokenizer

CJK = "汤姆追逐杰瑞。猫和老鼠 🐱🐭 是好朋友！ 😀 café"


@pytest.fixture(scope="module")
def byte_level() -> LMTokenizer:
    # Few merges: most CJK characters and every emoji stay split across several byte tokens.
    return LMTokenizer.train(["hello world, the cat"] * 20, "bpe", 300)


def test_a_stream_never_cuts_a_character_and_joins_to_the_whole_text(byte_level):
    ids = byte_level.encode(CJK)
    partial = [byte_level.decode(ids[:n]) for n in range(1, len(ids))]
    assert any(text.endswith("\ufffd") for text in partial)  # per-token decoding would show U+FFFD
    stream = TextStream(byte_level.decode)
    pieces = [stream.push([token]) for token in ids] + [stream.finish()]
    assert "".join(pieces) == CJK
    assert not any("\ufffd" in piece for piece in pieces)
    assert sum(bool(piece) for piece in pieces) > 5  # it streams, not all at the end
    for size in (2, 3, 7):  # tokens pushed several at a time (a paced stream): the same text
        stream = TextStream(byte_level.decode)
        pieces = [stream.push(ids[i : i + size]) for i in range(0, len(ids), size)] + [stream.finish()]
        assert "".join(pieces) == CJK and not any("\ufffd" in piece for piece in pieces)


def test_a_stream_holds_back_a_stop_string_s_beginning_and_cuts_before_it(byte_level):
    ids = byte_level.encode("the cat sat. END and more")
    stream = TextStream(byte_level.decode, ("END",))
    pieces = []
    for token in ids:
        pieces.append(stream.push([token]))
        if stream.stopped:
            break
    pieces.append(stream.finish())
    assert "".join(pieces) == "the cat sat. " and stream.stopped
    assert not any("E" in piece for piece in pieces)


def test_the_queue_batches_jobs_of_one_key_and_splits_the_results():
    calls: list[list[int]] = []

    def run(jobs):
        calls.append([job.payload for job in jobs])
        return [job.payload * 10 for job in jobs]

    async def main():
        queue = BatchQueue(run, max_batch=3, max_wait_s=0.05, capacity=10)
        results = await asyncio.gather(*(queue.submit("k" if i < 4 else "other", i) for i in range(5)))
        return results

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert sorted(map(sorted, calls)) == [[0, 1, 2], [3], [4]]


def test_one_failing_job_never_fails_the_others_of_its_batch():
    def run(jobs):
        if any(job.payload < 0 for job in jobs):
            raise ValueError("negative")
        return [job.payload for job in jobs]

    async def main():
        queue = BatchQueue(run, max_batch=4, max_wait_s=0.05, capacity=10)
        return await asyncio.gather(*(queue.submit("k", p) for p in (1, -1, 2)), return_exceptions=True)

    first, failed, second = asyncio.run(main())
    assert (first, second) == (1, 2) and isinstance(failed, ValueError)


def test_a_failed_job_gives_its_memory_back_while_its_error_is_still_held():
    """Issue 34: a request that failed kept its tensors (the frames of its traceback), so the
    memory of a failed large request stayed taken."""
    held: list[weakref.ref[torch.Tensor]] = []

    def run(jobs):
        big = torch.zeros(1000)
        held.append(weakref.ref(big))
        raise RuntimeError("boom")

    async def failing() -> BaseException:
        queue = BatchQueue(run, 4, 0.0, 8)
        try:
            await queue.submit("key", 1)
        except RuntimeError as exc:
            return exc
        raise AssertionError("the job did not fail")

    error = asyncio.run(failing())
    assert str(error) == "boom" and error.__traceback__ is not None and held[0]() is None


def test_a_full_queue_refuses_more():
    async def main():
        queue = BatchQueue(lambda jobs: [0 for _ in jobs], max_batch=1, max_wait_s=0.0, capacity=1)
        with queue.hold(), pytest.raises(QueueFull):
            await queue.submit("k", 1)
        return await queue.submit("k", 1)  # room again once the stream has ended

    assert asyncio.run(main()) == 0


def test_error_lines_name_their_field():
    union = [{"loc": ("body", "input", "list[str]", 2), "msg": "Input should be a valid string", "type": "x"}]
    assert validation_message(union) == ("input.2: Input should be a valid string", "input")
    extra = [{"loc": ("body", "beams"), "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}]
    assert validation_message(extra) == ("beams: unknown field", "beams")
    assert vaswani_param("decoding.top_p must be in (0, 1], got 2") == "top_p"
    assert vaswani_param("prompt 1: 40 tokens do not fit") is None


def test_settings_refuse_bad_caps_and_warn_when_exposed():
    with pytest.raises(ConfigError, match="--max-batch"):
        ServeSettings(max_batch=0)
    assert exposure_warning(ServeSettings()) is None
    assert exposure_warning(ServeSettings(host="::1")) is None
    assert "without an API key" in exposure_warning(ServeSettings(host="0.0.0.0"))
    assert exposure_warning(ServeSettings(host="0.0.0.0", api_key="k")) is None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"max_wait_ms": math.inf}, ["--max-wait-ms", "0..10000"]),  # batches never answered
        ({"max_wait_ms": 1e12}, ["--max-wait-ms"]),
        ({"max_wait_ms": math.nan}, ["--max-wait-ms"]),
        ({"host": ""}, ["--host", "every interface"]),  # bound every interface, warned "on  without"
        ({"host": " 127.0.0.1"}, ["--host"]),
        ({"api_key": "s3cr€t"}, ["--api-key", "ASCII"]),  # no client could send it
        ({"api_key": "key\n"}, ["--api-key"]),
        ({"api_key": "  "}, ["--api-key (or VASWANI_API_KEY) is empty"]),
        ({"max_request_mib": math.inf}, ["--max-request-mib"]),
        ({"shutdown_s": -1.0}, ["--shutdown-s"]),
        ({"max_beam": 0}, ["--max-beam"]),
        ({"max_image_pixels": 0}, ["--max-image-pixels"]),
        ({"stream_interval_ms": -1.0}, ["--stream-interval-ms", "0..1000"]),
        ({"stream_interval_ms": math.nan}, ["--stream-interval-ms"]),
    ],
)
def test_settings_out_of_range_are_refused_in_one_line_naming_the_flag(fields, words):
    with pytest.raises(ConfigError) as caught:
        ServeSettings(**fields)
    assert "\n" not in str(caught.value) and all(word in str(caught.value) for word in words)


def test_serve_refuses_a_setting_out_of_range_before_loading(tmp_path, capsys):
    from vaswani.cli import main

    for flag, value in (("--max-wait-ms", "inf"), ("--host", ""), ("--api-key", "s3cr€t")):
        assert main(["serve", str(tmp_path / "missing"), flag, value]) == 2
        err = capsys.readouterr().err.strip()
        assert flag in err and "\n" not in err and "missing" not in err


def test_on_step_sees_each_step_of_a_translation_and_can_stop_it():
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, n_heads=2, d_ff=32, n_layers=1,
                      max_len=32, dropout=0.0)  # fmt: skip
    model = Transformer(cfg).eval()
    src = torch.tensor([[5, 6, 7, 8, 2]])
    whole = translate_ids(model, src, 1, 2, DecodingConfig(max_new_tokens=12)).tokens
    seen: list[int] = []

    def on_step(choice):
        seen.append(int(choice[0]))
        return len(seen) == 3

    stopped = translate_ids(model, src, 1, 2, DecodingConfig(max_new_tokens=12), on_step=on_step).tokens
    assert seen == whole[0, :3].tolist() and stopped.tolist() == whole[:, :3].tolist()


def test_the_free_memory_is_read_again_once_its_reading_is_old(monkeypatch):
    reads, clock = [], [100.0]
    monkeypatch.setattr(limits, "_free_readings", {})
    monkeypatch.setattr(limits.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(limits, "memory_available", lambda device: reads.append(device) or 1000 * len(reads))
    cpu, meta = torch.device("cpu"), torch.device("meta")
    assert limits.free_memory(cpu) == 1000 and len(reads) == 1
    clock[0] += limits.FREE_MEMORY_SECONDS / 2
    assert limits.free_memory(cpu) == 1000 and len(reads) == 1  # the reading still serves
    assert limits.free_memory(meta) == 2000 and reads == [cpu, meta]  # each device its own
    clock[0] += limits.FREE_MEMORY_SECONDS / 2
    assert limits.free_memory(cpu) == 3000 and reads == [cpu, meta, cpu]


def test_a_waker_wakes_for_tokens_only_while_they_are_awaited_and_always_at_an_end():
    """The engine's thread wakes a streaming coroutine for a new token only while it waits for one;
    a pause lets tokens gather (none wakes it), but a row's end cuts the pause short."""
    token, end = SimpleNamespace(finish_reason=None), SimpleNamespace(finish_reason="stop")

    async def elapsed(wake: Waker, row: SimpleNamespace, tokens: bool, seconds: float) -> float:
        started = time.monotonic()
        threading.Timer(0.02, wake, (row,)).start()  # from another thread, as the engine's
        await wake.until(lambda: False, tokens=tokens, seconds=seconds)
        return time.monotonic() - started

    async def check() -> None:
        wake = Waker()
        assert await elapsed(wake, token, tokens=True, seconds=30) < 15
        assert await elapsed(wake, token, tokens=False, seconds=0.5) >= 0.5
        assert await elapsed(wake, end, tokens=False, seconds=30) < 15
        await asyncio.wait_for(wake.until(lambda: True, tokens=False), 15)  # ready: no wait
        wake(token)  # between waits: no wake-up scheduled
        await asyncio.sleep(0.05)
        assert not wake.event.is_set()

    asyncio.run(check())
