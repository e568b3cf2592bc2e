"""``/v1/chat/completions`` (lm runs, OpenAI's shape): a conversation rendered by the run's chat
template (:mod:`vaswani.pipelines.chat`) and continued by the model's continuous-batching engine,
one-shot or streamed, with the options of ``/v1/completions`` (``n``, ``stop``, ``seed``,
sampling) and chat's ``logprobs`` and ``top_logprobs``.

A stream opens each choice with ``delta.role``, sends its text as ``delta.content`` and ends it
with an empty delta and its ``finish_reason``; with ``stream_options.include_usage``, a last chunk
with no choices carries the usage; then ``data: [DONE]``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from vaswani.generation.logprobs import TokenLogprob
from vaswani.pipelines.chat import message_text
from vaswani.serve.completions import CLIENT_GONE, check_top, plan, unless_gone, usage_chunk, usage_of
from vaswani.serve.engine import Chunk, Prompt, complete_rows, stream_rows
from vaswani.serve.errors import ApiError
from vaswani.serve.logprobs import Decode, StreamedLogprobs, chat_logprobs, token_texts
from vaswani.serve.requests import served_model
from vaswani.serve.schemas import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
)
from vaswani.serve.security import require_key

router = APIRouter(dependencies=[Depends(require_key)])


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, tags=["generation"])
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    """Continue a conversation with a language model (its chat template, or a plain one)."""
    settings = request.app.state.settings
    served, queue = served_model(request, body.model, ["lm"])
    assert served.chat is not None  # every served lm run has one
    if not body.messages:
        raise ApiError(422, "messages: give at least one message", "messages")
    chars = sum(len(message_text(m.model_dump()["content"])) for m in body.messages)  # text parts too
    if chars > settings.max_input_chars:
        limit = f"the server's --max-input-chars {settings.max_input_chars}"
        raise ApiError(422, f"messages: {chars} characters exceed {limit}", "messages")
    if body.max_tokens is not None and body.max_completion_tokens is not None:
        raise ApiError(422, "max_tokens: give max_tokens or max_completion_tokens, not both", "max_tokens")
    if body.top_logprobs is not None and not body.logprobs:
        raise ApiError(422, "top_logprobs: needs logprobs true", "top_logprobs")
    top = check_top(body.top_logprobs or 0, "top_logprobs") if body.logprobs else None
    asked = body.max_tokens if body.max_tokens is not None else body.max_completion_tokens
    field = "max_tokens" if body.max_tokens is not None else "max_completion_tokens"
    if asked is not None and asked < 1:
        raise ApiError(422, f"{field}: must be at least 1, got {asked}", field)
    max_tokens = settings.max_tokens if asked is None else asked
    ids = served.chat.encode([m.model_dump(exclude_none=True) for m in body.messages])
    decoding = plan(body, served, settings, [ids], max_tokens, served.chat.stop)
    prompts: list[tuple[str, list[int]]] = [("", ids)]
    rows: list[Prompt] = [ids] * body.n
    decode = served.wrapper.tokenizer.decode
    ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    head = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": served.name}
    if body.stream:
        chunk = chat_chunk(head, decode)
        closing = usage_chunk(head, body, prompts)
        return stream_rows(request, served, queue, rows, decoding, body.n, chunk, top, closing=closing)
    found = await unless_gone(request, complete_rows(request, served, queue, rows, decoding, body.n, top))
    if found is None:
        return Response(status_code=CLIENT_GONE)
    choices = [
        ChatChoice(
            index=i,
            message=AssistantMessage(content=g.text),
            finish_reason=g.finish_reason,
            logprobs=None if top is None else chat_logprobs(decode, token_texts(decode, g.ids), g.logprobs),
        )
        for i, g in enumerate(found)
    ]
    usage = usage_of(prompts, found)
    return ChatCompletionResponse(**{**head, "object": "chat.completion"}, choices=choices, usage=usage)


def chat_chunk(head: dict[str, Any], decode: Decode) -> Chunk:
    """The chunks of a streamed chat completion: each choice's first delta names the assistant's
    role; log-probabilities, when asked for, come once their tokens' text is known."""
    states: dict[int, StreamedLogprobs] = {}

    def chunk(index: int, text: str, finish: str | None, scored: list[TokenLogprob]) -> dict[str, Any]:
        delta: dict[str, Any] = {} if finish is not None else {"content": text}
        if index not in states:
            delta = {"role": "assistant", **delta}
            states[index] = StreamedLogprobs(decode)
        texts, given = states[index].take(scored, ending=finish is not None)
        logprobs = chat_logprobs(decode, texts, given).model_dump() if given else None
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        return {**head, "choices": [choice]}

    return chunk
