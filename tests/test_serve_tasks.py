"""``vaswani serve`` for the encoder tasks and images: each endpoint against a real server gives
what the run's wrapper gives directly."""

from __future__ import annotations

import base64
import io
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.helpers import encoder_run, tiny_classify_args, tiny_mlm_run, write_sentiment
from tests.serving import changed_settings, serving
from tests.test_image_task import tiny_args as tiny_image_args
from tests.test_tag import tiny_tag_args, write_tagged
from vaswani.cli import main
from vaswani.serve.app import create_app
from vaswani.serve.settings import ServeSettings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("serve-tasks")
    write_sentiment(folder, "train", 200, seed=0)
    write_sentiment(folder, "dev", 40, seed=1)
    assert (
        main(
            tiny_classify_args(folder / "train.tsv", folder / "dev.tsv", folder / "classify", "--epochs", "1")
        )
        == 0
    )
    write_tagged(folder / "train.conllu", 100, seed=0)
    write_tagged(folder / "dev.conllu", 20, seed=1)
    assert main(tiny_tag_args(folder, folder / "tag", "--epochs", "1")) == 0
    assert main(tiny_image_args(folder / "image", steps=2)) == 0
    return {
        "encoder": encoder_run(folder),
        "mlm": tiny_mlm_run(folder, "--max-steps", "20"),
        "classify": folder / "classify",
        "tag": folder / "tag",
        "image": folder / "image",
    }


@pytest.fixture(scope="module")
def app(runs):
    return create_app(list(runs.values()), ServeSettings(device="cpu", max_inputs=4))


@pytest.fixture(scope="module")
def client(app):
    with serving(app) as client:
        yield client


def wrapper(app, task):
    (served,) = [m for m in app.state.models.values() if m.task == task]
    return served.name, served.wrapper


def test_embeddings_are_the_encoder_s_vectors(client, app):
    name, encoder = wrapper(app, "encoder")
    found = client.post("/v1/embeddings", json={"input": ["one two", "three"]}).json()
    vectors = [row["embedding"] for row in found["data"]]
    np.testing.assert_allclose(vectors, encoder.embed(["one two", "three"]).numpy(), atol=1e-6)
    assert found["model"] == name and found["usage"]["prompt_tokens"] > 0


def test_classifications_are_the_classifier_s(client, app):
    _, classifier = wrapper(app, "classify")
    texts = ["a great film", "the plot was dull"]
    found = client.post("/v1/classifications", json={"input": texts}).json()["data"]
    expected = classifier.predict([(t,) for t in texts])
    assert [(row["label"], pytest.approx(row["score"], abs=1e-6)) for row in found] == expected


def test_fill_mask_gives_the_candidates_of_each_mask(client, app):
    _, mlm = wrapper(app, "mlm")
    text = "one one [MASK] one two [MASK]"
    (row,) = client.post("/v1/fill-mask", json={"input": text, "top_k": 3}).json()["data"]
    expected = mlm.fill_mask(text, 3)
    assert [
        [(c["label"], pytest.approx(c["score"], abs=1e-6)) for c in mask] for mask in row["masks"]
    ] == expected
    response = client.post("/v1/fill-mask", json={"input": "no mask here"})
    assert response.status_code == 422 and "[MASK]" in response.json()["error"]["message"]


def test_tags_are_the_tagger_s(client, app):
    _, tagger = wrapper(app, "tag")
    sentences = ["the dog runs", "a cat sleeps here"]
    found = client.post("/v1/tags", json={"input": sentences}).json()["data"]
    assert [row["words"] for row in found] == [s.split() for s in sentences]
    assert [row["tags"] for row in found] == tagger.tag([s.split() for s in sentences])


def digit_png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray((np.arange(64).reshape(8, 8) * 4).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_images_uploaded_or_in_base64_are_classified_alike(client, app, tmp_path):
    _, classifier = wrapper(app, "image")
    (tmp_path / "digit.png").write_bytes(digit_png())
    expected = classifier.predict([tmp_path / "digit.png"], 2)[0]
    uploaded = client.post("/v1/images/classifications?top_k=2", content=digit_png(),
                           headers={"content-type": "image/png"}).json()["data"][0]  # fmt: skip
    encoded = "data:image/png;base64," + base64.b64encode(digit_png()).decode()
    in_json = client.post("/v1/images/classifications", json={"image": [encoded], "top_k": 2}).json()["data"][
        0
    ]
    for row in (uploaded, in_json):
        assert [(c["label"], pytest.approx(c["score"], abs=1e-6)) for c in row["labels"]] == expected


def test_a_bad_image_is_a_422_naming_it_without_a_server_path(client):
    response = client.post("/v1/images/classifications", json={"image": "not base64!"})
    assert response.status_code == 422 and response.json()["error"]["param"] == "image"
    garbage = base64.b64encode(b"this is no image").decode()
    response = client.post("/v1/images/classifications", json={"image": garbage})
    error = response.json()["error"]
    assert response.status_code == 422 and "image-1: not a readable image" in error["message"]
    assert "/tmp" not in error["message"] and "\n" not in error["message"]
    assert "object at" not in error["message"]  # Pillow's repr of the bytes it read: not for the client
    response = client.post("/v1/images/classifications", json={"image": garbage, "top_k": 0})
    assert response.status_code == 422 and response.json()["error"]["param"] == "top_k"


def one_bit_png(width: int, height: int) -> bytes:
    """A 1-bit PNG of ``width`` x ``height`` black pixels: a few KB, however many pixels."""
    buffer = io.BytesIO()
    Image.new("1", (width, height)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_images_are_bounded_by_their_headers_before_they_are_decoded(client, app):
    """Issue 34: four requests of eight 17 KB PNGs of 12000 x 12000 pixels took 4.1 GB and ended in
    500s. Too many pixels for any image, in all, or too many images: refused before decoding."""
    bomb = base64.b64encode(one_bit_png(12000, 12000)).decode()
    started = time.monotonic()
    body = {"image": [bomb] * 4}
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: client.post("/v1/images/classifications", json=body), range(4)))
    for response in answers:
        error = response.json()["error"]
        assert response.status_code == 422 and error["param"] == "image" and "12000x12000" in error["message"]
    uploaded = client.post(
        "/v1/images/classifications", content=one_bit_png(12000, 12000), headers={"content-type": "image/png"}
    )
    assert uploaded.status_code == 422 and "image-1" in uploaded.json()["error"]["message"]
    assert time.monotonic() - started < 10
    big = base64.b64encode(one_bit_png(2000, 2000)).decode()  # 4 M pixels each
    small = base64.b64encode(digit_png()).decode()
    with changed_settings(app, max_image_pixels=5_000_000, max_images=3):
        response = client.post("/v1/images/classifications", json={"image": [big, big]})
        message = response.json()["error"]["message"]
        assert response.status_code == 413 and "--max-image-pixels 5000000" in message
        response = client.post("/v1/images/classifications", json={"image": [small] * 4})
        assert response.status_code == 422 and "--max-images 3" in response.json()["error"]["message"]
        assert client.post("/v1/images/classifications", json={"image": [small] * 3}).status_code == 200


def test_classify_image_refuses_an_image_of_too_many_pixels_in_one_line(runs, tmp_path, capsys):
    (tmp_path / "bomb.png").write_bytes(one_bit_png(12000, 12000))
    assert main(["classify-image", str(runs["image"]), str(tmp_path / "bomb.png"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "bomb.png" in err and "12000x12000" in err and "\n" not in err
    assert "DecompressionBombWarning" not in err


def test_an_empty_text_is_refused_as_the_cli_refuses_it(client, runs, capsys):
    for path in ("/v1/classifications", "/v1/embeddings", "/v1/tags"):
        response = client.post(path, json={"input": ["fine", " "]})
        assert response.status_code == 422 and response.json()["error"]["param"] == "input", path
    assert main(["classify", str(runs["classify"]), " ", "--device", "cpu"]) == 2
    assert "is empty" in capsys.readouterr().err


def test_the_wrong_endpoint_for_a_run_names_the_model(client):
    response = client.post("/v1/tags", json={"input": "a b", "model": "classify"})
    assert response.status_code == 422 and "classify run" in response.json()["error"]["message"]
    assert client.post("/v1/completions", json={"prompt": "a"}).status_code == 404
