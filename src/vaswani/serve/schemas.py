"""The request and response bodies of every endpoint, as pydantic models (``/docs`` shows them).

Requests forbid unknown fields (a misspelt option is a 422 naming it, never silently ignored).
The caps of :class:`~vaswani.serve.settings.ServeSettings` are checked by the endpoints, since
they are the server's settings, not constants.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Texts = str | list[str]


class Request(BaseModel):
    """The base of every request: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str | None = Field(None, description="a served model's id; optional when one model is served")


class CompletionRequest(Request):
    """OpenAI's ``/v1/completions`` body, for ``lm`` runs."""

    prompt: Texts = Field(description="a prompt or a list of prompts")
    max_tokens: int = Field(16, description="tokens to generate per completion")
    temperature: float | None = Field(None, description="sampling temperature (0 or unset: greedy)")
    top_p: float | None = Field(
        None, description="nucleus sampling: the smallest set reaching this probability"
    )
    top_k: int | None = Field(None, description="sample among the k most likely tokens")
    stop: str | list[str] | None = Field(None, description="the completion ends before the first of these")
    n: int = Field(1, description="completions per prompt")
    seed: int | None = Field(None, description="seed of the sampling generator")
    stream: bool = Field(False, description="server-sent events, ending in data: [DONE]")


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None
    logprobs: None = None


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


class TranslationRequest(Request):
    """``/v1/translations``: texts and the fields of ``DecodingConfig`` by their names (validated by
    ``DecodingConfig``); ``max_tokens`` is ``max_new_tokens``."""

    input: Texts = Field(description="a text or a list of texts")
    stream: bool = Field(False, description="server-sent events (greedy decoding of one text)")
    max_tokens: int | None = Field(None, description="the most tokens of a translation (max_new_tokens)")
    strategy: Literal["greedy", "beam", "sample"] | None = None
    beam: int = 1
    n_best: int = 1
    length_penalty: float | None = None
    length_penalty_kind: Literal["gnmt", "simple", "none"] | None = None
    early_stopping: bool | Literal["never"] | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    max_new_tokens: int | None = None
    max_len_a: float | None = None
    max_len_b: int | None = None
    use_cache: bool = True


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
