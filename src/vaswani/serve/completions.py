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
from collections.abc import Awaitable
from typing import Any

import torch
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from vaswani.serve.engine import Generation, complete_rows, stream_completion
from vaswani.serve.errors import ApiError
from vaswani.serve.limits import check_beam, check_memory, check_tokens
from vaswani.serve.requests import check_max_tokens, decoding_of, served_model, texts
from vaswani.serve.schemas import (
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    Hypothesis,
    Translation,
    TranslationRequest,
    TranslationResponse,
    Usage,
)
from vaswani.serve.security import require_key

router = APIRouter(dependencies=[Depends(require_key)])
DEFAULT_MAX_TOKENS = 16  # OpenAI's default of max_tokens
CLIENT_GONE = 499  # the status logged for a request whose client left before its answer
DISCONNECT_POLL_S = 0.1


@router.post("/v1/completions", response_model=CompletionResponse, tags=["generation"])
async def completions(body: CompletionRequest, request: Request) -> Any:
    """Complete a prompt (or prompts) with a language model; greedy unless sampling is asked for."""
    settings = request.app.state.settings
    served, queue = served_model(request, body.model, ["lm"])
    prompts = texts(body.prompt, settings, "prompt", may_be_empty=True)
    check_max_tokens(body.max_tokens, settings)
    max_tokens = min(DEFAULT_MAX_TOKENS, settings.max_tokens) if body.max_tokens is None else body.max_tokens
    if not 1 <= body.n <= settings.max_inputs:
        raise ApiError(
            422, f"n: must be in 1..{settings.max_inputs} (the server's --max-inputs), got {body.n}", "n"
        )
    if len(prompts) * body.n > settings.max_inputs:
        raise ApiError(
            422, f"n: {len(prompts)} prompts × n={body.n} exceed --max-inputs {settings.max_inputs}", "n"
        )
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    sampled = bool(body.temperature) or body.top_p is not None or body.top_k is not None
    decoding = decoding_of(
        {
            "temperature": body.temperature if sampled else None,
            "top_p": body.top_p,
            "top_k": body.top_k,
            "seed": body.seed,
            "max_new_tokens": max_tokens,
            "stop": stop,
        }
    )
    lengths = [len(served.wrapper.tokenizer.encode(p)) for p in prompts]
    check_tokens(lengths, settings, "prompt")
    longest = max(lengths) + max_tokens
    check_memory(served, settings, len(prompts) * body.n, 0, longest, "n" if body.n > 1 else "max_tokens")
    rows = [p for p in prompts for _ in range(body.n)]
    ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    head = {"id": ident, "object": "text_completion", "created": created, "model": served.name}
    if body.stream:
        if len(rows) != 1:
            raise ApiError(422, "stream: streaming serves one prompt and n=1", "stream")

        def chunk(text: str, finish: str | None) -> dict[str, Any]:
            return {
                **head,
                "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            }

        return stream_completion(request, served, queue, rows[0], decoding, chunk)
    completing = complete_rows(request, served, queue, rows, decoding, body.n)
    done: list[Generation] | None = await unless_gone(request, completing)
    if done is None:
        return Response(status_code=CLIENT_GONE)
    choices = [
        CompletionChoice(index=i, text=g.text, finish_reason=g.finish_reason) for i, g in enumerate(done)
    ]
    prompt_tokens = sum(g.input_tokens for g in done[:: body.n])
    completion_tokens = sum(g.tokens for g in done)
    usage = Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )
    return CompletionResponse(**head, choices=choices, usage=usage)


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

        return stream_completion(request, served, queue, inputs[0], decoding, chunk)
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
