"""The web page of ``vaswani serve`` (``serve/page.py``, ``serve/static/``) in a real browser.

Headless Chromium from the system's packages (``chromium``, ``chromium-driver``: ``.ci/run``
installs them), driven by Selenium through the driver at a fixed path, so that Selenium Manager
never downloads a browser or a driver; the server is the real app on 127.0.0.1, serving a tiny
English → Chinese run trained on sentences of the embedded grammar corpus and a tiny language model.

``VASWANI_PAGE_SCREENSHOT=docs/images/serve.png python -m pytest tests/test_serve_page.py`` also
saves the page after a translation, as docs/serving.md shows it.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from tests.helpers import write
from tests.serving import serving
from vaswani.cli import main
from vaswani.data.grammar import generate_pairs
from vaswani.inspect.attention import AttentionMap
from vaswani.plots import attention_figure
from vaswani.serve.app import create_app
from vaswani.serve.page import FILES, page_file
from vaswani.serve.settings import ServeSettings

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None)
CHROMEDRIVER = "/usr/bin/chromedriver"
NAMES = "(Tom|Jerry|Mary|John|Lucy|Jack|Lily|Mike|Anna|David|Emma|Peter)"
SCREENSHOT = os.environ.get("VASWANI_PAGE_SCREENSHOT")
KEY = "s3cret-key"
LINE = "汤姆追逐杰瑞 🐱🐭 שלום עולם 😀"
PROMPT = "汤姆"
HEBREW = "שלום"

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    NO_BROWSER = None if CHROMIUM and Path(CHROMEDRIVER).exists() else "chromium or chromium-driver missing"
except ImportError:
    NO_BROWSER = "selenium missing (the dev extra)"

pytestmark = pytest.mark.slow
browser_test = pytest.mark.skipif(NO_BROWSER is not None, reason=f"browser test: {NO_BROWSER}")


# -- the runs and the server ----------------------------------------------------------------------


def translation_run(folder: Path) -> Path:
    """An English → Chinese run that translates "Tom chases Jerry" to 汤姆追逐杰瑞: trained for a
    few seconds on the grammar corpus's sentences of the form "NAME verb NAME" (that one eight
    times over, so that a tiny model learns it for sure)."""
    pattern = re.compile(rf"{NAMES} \w+ {NAMES}")
    pairs = generate_pairs(1) * 8 + [p for p in generate_pairs(60_000) if pattern.fullmatch(p[0])]
    src = write(folder / "train.en", "".join(f"{en}\n" for en, _ in pairs))
    tgt = write(folder / "train.zh", "".join(f"{zh}\n" for _, zh in pairs))
    out = folder / "zh"
    args = [
        "train", "translation", "--src", str(src), "--tgt", str(tgt), "--valid-src", str(src),
        "--valid-tgt", str(tgt), "--out", str(out), "--vocab-size", "200", "--d-model", "64",
        "--heads", "2", "--d-ff", "128", "--layers", "2", "--max-steps", "150", "--batch-tokens", "400",
        "--lr", "3e-3", "--warmup", "20", "--eval-every", "1000", "--no-bf16", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    return out


def lm_run(folder: Path) -> Path:
    """A byte-level BPE language model of one line in Chinese, emoji and Hebrew (right to left), so
    that what the page shows streamed has characters that span several tokens."""
    text = write(folder / "line.txt", f"{LINE}\n" * 150)
    args = [
        "train", "lm", "--text", str(text), "--out", str(folder / "lm"), "--tokenizer", "bpe",
        "--vocab-size", "270", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1",
        "--max-len", "32", "--batch-tokens", "256", "--max-steps", "150", "--lr", "1e-2", "--warmup", "5",
        "--eval-every", "1000", "--quiet", "--no-bf16",
    ]  # fmt: skip
    assert main(args) == 0
    return folder / "lm"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("page")
    return [translation_run(folder), lm_run(folder)]


def paced(model: Any, seconds: float = 0.03) -> None:
    """Make each forward pass and decoding step of ``model`` take ``seconds`` longer, so that a
    stream's events reach the page apart, as a real model's do, rather than in one network read
    (the tiny runs here decode a sentence in a few milliseconds on quiet cores)."""
    for name in ("forward", "decode"):
        original = getattr(model, name, None)
        if original is not None:

            def slow(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                time.sleep(seconds)
                return _original(*args, **kwargs)

            setattr(model, name, slow)


@pytest.fixture(scope="module")
def server(runs: list[Path]) -> Iterator[httpx.Client]:
    app = create_app(runs, ServeSettings(device="cpu"))
    for served in app.state.models.values():
        paced(served.wrapper.model)
    with serving(app) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,1150"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


# -- helpers of the browser tests -----------------------------------------------------------------

WATCH = """
const output = document.getElementById(arguments[0]);
window.seen = [];
new MutationObserver(() => window.seen.push(output.textContent))
  .observe(output, {childList: true, characterData: true, subtree: true});
"""


def open_page(browser: Any, url: str) -> WebDriverWait:
    browser.get(url)
    wait = WebDriverWait(browser, 30)
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#model option"))
    return wait


def run_and_watch(browser: Any, wait: WebDriverWait, output: str, button: str) -> list[str]:
    """Click ``button`` and return every text ``output`` showed while it streamed, in order."""
    browser.execute_script(WATCH, output)
    browser.find_element(By.ID, button).click()
    wait.until(lambda b: b.find_element(By.ID, output).get_attribute("data-done") == "true")
    return [text for text in browser.execute_script("return window.seen") if text]


def assert_streamed(seen: list[str], final: str) -> None:
    """The output grew in several steps, each a prefix of the next, to ``final``."""
    assert len(seen) >= 2, seen
    assert seen[-1] == final
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(seen))
    assert "\ufffd" not in final


def heatmap(browser: Any, wait: WebDriverWait) -> tuple[list[Any], int]:
    """The attention view's cells and its number of token labels (queries and keys), once drawn."""
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#attention-view rect.cell"))
    cells = browser.find_elements(By.CSS_SELECTOR, "#attention-view rect.cell")
    return cells, len(browser.find_elements(By.CSS_SELECTOR, "#attention-view text:not(.axis)"))


# -- the browser tests ----------------------------------------------------------------------------


@browser_test
def test_the_page_streams_a_translation_and_draws_its_attention(server: httpx.Client, browser: Any) -> None:
    wait = open_page(browser, str(server.base_url) + "/")
    models = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#model option")]
    assert models == ["zh (translation)", "lm (lm)"]
    assert browser.find_element(By.ID, "generate-panel").is_displayed() is False

    seen = run_and_watch(browser, wait, "translation", "translate-button")
    assert_streamed(seen, "汤姆追逐杰瑞")
    one_shot = server.post("/v1/translations", json={"model": "zh", "input": "Tom chases Jerry"}).json()
    assert one_shot["data"][0]["text"] == seen[-1]

    cells, n_labels = heatmap(browser, wait)
    answer = server.post("/v1/attention", json={"model": "zh", "input": "Tom chases Jerry"}).json()
    assert (
        browser.find_element(By.ID, "attention-of").text
        == answer["title"]
        == "Tom chases Jerry → 汤姆追逐杰瑞"
    )
    maps = answer["maps"]
    kinds = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#attention-kind option")]
    assert kinds == [m["name"] for m in maps]
    cross = maps[0]
    assert len(cells) == len(cross["queries"]) * len(cross["keys"])
    assert n_labels == len(cross["queries"]) + len(cross["keys"])
    first = cells[0].find_element(By.TAG_NAME, "title").get_attribute("textContent")
    assert first == f"{cross['queries'][0]} → {cross['keys'][0]}: {cross['weights'][0][0][0][0]:.3f}"
    ActionChains(browser).move_to_element(cells[1]).perform()
    hovered = browser.find_element(By.ID, "attention-weight").text
    assert hovered == cells[1].find_element(By.TAG_NAME, "title").get_attribute("textContent")
    if SCREENSHOT:
        browser.save_screenshot(SCREENSHOT)

    last_layer, last_head = cross["weights"][-1][-1], len(cross["weights"][-1]) - 1
    Select(browser.find_element(By.ID, "attention-layer")).select_by_index(len(cross["weights"]) - 1)
    Select(browser.find_element(By.ID, "attention-head")).select_by_index(last_head)
    layers = [o.text for o in Select(browser.find_element(By.ID, "attention-layer")).options]
    assert layers == [str(i) for i in range(len(cross["weights"]))]  # from 0, as the PNGs number them
    cells, _ = heatmap(browser, wait)
    drawn = [float(c.get_attribute("data-weight")) for c in cells]
    assert drawn == pytest.approx([w for row in last_layer for w in row])


@browser_test
def test_the_page_streams_a_generation(server: httpx.Client, browser: Any) -> None:
    wait = open_page(browser, str(server.base_url) + "/")
    Select(browser.find_element(By.ID, "model")).select_by_value("lm")
    assert browser.find_element(By.ID, "translate-panel").is_displayed() is False
    for field, value in (("prompt", PROMPT), ("max-tokens", "16")):
        browser.find_element(By.ID, field).clear()
        browser.find_element(By.ID, field).send_keys(value)

    seen = run_and_watch(browser, wait, "completion", "generate-button")
    body = {"model": "lm", "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    assert_streamed(seen, server.post("/v1/completions", json=body).json()["choices"][0]["text"])
    answer = server.post("/v1/attention", json={"model": "lm", "input": PROMPT}).json()
    cells, n_labels = heatmap(browser, wait)
    (causal,) = answer["maps"]
    assert (len(cells), n_labels) == (len(causal["queries"]) * len(causal["keys"]), 2 * len(causal["keys"]))
    assert browser.find_element(By.ID, "attention-of").text == PROMPT
    assert browser.find_element(By.ID, "status").text == ""

    browser.find_element(By.ID, "prompt").clear()
    browser.find_element(By.ID, "prompt").send_keys(HEBREW)
    seen = run_and_watch(browser, wait, "completion", "generate-button")
    body = {"model": "lm", "prompt": HEBREW, "max_tokens": 16, "temperature": 0}
    assert_streamed(seen, server.post("/v1/completions", json=body).json()["choices"][0]["text"])
    direction = "return getComputedStyle(document.getElementById(arguments[0])).direction"
    assert browser.execute_script(direction, "completion") == "rtl"  # dir="auto" on Hebrew
    assert browser.execute_script(direction, "prompt") == "rtl"

    browser.find_element(By.ID, "max-tokens").send_keys("0000")  # 160000: over the server's cap
    browser.find_element(By.ID, "generate-button").click()
    wait.until(lambda b: "error" in b.find_element(By.ID, "status").get_attribute("class"))
    assert browser.find_element(By.ID, "status").text.startswith("max_tokens")


@browser_test
def test_the_api_key_is_entered_once_in_the_page(runs: list[Path], browser: Any) -> None:
    with serving(create_app(runs, ServeSettings(device="cpu", api_key=KEY))) as guarded:
        browser.get(str(guarded.base_url) + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda b: b.find_element(By.ID, "status").text)
        assert not browser.find_elements(By.CSS_SELECTOR, "#model option")
        assert "API key" in browser.find_element(By.ID, "status").text
        browser.find_element(By.ID, "api-key").send_keys(KEY)
        browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#model option"))
        seen = run_and_watch(browser, wait, "translation", "translate-button")
        assert seen[-1] == "汤姆追逐杰瑞"
        browser.refresh()  # the key is kept for the session
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#model option"))
        browser.execute_script("sessionStorage.clear()")


# -- the page's routes, without a browser ----------------------------------------------------------


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


def test_the_page_numbers_layers_and_heads_from_0_as_the_pngs_do() -> None:
    """The same head has one number on the page and in ``vaswani attention``'s PNG titles."""
    script = page_file("app.js").decode("utf-8")
    assert "new Option(String(i), String(i))" in script  # each option shows its index
    assert "layer ${layer}, head ${head}" in script
    maps = [AttentionMap("self-attention", torch.full((2, 3, 1, 1), 1.0), ["a"], ["a"], "query", "key")]
    titles = [ax.get_title() for ax in attention_figure(maps).axes if ax.images]
    assert titles[0] == "layer 0 · head 0" and titles[-1] == "layer 1 · head 2"
