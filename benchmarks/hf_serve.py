"""The baseline server of ``serve_load.py``: a FastAPI app around Hugging Face ``generate`` with
``TextIteratorStreamer``, the way its documentation streams, on a model folder that
``vaswani export-hf`` wrote (GPT-2 or Llama).

``python benchmarks/hf_serve.py HF_DIR --port PORT`` serves ``POST /v1/completions`` (``prompt``,
``max_tokens``, ``stream``; greedy) and ``GET /health`` on 127.0.0.1. Each request runs
``generate`` in a thread of its own, as the streamer's examples do; a non-streamed answer carries
``usage.completion_tokens``, a stream ends with ``data: [DONE]``.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from typing import Any

import torch
import transformers
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel


class Completion(BaseModel):
    """The fields of OpenAI's ``/v1/completions`` that the benchmark sends."""

    prompt: str
    max_tokens: int = 64
    stream: bool = False


def create_app(folder: str) -> FastAPI:
    """The app of the model folder ``folder`` (see the module docstring)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    app = FastAPI(title="Hugging Face generate")

    def options(body: Completion) -> dict[str, Any]:
        ids = tokenizer(body.prompt, return_tensors="pt")
        return dict(
            **ids, max_new_tokens=body.max_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id
        )

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/completions")
    def completions(body: Completion) -> Any:
        kwargs = options(body)
        if not body.stream:
            with torch.no_grad():
                out = model.generate(**kwargs)[0, kwargs["input_ids"].shape[1] :]
            text = tokenizer.decode(out, skip_special_tokens=True)
            return {"choices": [{"text": text}], "usage": {"completion_tokens": int(out.shape[0])}}
        streamer = transformers.TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        thread = threading.Thread(target=_generate, args=(model, kwargs, streamer), daemon=True)
        thread.start()

        def events() -> Iterator[str]:
            for piece in streamer:
                if piece:
                    yield f"data: {json.dumps({'choices': [{'text': piece}]}, ensure_ascii=False)}\n\n"
            thread.join()
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def _generate(model: Any, kwargs: dict[str, Any], streamer: Any) -> None:
    with torch.no_grad():
        model.generate(**kwargs, streamer=streamer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(create_app(args.folder), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
