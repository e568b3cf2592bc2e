"""``/v1/completions`` (lm runs, OpenAI's shape) and ``/v1/translations`` (translation runs).

A completion, and a greedy or sampled translation, one-shot or streamed, joins the running batch
of its model's continuous-batching engine (:mod:`vaswani.serve.engine`). A beam search (n-best)
goes through its model's batching queue (``queue.submit((kind, decoding), inputs)``: requests
with the same decoding options share one call). Pieces arrive as server-sent events,
``finish_reason`` exactly once, in the last chunk, then ``data: [DONE]``. When the client goes
away, generation (beam search too) stops at the next step.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import torch
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from vaswani.generation.config import DecodingConfig
from vaswani.generation.logprobs import MAX_TOP, TokenLogprob
from vaswani.serve.batching import BatchQueue
from vaswani.serve.engine import Chunk, Generation, Prompt, complete_rows, stream_rows
from vaswani.serve.errors import ApiError
from vaswani.serve.limits import check_beam, check_memory, check_tokens
from vaswani.serve.loading import ServedModel
from vaswani.serve.logprobs import Decode, StreamedLogprobs, completion_logprobs, token_texts
from vaswani.serve.requests import check_max_tokens, decoding_of, served_model, texts
from vaswani.serve.schemas import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    Hypothesis,
    Sampling,
    Translation,
    TranslationRequest,
    TranslationResponse,
    Usage,
)
from vaswani.serve.security import require_key
from vaswani.serve.settings import ServeSettings

router = APIRouter(dependencies=[Depends(require_key)])
DEFAULT_MAX_TOKENS = 16  # OpenAI's default of max_tokens
CLIENT_GONE = 499  # the status logged for a request whose client left before its answer
DISCONNECT_POLL_S = 0.1


@router.post("/v1/completions", response_model=CompletionResponse, tags=["generation"])
async def completions(body: CompletionRequest, request: Request) -> Any:
    """Complete a prompt (or prompts, as text or token ids) with a language model; greedy unless
    sampling is asked for; with ``logprobs``, each token's log-probability; with ``echo``, the
    prompt first (scored too: ``max_tokens`` 0 scores the prompt alone)."""
    settings = request.app.state.settings
    served, queue = served_model(request, body.model, ["lm"])
    decode = served.wrapper.tokenizer.decode
    prompts = prompt_ids(body.prompt, served, settings)
    top = check_top(body.logprobs, "logprobs")
    if body.max_tokens == 0 and not body.echo:
        raise ApiError(422, "max_tokens: 0 generates nothing; it needs echo (the prompt alone)", "max_tokens")
    if body.max_tokens == 0 and body.stream:
        raise ApiError(422, "stream: max_tokens 0 scores the prompt: ask for it without stream", "stream")
    max_tokens = DEFAULT_MAX_TOKENS if body.max_tokens is None else body.max_tokens
    decoding = plan(body, served, settings, [ids for _, ids in prompts], max_tokens)
    rows: list[Prompt] = [ids for _, ids in prompts for _ in range(body.n)]
    ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    head = {"id": ident, "object": "text_completion", "created": created, "model": served.name}
    echoed = await echoes(request, served, queue, prompts, top) if body.echo else []
    if body.stream:
        return stream_rows(
            request,
            served,
            queue,
            rows,
            decoding,
            body.n,
            completion_chunk(head, decode),
            logprobs=top,
            opening=[{**head, "choices": [c.model_dump() for c in echoed]}] if echoed else (),
            closing=usage_chunk(head, body, prompts),
        )
    if max_tokens == 0:
        done = [Generation("", "length", 0, len(ids)) for _, ids in prompts for _ in range(body.n)]
    else:
        completing = complete_rows(request, served, queue, rows, decoding, body.n, top)
        found = await unless_gone(request, completing)
        if found is None:
            return Response(status_code=CLIENT_GONE)
        done = found
    choices = []
    for i, g in enumerate(done):
        prefix = echoed[i // body.n] if echoed else None
        text = (prefix.text if prefix else "") + g.text
        logprobs = None
        if top is not None:
            offset = len(prefix.text) if prefix else 0
            logprobs = completion_logprobs(decode, token_texts(decode, g.ids), g.logprobs, offset)
            if prefix is not None and prefix.logprobs is not None:
                logprobs = joined_logprobs(prefix.logprobs, logprobs)
        choices.append(CompletionChoice(index=i, text=text, finish_reason=g.finish_reason, logprobs=logprobs))
    return CompletionResponse(**head, choices=choices, usage=usage_of(prompts, done))


def prompt_ids(
    value: str | list[str] | list[int] | list[list[int]], served: ServedModel, settings: ServeSettings
) -> list[tuple[str, list[int]]]:
    """Each prompt's text and ids: a text is encoded, ids are decoded (an empty prompt starts a
    document); at most ``--max-inputs`` of them, each within the caps."""
    tok = served.wrapper.tokenizer
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        value = [value]  # type: ignore[list-item]  # one prompt of ids
    items = [value] if isinstance(value, str) else list(value)
    if not items:
        raise ApiError(422, "prompt: give at least one prompt", "prompt")
    if len(items) > settings.max_inputs:
        cap = settings.max_inputs
        raise ApiError(422, f"prompt: {len(items)} prompts exceed the server's --max-inputs {cap}", "prompt")
    strings = [item for item in items if isinstance(item, str)]
    if strings:  # the character caps of text prompts
        texts(strings, settings, "prompt", may_be_empty=True)
    vocab = tok.vocab_size
    prompts = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            prompts.append((item, tok.encode(item)))
        else:
            if not all(isinstance(t, int) and 0 <= t < vocab for t in item):
                raise ApiError(422, f"prompt.{i}: token ids must be in [0, {vocab})", "prompt")
            prompts.append((tok.decode(item), list(item)))
    return prompts


def check_top(value: int | None, field: str) -> int | None:
    """The number of alternatives asked for (None: no log-probabilities), within 0..MAX_TOP."""
    if value is not None and not 0 <= value <= MAX_TOP:
        raise ApiError(422, f"{field}: must be in 0..{MAX_TOP}, got {value}", field)
    return value


def plan(
    body: Sampling, served: ServedModel, settings: ServeSettings, prompts: list[list[int]], max_tokens: int,
    stop: tuple[str, ...] = (),
) -> DecodingConfig:  # fmt: skip
    """The decoding of a completion or chat request (``stop`` added to the request's), once its
    budget, choices, prompts and memory are within the server's caps."""
    check_max_tokens(max_tokens or None, settings)
    if not 1 <= body.n <= settings.max_inputs:
        raise ApiError(
            422, f"n: must be in 1..{settings.max_inputs} (the server's --max-inputs), got {body.n}", "n"
        )
    if len(prompts) * body.n > settings.max_inputs:
        raise ApiError(
            422, f"n: {len(prompts)} prompts × n={body.n} exceed --max-inputs {settings.max_inputs}", "n"
        )
    own = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    sampled = bool(body.temperature) or body.top_p is not None or body.top_k is not None
    decoding = decoding_of(
        {
            "temperature": body.temperature if sampled else None,
            "top_p": body.top_p,
            "top_k": body.top_k,
            "seed": body.seed,
            "max_new_tokens": max(max_tokens, 1),
            "stop": own + tuple(s for s in stop if s not in own),
        }
    )
    lengths = [len(ids) for ids in prompts]
    check_tokens(lengths, settings, "prompt")
    longest = max(lengths) + max_tokens
    check_memory(served, settings, len(prompts) * body.n, 0, longest, "n" if body.n > 1 else "max_tokens")
    if body.stream_options is not None and not body.stream:
        raise ApiError(422, "stream_options: only with stream", "stream_options")
    return decoding


async def echoes(
    request: Request, served: ServedModel, queue: BatchQueue, prompts: list[tuple[str, list[int]]],
    top: int | None,
) -> list[CompletionChoice]:  # fmt: skip
    """Each prompt as an echoed choice: its text and, with ``top``, its tokens scored by the model
    (the model's queue, batched with other scoring)."""
    scored: list[Any] = [None] * len(prompts)
    if top is not None:
        found = await unless_gone(request, queue.submit(("score", top), [ids for _, ids in prompts]))
        if found is None:
            raise ApiError(CLIENT_GONE, "the client went away", "prompt")
        scored = found
    decode = served.wrapper.tokenizer.decode
    return [
        CompletionChoice(
            index=i,
            text=text,
            finish_reason=None,
            logprobs=None if top is None else completion_logprobs(decode, token_texts(decode, ids), found),
        )
        for i, ((text, ids), found) in enumerate(zip(prompts, scored, strict=True))
    ]


def joined_logprobs(first: CompletionLogprobs, then: CompletionLogprobs) -> CompletionLogprobs:
    """The log-probabilities of an echoed prompt followed by those of its completion."""
    return CompletionLogprobs(
        tokens=first.tokens + then.tokens,
        token_logprobs=first.token_logprobs + then.token_logprobs,
        top_logprobs=first.top_logprobs + then.top_logprobs,
        text_offset=first.text_offset + then.text_offset,
    )


def usage_of(prompts: list[tuple[str, list[int]]], done: list[Generation]) -> Usage:
    """The tokens of the prompts (each counted once, however many choices) and of every choice."""
    prompt_tokens = sum(len(ids) for _, ids in prompts)
    completion_tokens = sum(g.tokens for g in done)
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )


def usage_chunk(
    head: dict[str, Any], body: Sampling, prompts: list[tuple[str, list[int]]]
) -> Callable[[list[Generation]], dict[str, Any] | None]:
    """The last chunk of a stream that asked for its usage (``stream_options.include_usage``):
    no choices, the usage."""

    def closing(done: list[Generation]) -> dict[str, Any] | None:
        if body.stream_options is None or not body.stream_options.include_usage:
            return None
        return {**head, "choices": [], "usage": usage_of(prompts, done).model_dump()}

    return closing


def completion_chunk(head: dict[str, Any], decode: Decode) -> Chunk:
    """The chunks of a streamed completion: each choice's new text and, when asked for, the
    log-probabilities of its tokens whose text is known (their offsets continuing the choice's)."""
    states: dict[int, StreamedLogprobs] = {}
    offsets: dict[int, int] = {}

    def chunk(index: int, text: str, finish: str | None, scored: list[TokenLogprob]) -> dict[str, Any]:
        state = states.setdefault(index, StreamedLogprobs(decode))
        texts, given = state.take(scored, ending=finish is not None)
        logprobs = None
        if given:
            logprobs = completion_logprobs(decode, texts, given, offsets.get(index, 0)).model_dump()
            offsets[index] = offsets.get(index, 0) + sum(len(t) for t in texts)
        choice = {"index": index, "text": text, "finish_reason": finish, "logprobs": logprobs}
        return {**head, "choices": [choice]}

    return chunk


@router.post("/v1/translations", response_model=TranslationResponse, tags=["generation"])
async def translations(body: TranslationRequest, request: Request) -> Any:
    """Translate a text (or texts): greedy by default, beam search and n-best, sampling; greedy and
    sampled translations stream."""
    settings = request.app.state.settings
    served, queue = served_model(request, body.model, ["translation"])
    inputs = texts(body.input, settings)
    check_max_tokens(body.max_tokens, settings)
    check_max_tokens(body.max_new_tokens, settings, "max_new_tokens")
    if body.max_tokens is not None and body.max_new_tokens is not None:
        raise ApiError(422, "max_tokens: give max_tokens or max_new_tokens, not both", "max_tokens")
    fields = body.model_dump(exclude={"model", "input", "stream", "max_tokens"})
    fields["max_new_tokens"] = body.max_new_tokens or body.max_tokens
    decoding = decoding_of(fields)
    check_beam(decoding.beam, settings)
    lengths = [len(served.wrapper.src_tok.encode(text)) for text in inputs]
    check_tokens(lengths, settings, "input")
    budget = decoding.target_budget(torch.tensor(lengths), served.wrapper.model.config.max_len)
    rows = len(inputs) * decoding.beam
    field = "beam" if decoding.beam > 1 else "input"
    check_memory(served, settings, rows, max(lengths), int(budget.max()), field)
    if body.stream:
        if decoding.strategy == "beam" or len(inputs) != 1:
            raise ApiError(422, "stream: streaming serves greedy or sampled decoding of one input", "stream")

        def chunk(text: str, finish: str | None) -> dict[str, Any]:
            return {
                "object": "translation.chunk",
                "model": served.name,
                "index": 0,
                "text": text,
                "finish_reason": finish,
            }

        return stream_rows(request, served, queue, inputs, decoding, 1, lambda i, t, f, _: chunk(t, f))
    if decoding.strategy != "beam":
        done: list[Generation] | None = await unless_gone(
            request, complete_rows(request, served, queue, inputs, decoding, 1)
        )
        if done is None:
            return Response(status_code=CLIENT_GONE)
        return TranslationResponse(
            model=served.name, data=[Translation(index=i, text=g.text) for i, g in enumerate(done)]
        )
    results = await unless_gone(request, queue.submit(("translate", decoding), inputs))
    if results is None:
        return Response(status_code=CLIENT_GONE)
    many = decoding.n_best > 1
    data = [
        Translation(index=i, text=best[0].text, hypotheses=hypotheses(best) if many else None)
        for i, best in enumerate(results)
    ]
    return TranslationResponse(model=served.name, data=data)


async def unless_gone(request: Request, work: Awaitable[Any]) -> Any:
    """The result of ``work``, or None once the client has gone (``work`` is then cancelled, which
    tells the batch it is in; so it is when this request is cancelled, as SIGTERM's shutdown does
    past ``--shutdown-s``)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                return None
    finally:  # the client gone, or this request cancelled (the server shutting down)
        task.cancel()


def hypotheses(best: list[Any]) -> list[Hypothesis]:
    """The n-best list of one text as the response shows it."""
    return [Hypothesis(text=h.text, score=h.score) for h in best]
