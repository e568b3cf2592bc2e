"""The web page of ``vaswani serve`` (``serve/page.py``, ``serve/static/``): its routes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.helpers import tiny_lm_run
from vaswani.serve.app import create_app
from vaswani.serve.page import FILES, page_file
from vaswani.serve.settings import ServeSettings

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return [tiny_lm_run(tmp_path_factory.mktemp("page"), "--max-steps", "40")]


def test_the_page_and_its_files_are_served_as_utf8(runs: list[Path]) -> None:
    client = TestClient(create_app(runs, ServeSettings(device="cpu", api_key=KEY)))
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.content == page_file("index.html")
    for name, media_type in FILES.items():
        answer = client.get(f"/static/{name}")
        assert answer.status_code == 200 and answer.headers["content-type"] == media_type
    assert client.get("/static/page.py").status_code == 404
    assert client.get("/static/..%2Fpage.py").status_code == 404


def test_the_page_fetches_nothing_from_elsewhere() -> None:
    for name in FILES:
        text = page_file(name).decode("utf-8")
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), name
        assert "@import" not in text and "url(" not in text, name
