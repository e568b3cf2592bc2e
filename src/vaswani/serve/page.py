"""The web page at ``/``: one HTML file with its script and style sheet (``serve/static/``, package
data), served as they are: no build step, nothing fetched from elsewhere, so the page works offline.

``router`` (included by :func:`vaswani.serve.app.create_app`) serves ``/`` and ``/static/NAME`` for
the files of :data:`FILES` only. The page needs no API key to load; the key, if the server has one,
is entered in the page and sent as a bearer token with each ``/v1`` request.

The attention view numbers layers and heads from 0, as the PNGs of ``vaswani attention``
(:func:`vaswani.plots.attention_figure`), its ``--layers``/``--heads`` flags, the code and Hugging
Face's outputs do: one head has one number wherever it is shown or chosen.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

# The page's files and their media types (UTF-8 text, so that Chinese and emoji arrive intact).
FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

router = APIRouter(include_in_schema=False)


def page_file(name: str) -> bytes:
    """The bytes of the page's file ``name`` (one of :data:`FILES`)."""
    return (resources.files("vaswani.serve") / "static" / name).read_bytes()


def _response(name: str) -> Response:
    return Response(page_file(name), media_type=FILES[name], headers={"Cache-Control": "no-cache"})


@router.get("/")
async def index() -> Response:
    """The page."""
    return _response("index.html")


@router.get("/static/{name}")
async def static(name: str) -> Response:
    """The page's script and style sheet; any other name is a 404."""
    if name not in FILES:
        raise HTTPException(404, f"no such file: {name}")
    return _response(name)
