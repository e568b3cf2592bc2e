"""Property-based tests of ``vaswani serve`` from its own OpenAPI schema (issue 34): request bodies
drawn by Hypothesis from each endpoint's JSON schema in ``/openapi.json`` (:func:`drawn`: the
values the schema allows: the required fields only, some of the others, or one field of any JSON
value, or one the schema does not have) are sent to a real server of tiny runs (translation, lm,
classify, image).
No request may get a 5xx, and every answer matches its schema: the endpoint's response model for a
200, the error body otherwise. (``hypothesis-jsonschema``, which would draw the bodies, no longer
runs on this Hypothesis: ``'many' object has no attribute 'more'``; the subset of JSON Schema that
FastAPI writes is small enough to draw here.)"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import tiny_args, tiny_classify_args, tiny_lm_run, write_reverse_task, write_sentiment
from tests.serving import serving
from tests.test_image_task import tiny_args as tiny_image_args
from tests.test_serve_tasks import digit_png
from vaswani.cli import main
from vaswani.serve import schemas
from vaswani.serve.app import create_app
from vaswani.serve.settings import ServeSettings

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

pytestmark = pytest.mark.slow
CAPS = ServeSettings(
    device="cpu", max_tokens=12, max_inputs=3, max_beam=3, max_input_chars=200, max_wait_ms=1
)
EXAMPLES = 25  # per endpoint: about 200 requests in all, a few seconds
SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)  # fmt: skip
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
PNG = base64.b64encode(digit_png()).decode()  # a string that is an image, for the image endpoint
TEXTS = st.text(max_size=40) | st.sampled_from(
    ["", "   ", "a b c", "Tom chases Jerry [MASK]", "the cat", PNG]
)
INTEGERS = st.integers(0, 8) | st.integers() | st.sampled_from([-1, 0, 1, 2**63, 10**18])
NUMBERS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, 1e-300, 1e308, 0.5, -1.0])


def drawn(schema: dict[str, Any], spec: dict[str, Any]) -> Any:
    """A Hypothesis strategy of the JSON values ``schema`` (a part of the OpenAPI document ``spec``)
    allows: ``$ref``, ``anyOf``, ``const``, ``enum`` and the seven types; an object has its required
    properties and some of the others, or one of them (or an unknown one) set to any JSON value,
    which a strict server refuses with a 422."""
    if "$ref" in schema:
        node: Any = spec
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        return drawn(node, spec)
    if "anyOf" in schema:
        return st.one_of([drawn(option, spec) for option in schema["anyOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kinds = {
        "null": st.none(),
        "boolean": st.booleans(),
        "integer": INTEGERS,
        "number": NUMBERS | INTEGERS,
        "string": TEXTS,
    }
    kind = schema.get("type")
    if kind in kinds:
        return kinds[kind]
    if kind == "array":
        return st.lists(drawn(schema.get("items", {}), spec), max_size=4)
    if kind == "object":
        properties = {name: drawn(sub, spec) for name, sub in schema.get("properties", {}).items()}
        required = {name: properties.pop(name) for name in schema.get("required", ())}
        names = st.sampled_from([*required, *properties, "unknown_field"])
        some = st.fixed_dictionaries(required, optional=properties)
        noisy = st.builds(lambda body, name, value: {**body, name: value}, some, names, ANY_JSON)
        return st.fixed_dictionaries(required) | some | noisy  # the required only, some others, one bad
    return ANY_JSON


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("serve-schema")
    src, tgt = write_reverse_task(folder)
    assert main(tiny_args(src, tgt, folder / "translation")) == 0
    write_sentiment(folder, "train", 100, seed=0)
    write_sentiment(folder, "dev", 20, seed=1)
    classify = tiny_classify_args(
        folder / "train.tsv", folder / "dev.tsv", folder / "classify", "--epochs", "1"
    )
    assert main(classify) == 0
    assert main(tiny_image_args(folder / "image", steps=2)) == 0
    return [
        folder / "translation",
        tiny_lm_run(folder, "--max-steps", "5"),
        folder / "classify",
        folder / "image",
    ]


@pytest.fixture(scope="module")
def app(runs):
    return create_app(runs, CAPS)


@pytest.fixture(scope="module")
def client(app):
    with serving(app) as client:
        yield client


@pytest.fixture(scope="module")
def spec(client) -> dict[str, Any]:
    return client.get("/openapi.json").json()


# Each endpoint and one request it answers with a 200: the first example of each run (the others
# drawn may all be refused, as most bodies a schema allows are).
VALID: dict[str, dict[str, Any]] = {
    "/v1/translations": {"input": "a b c"},
    "/v1/completions": {"prompt": "the cat", "max_tokens": 4},
    "/v1/classifications": {"input": "the cat"},  # the encoder tasks' other endpoints check alike
    "/v1/attention": {"input": "a b c", "model": "translation"},
    "/v1/images/classifications": {"image": PNG},
}


@pytest.mark.parametrize("path", VALID)
def test_no_request_drawn_from_the_schema_gets_a_5xx_and_every_answer_matches_it(client, spec, path):
    body_schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    answer = spec["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    answer_model = getattr(schemas, answer["$ref"].rpartition("/")[2])  # the model the schema was made of
    statuses: set[int] = set()
    served = [card["id"] for card in client.get("/v1/models").json()["data"]]

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same requests on every run: a failure in CI is a failure here
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.example(body=VALID[path], model=None)
    @hypothesis.given(body=drawn(body_schema, spec), model=st.sampled_from([None, "", *served]))
    def check(body: Any, model: str | None) -> None:
        if model is not None and isinstance(body, dict):  # a served model: a request that may run
            body.pop("model", None)
            if model:
                body["model"] = model
        response = client.post(path, json=body)
        assert response.status_code < 500, (body, response.text)
        statuses.add(response.status_code)
        if response.headers["content-type"].startswith("text/event-stream"):  # a stream: no error in it
            found = [
                line.removeprefix("data: ")
                for line in response.text.splitlines()
                if line.startswith("data: ")
            ]
            assert found[-1] == "[DONE]" and not any('"error"' in chunk for chunk in found), response.text
            return
        model = answer_model if response.status_code == 200 else schemas.ErrorResponse
        model.model_validate(response.json())

    check()
    assert 200 in statuses and 422 in statuses, statuses  # requests that ran, and requests refused
