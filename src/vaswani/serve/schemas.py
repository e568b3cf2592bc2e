"""The request and response bodies of every endpoint, as pydantic models (``/openapi.json`` shows them).

Requests forbid unknown fields (a misspelt option is a 422 naming it, never silently ignored) and
are strict: a value of the wrong JSON type is refused, never coerced (``"beam": "4"`` or
``"beam": true`` is no beam width, as ``--beam true`` is none), and the decoding fields are then
checked by ``DecodingConfig`` itself, the check of the command line's flags.
The caps of :class:`~vaswani.serve.settings.ServeSettings` are checked by the endpoints, since
they are the server's settings, not constants.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from vaswani.generation.config import DecodingConfig

Texts = str | list[str]


class Request(BaseModel):
    """The base of every request: unknown fields are refused, and no value is coerced."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), strict=True)

    model: str | None = Field(None, description="a served model's id; optional when one model is served")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    include_usage: bool = Field(False, description="a last chunk with the usage, its choices empty")


class Sampling(Request):
    """What ``/v1/completions`` and ``/v1/chat/completions`` share: the budget, sampling, stop
    strings, choices per prompt, seed and streaming."""

    max_tokens: int | None = Field(
        None,
        description="tokens to generate per completion (default 16 for completions, the server's "
        "--max-tokens for chat, or that cap if less); 0 with echo scores the prompt alone",
    )
    temperature: float | None = Field(None, description="sampling temperature (0 or unset: greedy)")
    top_p: float | None = Field(
        None, description="nucleus sampling: the smallest set reaching this probability"
    )
    top_k: int | None = Field(None, description="sample among the k most likely tokens")
    stop: str | list[str] | None = Field(None, description="the completion ends before the first of these")
    n: int = Field(1, description="completions per prompt")
    seed: int | None = Field(None, description="seed of the sampling (choice i draws from seed + i)")
    stream: bool = Field(False, description="server-sent events, ending in data: [DONE]")
    stream_options: StreamOptions | None = Field(None, description="include_usage: a last chunk with usage")


class CompletionRequest(Sampling):
    """OpenAI's ``/v1/completions`` body, for ``lm`` runs."""

    prompt: str | list[str] | list[int] | list[list[int]] = Field(
        description="a prompt or a list of prompts, as text or token ids"
    )
    logprobs: int | None = Field(
        None, description="log-probabilities of the tokens and of this many alternatives (0..20)"
    )
    echo: bool = Field(False, description="the prompt before the completion (scored, with logprobs)")


class CompletionLogprobs(BaseModel):
    """The legacy completions' log-probabilities: one entry per token of the choice's text
    (the prompt's first, with echo, whose first token has none)."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None
    logprobs: CompletionLogprobs | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] = Field(description="the message's text (or text parts)")
    name: str | None = None


class ChatCompletionRequest(Sampling):
    """OpenAI's ``/v1/chat/completions`` body, for ``lm`` runs: the conversation is rendered by
    the run's chat template (:mod:`vaswani.pipelines.chat`)."""

    messages: list[ChatMessage] = Field(description="the conversation so far")
    max_completion_tokens: int | None = Field(None, description="max_tokens by its newer name")
    logprobs: bool = Field(False, description="the log-probability of each token of the reply")
    top_logprobs: int | None = Field(None, description="alternatives per token, with logprobs (0..20)")


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: ChatLogprobs | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


def decoding_fields(leave_out: tuple[str, ...]) -> dict[str, Any]:
    """The fields of :class:`DecodingConfig` (type and default) by their names, less ``leave_out``:
    a request takes them as they are, and ``DecodingConfig`` itself validates them."""
    hints = get_type_hints(DecodingConfig)
    return {f.name: (hints[f.name], f.default) for f in fields(DecodingConfig) if f.name not in leave_out}


TranslationDecoding = create_model(
    "TranslationDecoding", __base__=Request, **decoding_fields(leave_out=("stop",))
)  # a language model's stop strings are no option of a translation


class TranslationRequest(TranslationDecoding):  # type: ignore[misc, valid-type]
    """``/v1/translations``: texts and the fields of ``DecodingConfig`` by their names (validated by
    ``DecodingConfig``); ``max_tokens`` is ``max_new_tokens``."""

    input: Texts = Field(description="a text or a list of texts")
    stream: bool = Field(False, description="server-sent events (greedy or sampled decoding of one text)")
    max_tokens: int | None = Field(None, description="the most tokens of a translation (max_new_tokens)")


class Hypothesis(BaseModel):
    text: str
    score: float


class Translation(BaseModel):
    index: int
    text: str
    hypotheses: list[Hypothesis] | None = Field(None, description="the n_best of beam search, best first")


class TranslationResponse(BaseModel):
    object: Literal["translation"] = "translation"
    model: str
    data: list[Translation]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    owned_by: str = "vaswani"
    task: str
    endpoints: list[str]


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    models: list[str]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None


class ErrorResponse(BaseModel):
    """Every error: one line, the field it is about, never a traceback."""

    error: ErrorBody


class TextsRequest(Request):
    """A text or a list of texts for one of the encoder tasks."""

    input: Texts = Field(description="a text or a list of texts")


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float]


class EmbeddingResponse(BaseModel):
    """OpenAI's ``/v1/embeddings`` shape: unit vectors, mean-pooled."""

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class Label(BaseModel):
    label: str
    score: float


class Classification(Label):
    index: int


class ClassificationResponse(BaseModel):
    object: Literal["classification"] = "classification"
    model: str
    data: list[Classification]


class FillMaskRequest(TextsRequest):
    """Texts with ``[MASK]`` where a word is to be predicted."""

    top_k: int = Field(5, description="candidates per [MASK]")


class Filled(BaseModel):
    index: int
    masks: list[list[Label]] = Field(description="the candidates of each [MASK], best first")


class FillMaskResponse(BaseModel):
    object: Literal["fill-mask"] = "fill-mask"
    model: str
    data: list[Filled]


class Tagged(BaseModel):
    index: int
    words: list[str]
    tags: list[str]


class TagResponse(BaseModel):
    object: Literal["tags"] = "tags"
    model: str
    data: list[Tagged]


class ImageRequest(Request):
    """Images as base64 (or a ``data:image/...;base64,`` URL); or POST the file itself with an
    ``image/*`` content type (``?model=`` and ``?top_k=`` in the query)."""

    image: str | list[str] = Field(description="an image or a list of images, base64")
    top_k: int = Field(1, description="classes per image")


class ImageClassification(BaseModel):
    index: int
    labels: list[Label] = Field(description="the top_k classes, best first")


class ImageResponse(BaseModel):
    object: Literal["image.classification"] = "image.classification"
    model: str
    data: list[ImageClassification]


class AttentionRequest(Request):
    input: str = Field(description="one text (a translation run: the source sentence)")


class AttentionMapBody(BaseModel):
    name: str
    query_axis: str
    key_axis: str
    queries: list[str]
    keys: list[str]
    weights: list[list[list[list[float]]]] = Field(description="(layers, heads, queries, keys)")


class AttentionResponse(BaseModel):
    object: Literal["attention"] = "attention"
    model: str
    title: str
    output: str | None = Field(None, description="the translation whose attention this is")
    maps: list[AttentionMapBody]
