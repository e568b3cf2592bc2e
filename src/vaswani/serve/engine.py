"""Continuous batching behind ``/v1/completions`` and ``/v1/translations``: one engine per served
lm run (:class:`~vaswani.generation.continuous.ContinuousEngine`) and per translation run
(:class:`~vaswani.generation.continuous_seq2seq.Seq2SeqEngine`), each in a thread of its own, so
that completions and greedy or sampled translations join and leave a running batch at step
boundaries and a long one does not hold back short ones (one-shot and streamed requests alike, up
to ``--max-batch`` rows). Beam search (n-best) stays batched per call by the model's
:class:`~vaswani.serve.batching.BatchQueue`, whose calls run in the engine's thread between two
steps (:class:`EngineThread`): one thread, and one pool of OpenMP workers, per model.

``engines_of(models, settings, metrics)`` starts them (``app.state.engines``: model id → engine),
their steps' rows counted as the model's batch sizes; :func:`complete_rows` awaits the results of
some inputs and :func:`stream_rows` streams them as server-sent events. Both count in the
model's queue (``queue.hold``: its length, and the 503 of a full queue), wait on the event loop
without blocking it (the engine wakes them), and cancel their rows when the client goes away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from vaswani.generation.config import DecodingConfig
from vaswani.generation.continuous import ContinuousEngine
from vaswani.generation.continuous_seq2seq import Seq2SeqEngine
from vaswani.generation.logprobs import TokenLogprob
from vaswani.generation.request import Request as EngineRequest
from vaswani.serve.batching import BatchQueue
from vaswani.serve.errors import log_failure
from vaswani.serve.loading import ServedModel
from vaswani.serve.metrics import ServeMetrics
from vaswani.serve.settings import ServeSettings
from vaswani.serve.streaming import DONE, TextStream, sse

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
Engine = ContinuousEngine | Seq2SeqEngine


Prompt = str | list[int]  # a text, or its token ids
Chunk = Callable[[int, str, str | None, list[TokenLogprob]], dict[str, Any]]
Closing = Callable[[list["Generation"]], dict[str, Any] | None]


@dataclass
class Generation:
    """One row's text, why it ended (``stop``: EOS or a stop string; ``length``: the budget), the
    tokens it generated (up to its end) and the tokens of its input (prompt or source); ``ids``
    are the generated ids (EOS left out) and ``logprobs`` theirs, when asked for."""

    text: str
    finish_reason: str
    tokens: int
    input_tokens: int
    ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)


class EngineThread(Executor):
    """The thread of a started engine as the executor of its model's batching queue: each call
    runs between two steps (:meth:`~vaswani.generation.continuous.BatchEngine.call`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self.engine.call(lambda: fn(*args, **kwargs))


def engines_of(
    models: dict[str, ServedModel], settings: ServeSettings, metrics: ServeMetrics
) -> dict[str, Engine]:
    """A started engine for each lm and translation run of ``models``, its steps' rows counted as
    batch sizes."""
    engines: dict[str, Engine] = {}
    for name, served in models.items():
        observe = metrics.batch.labels(name).observe
        if served.task == "lm":
            tok = served.wrapper.tokenizer
            engines[name] = ContinuousEngine(
                served.wrapper.model,
                tok.eos_id,
                tok.decode,
                tok.vocab_size,
                settings.max_batch,
                on_step=observe,
                compiled=served.wrapper.compiled,
            ).start()
        elif served.task == "translation":
            translator, tok = served.wrapper, served.wrapper.tgt_tok
            engines[name] = Seq2SeqEngine(
                translator.model,
                tok.bos_id,
                tok.eos_id,
                tok.decode,
                translator.suppressed,
                settings.max_batch,
                on_step=observe,
                compiled=translator.compiled,
            ).start()
    return engines


def submit(
    engine: Engine, served: ServedModel, text: Prompt, decoding: DecodingConfig,
    wake: Callable[[EngineRequest], None], logprobs: int | None = None,
) -> EngineRequest:  # fmt: skip
    """Queue one prompt (an lm run: a text or its ids; ``logprobs`` alternatives per token, None
    for no log-probabilities) or source text (a translation run); one too long (or a bad option)
    raises its one-line error here."""
    if isinstance(engine, Seq2SeqEngine):
        assert isinstance(text, str)
        return engine.submit(served.wrapper.src_tok.encode(text), decoding, on_event=wake)
    ids = served.wrapper.tokenizer.encode(text) if isinstance(text, str) else text
    return engine.submit(ids, decoding, on_event=wake, logprobs=logprobs)


def submit_rows(
    engine: Engine, served: ServedModel, prompts: list[Prompt], decoding: DecodingConfig, n: int,
    wake: Callable[[EngineRequest], None], logprobs: int | None,
) -> list[EngineRequest]:  # fmt: skip
    """Queue each of ``prompts`` (each ``n`` times in a row: with a seed, choice j draws from
    seed + j); if one is refused, those queued before it are cancelled."""
    rows: list[EngineRequest] = []
    try:
        for i, prompt in enumerate(prompts):
            seeded = decoding if decoding.seed is None else replace(decoding, seed=decoding.seed + i % n)
            rows.append(submit(engine, served, prompt, seeded, wake, logprobs))
    except BaseException:
        for row in rows:
            row.cancel()
        raise
    return rows


class Waker:
    """Wakes a coroutine of the running loop from the engine's thread (the engine's ``on_event``):
    at a row's end, and after a new token only while the coroutine waits for tokens
    (:meth:`until` with ``tokens``). A token that finds it busy or pausing costs the engine no
    wake-up: each one is a write to the loop's self-pipe and a hand-over of the GIL between the
    two threads, which took as long as a decoding step's own Python work for a small model."""

    def __init__(self) -> None:
        self.loop, self.event = asyncio.get_running_loop(), asyncio.Event()
        self.tokens = False  # whether a new token wakes the coroutine now

    def __call__(self, row: EngineRequest) -> None:
        if self.tokens or row.finish_reason is not None:  # raises once the loop is closed: the
            self.loop.call_soon_threadsafe(self.event.set)  # row is then cancelled

    async def until(self, ready: Callable[[], bool], tokens: bool, seconds: float | None = None) -> None:
        """Return once ``ready()`` (checked first), a row has ended, a new token came (with
        ``tokens``) or ``seconds`` have passed (None: no limit)."""
        self.event.clear()
        self.tokens = tokens
        try:
            if ready():
                return
            timer = None if seconds is None else self.loop.call_later(seconds, self.event.set)
            try:
                await self.event.wait()
            finally:
                if timer is not None:
                    timer.cancel()
        finally:
            self.tokens = False


async def ended(row: EngineRequest, wake: Waker) -> None:
    """Until ``row`` has ended (its failure raised), woken by ``wake`` at its end only."""
    while True:
        row.drain()
        if row.ended:
            return
        # its end is readable once queued (the engine sets the reason first, then queues the end)
        await wake.until(lambda: row.finish_reason is not None and row.unread, tokens=False)


def generation(row: EngineRequest) -> Generation:
    """The ended ``row`` as the server reports it (its EOS not counted as a generated token; a last
    character whose bytes the budget cut short left out, as :meth:`TextStream.finish` leaves it out
    of a stream, so that the one-shot text is the streamed one)."""
    ids = row.ids[:-1] if row.ids and row.ids[-1] == row.eos_id else row.ids
    reason = "stop" if row.finish_reason == "stop" else "length"
    text = row.text().removesuffix("\ufffd")
    return Generation(text, reason, len(ids), len(row.prompt), list(ids), row.logprobs[: len(ids)])


async def complete_rows(
    request: Request,
    served: ServedModel,
    queue: BatchQueue,
    prompts: list[Prompt],
    decoding: DecodingConfig,
    n: int,
    logprobs: int | None = None,
) -> list[Generation]:
    """The completion (or translation) of each of ``prompts`` (each ``n`` times in a row: with a
    seed, choice j draws from seed + j), through the model's engine; with ``logprobs``, each
    token's log-probability and as many alternatives."""
    engine: Engine = request.app.state.engines[served.name]
    with queue.hold():
        wake = Waker()
        rows: list[EngineRequest] = []
        try:
            rows = submit_rows(engine, served, prompts, decoding, n, wake, logprobs)
            for row in rows:
                await ended(row, wake)
        finally:
            gone = [row for row in rows if not row.ended]  # a client gone: they stop at the next step
            for row in gone:
                row.cancel()
            if gone:
                request.app.state.metrics.cancelled.labels(served.name).inc()
    done = [generation(row) for row in rows]
    request.app.state.metrics.tokens.labels(served.name).inc(sum(g.tokens for g in done))
    return done


def stream_rows(
    request: Request, served: ServedModel, queue: BatchQueue, prompts: list[Prompt],
    decoding: DecodingConfig, n: int, chunk: Chunk, logprobs: int | None = None,
    opening: Sequence[dict[str, Any]] = (), closing: Closing | None = None,
) -> StreamingResponse:  # fmt: skip
    """The completions (or translations) of ``prompts`` (each ``n`` times) streamed through the
    model's engine: the ``opening`` events, then ``chunk(index, text, finish_reason, logprobs)`` of
    each row as its text grows, in pieces never cut inside a character
    (:class:`~vaswani.serve.streaming.TextStream`; the log-probabilities of the tokens that made
    the piece, when asked for), its finish reason in its last chunk, then ``closing(generations)``
    (the usage, say) and ``data: [DONE]``. Rows stop when the client goes away."""
    engine: Engine = request.app.state.engines[served.name]
    metrics = request.app.state.metrics
    queue.check_room()
    pause = request.app.state.settings.stream_interval_ms / 1000
    wake = Waker()
    rows = submit_rows(engine, served, prompts, decoding, n, wake, logprobs)

    def unread() -> bool:  # a row has ids or its end to read
        return any(row.unread for row in rows)

    def ending() -> bool:  # a row has its end to read
        return any(row.unread and row.finish_reason is not None for row in rows)

    async def events() -> AsyncIterator[str]:
        texts = [TextStream(engine.decode, decoding.stop) for _ in rows]
        read = [0] * len(rows)  # ids read from each row
        done: list[Generation | None] = [None] * len(rows)
        with queue.hold(check=False):
            try:
                for payload in opening:
                    yield sse(payload)
                while any(g is None for g in done):
                    moved = False
                    for i, row in enumerate(rows):
                        if done[i] is not None:
                            continue
                        new = row.drain()
                        if new:
                            moved = True
                            kept = [j for j, t in enumerate(new) if t != row.eos_id]
                            piece = texts[i].push([new[j] for j in kept])
                            scored = row.logprobs[read[i] : read[i] + len(new)]
                            read[i] += len(new)
                            shown = [scored[j] for j in kept if j < len(scored)]
                            if piece or shown:
                                yield sse(chunk(i, piece, None, shown))
                        if row.ended:
                            moved = True
                            rest, done[i] = texts[i].finish(), generation(row)
                            if rest:
                                yield sse(chunk(i, rest, None, []))
                            yield sse(chunk(i, "", done[i].finish_reason, []))
                    if not moved:
                        await wake.until(unread, tokens=True)
                    elif pause and any(g is None for g in done):  # let tokens gather (up to a row's end)
                        await wake.until(ending, tokens=False, seconds=pause)
                finished = [g for g in done if g is not None]
                metrics.tokens.labels(served.name).inc(sum(g.tokens for g in finished))
                last = closing(finished) if closing is not None else None
                if last is not None:
                    yield sse(last)
                yield DONE
            except Exception as exc:  # the stream has begun: end it with one line, never a traceback
                log_failure(request.url.path, exc, request.app.state.settings.debug)
                yield sse({"error": {"message": "internal error: generation failed", "type": "server_error"}})
            finally:
                gone = [row for row in rows if not row.ended]
                for row in gone:
                    row.cancel()
                if gone:
                    metrics.cancelled.labels(served.name).inc()

    return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)
