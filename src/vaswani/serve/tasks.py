"""The endpoints of the encoder tasks, images and attention: ``/v1/embeddings`` (encoder runs),
``/v1/classifications`` (classify), ``/v1/fill-mask`` (mlm), ``/v1/tags`` (tag),
``/v1/images/classifications`` (image: base64 in JSON, or the file itself as the body) and
``/v1/attention`` (lm and translation: the weights of one input, per layer and head, with its
tokens). Each goes through its model's batching queue (:mod:`vaswani.serve.work`).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError

from vaswani.data.images import image_size
from vaswani.errors import DataError
from vaswani.inspect.attention import AttentionMap, titled_lm_attention, translation_attention
from vaswani.serve.errors import ApiError, validation_message
from vaswani.serve.requests import served_model, texts
from vaswani.serve.schemas import (
    AttentionMapBody,
    AttentionRequest,
    AttentionResponse,
    Classification,
    ClassificationResponse,
    Embedding,
    EmbeddingResponse,
    Filled,
    FillMaskRequest,
    FillMaskResponse,
    ImageClassification,
    ImageRequest,
    ImageResponse,
    Label,
    Tagged,
    TagResponse,
    TextsRequest,
    Usage,
)
from vaswani.serve.security import require_key
from vaswani.serve.settings import ServeSettings

router = APIRouter(dependencies=[Depends(require_key)])
MAX_TOP_K = 100


@router.post("/v1/embeddings", response_model=EmbeddingResponse, tags=["encoders"])
async def embeddings(body: TextsRequest, request: Request) -> Any:
    """Sentence vectors of an encoder run (mean-pooled, unit length)."""
    served, queue = served_model(request, body.model, ["encoder"])
    inputs = texts(body.input, request.app.state.settings)
    vectors = await queue.submit(("embed", None), inputs)
    used = sum(len(ids) for ids in served.wrapper.tokenizer.encode_batch(inputs))
    data = [Embedding(index=i, embedding=v) for i, v in enumerate(vectors)]
    return EmbeddingResponse(data=data, model=served.name, usage=Usage(prompt_tokens=used, total_tokens=used))


@router.post("/v1/classifications", response_model=ClassificationResponse, tags=["encoders"])
async def classifications(body: TextsRequest, request: Request) -> Any:
    """The most likely label of each text, and its probability."""
    served, queue = served_model(request, body.model, ["classify"])
    found = await queue.submit(("classify", None), texts(body.input, request.app.state.settings))
    data = [Classification(index=i, label=label, score=p) for i, (label, p) in enumerate(found)]
    return ClassificationResponse(model=served.name, data=data)


@router.post("/v1/fill-mask", response_model=FillMaskResponse, tags=["encoders"])
async def fill_mask(body: FillMaskRequest, request: Request) -> Any:
    """The ``top_k`` candidates of each ``[MASK]`` of each text."""
    served, queue = served_model(request, body.model, ["mlm"])
    check_top_k(body.top_k)
    inputs = texts(body.input, request.app.state.settings)
    found = await queue.submit(("fill_mask", (body.top_k,)), inputs)
    data = [Filled(index=i, masks=[labels(choices) for choices in masks]) for i, masks in enumerate(found)]
    return FillMaskResponse(model=served.name, data=data)


@router.post("/v1/tags", response_model=TagResponse, tags=["encoders"])
async def tags(body: TextsRequest, request: Request) -> Any:
    """The tag of each word (words split at whitespace) of each text."""
    served, queue = served_model(request, body.model, ["tag"])
    sentences = [text.split() for text in texts(body.input, request.app.state.settings)]
    if not all(sentences):
        raise ApiError(422, "input: a text without words has nothing to tag", "input")
    found = await queue.submit(("tag", None), sentences)
    data = [Tagged(index=i, words=w, tags=t) for i, (w, t) in enumerate(zip(sentences, found, strict=True))]
    return TagResponse(model=served.name, data=data)


IMAGE_BODY = {"requestBody": {"content": {
    "application/json": {"schema": ImageRequest.model_json_schema()},
    "image/*": {"schema": {"type": "string", "format": "binary"}},
}}}  # fmt: skip


@router.post("/v1/images/classifications", response_model=ImageResponse, tags=["images"],
             openapi_extra=IMAGE_BODY)  # fmt: skip
async def image_classifications(request: Request) -> Any:
    """The ``top_k`` classes of each image (an image run)."""
    settings = request.app.state.settings
    if request.headers.get("content-type", "").split(";")[0].strip() == "application/json":
        try:
            body = ImageRequest.model_validate(json.loads(await request.body()))
        except json.JSONDecodeError:
            raise ApiError(422, "the body is not valid JSON") from None
        except ValidationError as exc:
            raise ApiError(422, *validation_message(list(exc.errors()))) from None
        name, top_k = body.model, body.top_k
        images = [
            decode_image(text, i)
            for i, text in enumerate(texts(body.image, settings, "image", count_only=True))
        ]
    else:
        name, top_k = request.query_params.get("model"), request.query_params.get("top_k", "1")
        if not top_k.isdigit():
            raise ApiError(422, f"top_k: must be a whole number, got {top_k!r}", "top_k")
        top_k, images = int(top_k), [await request.body()]
        if not images[0]:
            raise ApiError(
                422, "image: the body is empty (POST the image file, or JSON with base64)", "image"
            )
    served, queue = served_model(request, name, ["image"])
    check_top_k(top_k)
    check_images(images, settings)
    with tempfile.TemporaryDirectory() as folder:
        paths = [Path(folder) / f"image-{i + 1}" for i in range(len(images))]
        for path, data in zip(paths, images, strict=True):
            path.write_bytes(data)
        try:
            found = await queue.submit(("images", (top_k,)), paths)
        except DataError as exc:  # the message names the temporary file: name the image instead
            raise ApiError(422, "image: " + str(exc).replace(f"{folder}/", ""), "image") from None
    data = [ImageClassification(index=i, labels=labels(best)) for i, best in enumerate(found)]
    return ImageResponse(model=served.name, data=data)


@router.post("/v1/attention", response_model=AttentionResponse, tags=["attention"])
async def attention(body: AttentionRequest, request: Request) -> Any:
    """The attention weights of one input, per layer and head, with its tokens (a translation
    run: the decoder's cross- and self-attention while it translates the input)."""
    served, queue = served_model(request, body.model, ["lm", "translation"])
    text = texts(body.input, request.app.state.settings)[0]
    if served.task == "translation":
        maps, output = await queue.call(translation_attention, served.wrapper, text)
        title = f"{text} → {output}"
    else:
        (maps, title), output = await queue.call(titled_lm_attention, served.wrapper, text), None
    return AttentionResponse(model=served.name, title=title, output=output, maps=[map_body(m) for m in maps])


def map_body(found: AttentionMap) -> AttentionMapBody:
    return AttentionMapBody(
        name=found.name,
        query_axis=found.query_axis,
        key_axis=found.key_axis,
        queries=found.queries,
        keys=found.keys,
        weights=found.weights.tolist(),
    )


def labels(choices: list[tuple[str, float]]) -> list[Label]:
    return [Label(label=label, score=p) for label, p in choices]


def check_top_k(top_k: int) -> None:
    if not 1 <= top_k <= MAX_TOP_K:
        raise ApiError(422, f"top_k: must be in 1..{MAX_TOP_K}, got {top_k}", "top_k")


def check_images(images: list[bytes], settings: ServeSettings) -> None:
    """At most ``--max-images`` images (a 422), of ``--max-image-pixels`` pixels in all (a 413),
    read from their headers before anything is decoded; an image no decoder reads, or one past the
    pixels any image may have (:data:`~vaswani.data.images.MAX_PIXELS`), is a 422 naming it."""
    most, budget = settings.max_images, settings.max_image_pixels
    if len(images) > most:
        raise ApiError(422, f"image: {len(images)} images exceed the server's --max-images {most}", "image")
    total = 0
    for i, data in enumerate(images):
        try:
            width, height = image_size(io.BytesIO(data), f"image-{i + 1}")
        except DataError as exc:
            raise ApiError(422, f"image: {exc}", "image") from None
        total += width * height
    if total > budget:
        raise ApiError(
            413, f"image: {total} pixels in all exceed the server's --max-image-pixels {budget}", "image"
        )


def decode_image(text: str, index: int) -> bytes:
    """The bytes of a base64 image (a ``data:`` URL's prefix dropped)."""
    if text.startswith("data:"):
        text = text.partition(",")[2]
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(422, f"image.{index}: not base64", "image") from None
