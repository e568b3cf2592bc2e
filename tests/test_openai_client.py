"""The official ``openai`` Python client against a live ``vaswani serve``: completions and chat
completions, one-shot and streamed (the same text, finish reasons and log-probabilities; the usage
in the last streamed chunk), log-probabilities equal to a scoring pass of the model over the whole
text, echo scoring the prompt alone, ``n`` choices with a seed, a chat template of an imported
Llama run (the reply: the model's greedy continuation of the template's ids), and errors as the
client's exceptions (skipped without the ``openai`` package)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.hf import write_lm_run
from tests.serving import serving
from tests.test_chat import HEADER_STYLE, folder_with_template
from vaswani.config import ModelConfig
from vaswani.generation.config import DecodingConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.logprobs import prompt_logprobs
from vaswani.generation.sampling import generate
from vaswani.interop import import_hf
from vaswani.pipelines.chat import ChatTemplate
from vaswani.pipelines.lm import LanguageModel
from vaswani.serve.app import create_app
from vaswani.serve.settings import ServeSettings
from vaswani.tokenizer import LMTokenizer

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow

TEXT = "the cat sat on the mat. 汤姆追逐杰瑞 🐱🐭 naïve café\n"
PROMPT = "the cat 汤姆"
SETTINGS = ServeSettings(device="cpu", max_tokens=24, max_inputs=4, max_input_chars=400, max_wait_ms=20)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("openai")
    tokenizer = LMTokenizer.train([TEXT] * 30, "bpe", 300)
    cfg = ModelConfig(
        arch="decoder_only", tgt_vocab_size=tokenizer.vocab_size, d_model=32, n_heads=2, d_ff=64,
        n_decoder_layers=2, max_len=64, position="rope", norm="pre_rmsnorm", dropout=0.0,
    )  # fmt: skip
    write_lm_run(folder / "plain", cfg, tokenizer, seed=1)
    llama = import_hf(folder_with_template(folder, "llama3", HEADER_STYLE, as_file=False), folder / "llama")
    return folder / "plain", llama


@pytest.fixture(scope="module")
def client(runs):
    with serving(create_app(list(runs), SETTINGS)) as http:
        yield openai.OpenAI(base_url=f"{http.base_url}/v1", api_key="unused", max_retries=0)


def greedy_ids(lm: LanguageModel, prompt: list[int], steps: int) -> list[int]:
    """The greedy continuation of ``prompt`` by the generation loop (not the server's engine),
    up to and without EOS."""
    mask = torch.ones(1, len(prompt), dtype=torch.bool)
    vocab, eos = lm.tokenizer.vocab_size, lm.tokenizer.eos_id
    decoding = DecodingConfig(max_new_tokens=steps)
    next_logits = lm_next_logits(lm.model, mask, True, vocab)
    out = generate(next_logits, torch.tensor([prompt]), steps, eos, eos, decoding)
    ids = out.tokens[0].tolist()
    return ids[: ids.index(eos)] if eos in ids else ids


def streamed(stream) -> tuple[dict[int, str], dict[int, list], dict[int, str], object]:
    """The text, log-probabilities and finish reason of each choice of a stream, and its usage."""
    texts: dict[int, str] = {}
    logprobs: dict[int, list] = {}
    finish: dict[int, str] = {}
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            assert chunk.choices == []  # the usage comes last, alone
            usage = chunk.usage
        for choice in chunk.choices:
            piece = choice.delta.content if hasattr(choice, "delta") else choice.text
            texts[choice.index] = texts.get(choice.index, "") + (piece or "")
            if choice.logprobs is not None:
                chat = hasattr(choice, "delta")
                found = choice.logprobs.content if chat else choice.logprobs.token_logprobs
                logprobs.setdefault(choice.index, []).extend(found)
            if choice.finish_reason is not None:
                assert choice.index not in finish
                finish[choice.index] = choice.finish_reason
    return texts, logprobs, finish, usage


def test_completions_streamed_equal_one_shot_and_logprobs_are_the_models(client, runs):
    ask = {"model": "plain", "prompt": PROMPT, "max_tokens": 12, "logprobs": 3}
    one = client.completions.create(**ask)
    (choice,) = one.choices
    texts, logprobs, finish, usage = streamed(
        client.completions.create(**ask, stream=True, stream_options={"include_usage": True})
    )
    assert texts == {0: choice.text} and finish == {0: choice.finish_reason}
    assert logprobs[0] == pytest.approx(choice.logprobs.token_logprobs, abs=1e-6)
    assert usage == one.usage
    assert one.usage.total_tokens == one.usage.prompt_tokens + one.usage.completion_tokens
    lm = LanguageModel.load(runs[0])
    prompt = lm.tokenizer.encode(PROMPT)
    ids = greedy_ids(lm, prompt, 12)
    assert one.usage.completion_tokens == len(ids) and "".join(choice.logprobs.tokens) == choice.text
    scored = prompt_logprobs(lm.model, prompt + ids, top=3, vocab_size=lm.tokenizer.vocab_size)[len(prompt) :]
    assert choice.logprobs.token_logprobs == pytest.approx([s.logprob for s in scored], abs=1e-4)
    for alternatives, s in zip(choice.logprobs.top_logprobs, scored, strict=True):
        best = {lm.tokenizer.decode([t]): lp for t, lp in s.top}
        assert alternatives == pytest.approx(best, abs=1e-4)
    offsets = choice.logprobs.text_offset
    assert offsets == [sum(len(t) for t in choice.logprobs.tokens[:i]) for i in range(len(offsets))]


def test_echo_with_no_new_tokens_scores_the_prompt(client, runs):
    found = client.completions.create(model="plain", prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)
    (choice,) = found.choices
    lm = LanguageModel.load(runs[0])
    prompt = lm.tokenizer.encode(PROMPT)
    assert choice.text == PROMPT and "".join(choice.logprobs.tokens) == PROMPT
    assert choice.logprobs.token_logprobs[0] is None
    scored = prompt_logprobs(lm.model, prompt, top=1, vocab_size=lm.tokenizer.vocab_size)[1:]
    assert choice.logprobs.token_logprobs[1:] == pytest.approx([s.logprob for s in scored], abs=1e-4)
    assert found.usage.prompt_tokens == len(prompt) and found.usage.completion_tokens == 0
    # echo with new tokens: the prompt's entries, then the completion's, offsets running on
    both = client.completions.create(model="plain", prompt=PROMPT, max_tokens=4, echo=True, logprobs=0)
    both = both.choices[0]
    alone = client.completions.create(model="plain", prompt=PROMPT, max_tokens=4).choices[0]
    assert both.text == PROMPT + alone.text
    assert both.logprobs.text_offset[len(prompt)] == len(PROMPT)
    echoed = both.logprobs.token_logprobs[: len(prompt)]
    assert echoed[0] is None and echoed[1:] == pytest.approx(choice.logprobs.token_logprobs[1:], abs=1e-6)


def test_prompt_as_token_ids_equals_the_text(client, runs):
    lm = LanguageModel.load(runs[0])
    ids = lm.tokenizer.encode(PROMPT)
    by_ids = client.completions.create(model="plain", prompt=ids, max_tokens=6)
    by_text = client.completions.create(model="plain", prompt=PROMPT, max_tokens=6)
    assert by_ids.choices[0].text == by_text.choices[0].text


def test_chat_streamed_equals_one_shot_with_n_seed_logprobs_and_usage(client):
    ask = {
        "model": "plain", "messages": [{"role": "user", "content": "the cat?"}], "max_tokens": 10,
        "n": 2, "temperature": 1.2, "seed": 5, "logprobs": True, "top_logprobs": 2,
    }  # fmt: skip
    one = client.chat.completions.create(**ask)
    assert one.object == "chat.completion" and [c.index for c in one.choices] == [0, 1]
    texts, logprobs, finish, usage = streamed(
        client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True})
    )
    for choice in one.choices:
        assert choice.message.role == "assistant"
        assert texts[choice.index] == choice.message.content
        assert finish[choice.index] == choice.finish_reason
        ours = [(t.token, t.logprob, [a.token for a in t.top_logprobs]) for t in choice.logprobs.content]
        theirs = [(t.token, t.logprob, [a.token for a in t.top_logprobs]) for t in logprobs[choice.index]]
        assert ours == theirs and len(ours) <= 10
        assert "".join(t.token for t in choice.logprobs.content) == choice.message.content
    assert usage == one.usage
    again = client.chat.completions.create(**ask)
    assert [c.message.content for c in again.choices] == [c.message.content for c in one.choices]


def test_chat_with_an_imported_template_is_the_greedy_continuation_of_its_ids(client, runs):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the cat and dog"}]
    found = client.chat.completions.create(model="llama", messages=messages, max_tokens=8)
    lm = LanguageModel.load(runs[1])
    prompt = ChatTemplate.load(runs[1], lm.tokenizer).encode(messages)
    ids = greedy_ids(lm, prompt, 8)
    # (a last character whose bytes the budget cut short left out, as the server leaves it)
    assert found.choices[0].message.content == lm.tokenizer.decode(ids).removesuffix("\ufffd")
    assert found.usage.prompt_tokens == len(prompt) and found.usage.completion_tokens == len(ids)


def test_errors_reach_the_client_as_its_exceptions(client):
    with pytest.raises(openai.UnprocessableEntityError) as found:
        client.chat.completions.create(
            model="plain", messages=[{"role": "user", "content": "x"}], logprobs=True, top_logprobs=25
        )
    assert json.loads(found.value.response.text)["error"]["param"] == "top_logprobs"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.UnprocessableEntityError, match="echo"):
        client.completions.create(model="plain", prompt="x", max_tokens=0)
