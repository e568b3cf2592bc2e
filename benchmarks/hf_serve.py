"""The baseline server of ``serve_load.py``: a FastAPI app around Hugging Face ``generate`` with
``TextIteratorStreamer``, the way its documentation streams, on a model folder that
``vaswani export-hf`` wrote (GPT-2 or Llama).

``python benchmarks/hf_serve.py HF_DIR --port PORT`` serves ``POST /v1/completions`` (``prompt``,
``max_tokens``, ``stream``; greedy) and ``GET /health`` on 127.0.0.1. Each request runs
``generate`` in a thread of its own, as the streamer's examples do; a non-streamed answer carries
``usage.completion_tokens``, a stream ends with ``data: [DONE]``.

``python benchmarks/hf_serve.py --quick`` is a smoke run without a socket: a tiny lm run trained and
exported for it, one completion asked streamed and not, the two texts checked equal.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
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


def smoke() -> None:
    """``--quick``: the app of a tiny exported run, through FastAPI's test client."""
    import quick
    from fastapi.testclient import TestClient

    from vaswani.cli import main as vaswani

    with tempfile.TemporaryDirectory() as scratch:
        run = quick.train("lm", Path(scratch))
        if vaswani(["export-hf", str(run), str(Path(scratch, "hf"))]) != 0:
            raise SystemExit("hf_serve --quick: export-hf failed")
        client = TestClient(create_app(str(Path(scratch, "hf"))))
        body = {"prompt": "one two", "max_tokens": 8}
        whole = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
        events = client.post("/v1/completions", json={**body, "stream": True}).text.split("\n\n")
        pieces = [json.loads(e[6:])["choices"][0]["text"] for e in events if e.startswith("data: {")]
    print(f"streamed: {''.join(pieces)!r}, whole: {whole!r}")
    if "".join(pieces) != whole:
        raise SystemExit("hf_serve --quick: the streamed text differs from the whole one")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?")
    parser.add_argument("--port", type=int)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a tiny model, no socket")
    args = parser.parse_args()
    if args.quick:
        return smoke()
    if args.folder is None or args.port is None:
        parser.error("give FOLDER and --port (or --quick)")
    uvicorn.run(create_app(args.folder), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
