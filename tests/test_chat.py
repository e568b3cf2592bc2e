"""Chat templates and log-probabilities: an imported Llama folder's chat template (from
``tokenizer_config.json`` or ``chat_template.jinja``) renders and encodes a conversation as
``transformers``' ``apply_chat_template`` does, survives ``export-hf``, and refuses in one line;
the plain default; the log-probabilities the server reports equal the Hugging Face model's, the
engine's (cached, while generating) equal a scoring pass over the whole text, and the token texts
join into the text."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
import torch

from tests.helpers import position_gpt
from tests.test_interop_llama_runs import BOS3, EOS3, llama2_tokenizer, llama3_tokenizer, llama_folder
from vaswani.errors import InputError, RunDirError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.continuous import ContinuousEngine
from vaswani.generation.logprobs import logprobs_of, prompt_logprobs
from vaswani.interop import export_hf, import_hf
from vaswani.pipelines.chat import TEMPLATE_FILE, ChatTemplate
from vaswani.pipelines.lm import LanguageModel
from vaswani.serve.logprobs import token_texts
from vaswani.tokenizer import LMTokenizer

transformers = pytest.importorskip("transformers")

HEADERS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
# Templates in the styles of Llama 3 and of Zephyr/TinyLlama, over several lines with block tags (so
# that trim_blocks and lstrip_blocks matter), one with tojson and loop controls.
HEADER_STYLE = """{{ bos_token }}
{% for message in messages %}
    {% if loop.index0 == 0 and message['role'] != 'system' %}
<|start_header_id|>system<|end_header_id|>

Be brief.<|eot_id|>
    {% endif %}
<|start_header_id|>{{ message['role'] }}<|end_header_id|>

{{ message['content'] | trim }}<|eot_id|>
{% endfor %}
{% if add_generation_prompt %}
<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""
ROLE_STYLE = """{% for message in messages %}
{% if message['role'] == 'assistant' and not loop.last %}{% continue %}{% endif %}
{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}
{% endfor %}
{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}
{{ {'meta': 'ça'} | tojson }}"""
STRICT = (
    "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with the user') }}"
    "{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"
)
CONVERSATIONS = [
    [{"role": "user", "content": "the cat sat"}],
    [
        {"role": "system", "content": "You translate."},
        {"role": "user", "content": " naïve café 🙂 "},
        {"role": "assistant", "content": "日本語 ça va?"},
        {"role": "user", "content": "two\nlines"},
    ],
]


def folder_with_template(tmp_path, kind: str, template: str, as_file: bool):
    """A random Llama folder of ``kind``'s tokenizer with ``template`` in its tokenizer_config.json
    (or its chat_template.jinja)."""
    if kind == "llama3":
        tokenizer, bos, eos = llama3_tokenizer(), BOS3, EOS3
        tokenizer.add_special_tokens(HEADERS)
    else:
        tokenizer, bos, eos = llama2_tokenizer(), "<s>", "</s>"
    src = llama_folder(tmp_path / "hf", tokenizer, bos, eos)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos}
    if as_file:
        (src / TEMPLATE_FILE).write_text(template, encoding="utf-8")
    else:
        config["chat_template"] = template
    (src / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return src


def their_ids(tokenizer, messages) -> list[int]:
    found = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(found["input_ids"] if isinstance(found, Mapping) else found)


@pytest.mark.parametrize(
    ("kind", "template", "as_file"),
    [("llama3", HEADER_STYLE, False), ("llama2", ROLE_STYLE, False), ("llama3", HEADER_STYLE, True)],
    ids=["llama3-config", "llama2-config", "llama3-jinja-file"],
)
def test_imported_chat_template_renders_and_encodes_as_transformers(tmp_path, kind, template, as_file):
    src = folder_with_template(tmp_path, kind, template, as_file)
    run = import_hf(src, tmp_path / "run")
    assert (run / TEMPLATE_FILE).read_text(encoding="utf-8") == template
    chat = ChatTemplate.load(run, LanguageModel.load(run).tokenizer)
    theirs = transformers.AutoTokenizer.from_pretrained(src)
    for messages in CONVERSATIONS:
        rendered = theirs.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert chat.render(messages) == rendered
        assert chat.encode(messages) == their_ids(theirs, messages)
    # BOS written once, by the template; the headers read as special tokens, not as text
    ids = chat.encode(CONVERSATIONS[0])
    assert ids.count(theirs.bos_token_id) == (1 if "bos_token" in template else 0)
    if kind == "llama3":
        assert theirs.convert_tokens_to_ids("<|eot_id|>") in ids
    again = transformers.AutoTokenizer.from_pretrained(export_hf(run, tmp_path / "out"))
    assert again.chat_template == template
    assert their_ids(again, CONVERSATIONS[1]) == chat.encode(CONVERSATIONS[1])


def test_a_template_that_refuses_a_conversation_is_one_line_and_a_broken_one_fails_at_load(tmp_path):
    src = folder_with_template(tmp_path, "llama2", STRICT, as_file=False)
    run = import_hf(src, tmp_path / "run")
    lm = LanguageModel.load(run)
    chat = ChatTemplate.load(run, lm.tokenizer)
    with pytest.raises(InputError, match=r"^messages: .*must start with the user") as found:
        chat.encode([{"role": "system", "content": "x"}])
    assert "\n" not in str(found.value)
    (run / TEMPLATE_FILE).write_text("{% for m in messages %}", encoding="utf-8")
    with pytest.raises(RunDirError, match=TEMPLATE_FILE):
        ChatTemplate.load(run, lm.tokenizer)


def test_plain_template_of_a_run_without_one_and_its_stop(tmp_path):
    tokenizer = LMTokenizer.train(["User: hi\nAssistant: hello"] * 20, "char", 0)
    chat = ChatTemplate.load(tmp_path, tokenizer)
    messages = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"}]
    text = chat.render(messages)
    assert text.splitlines() == ["System: Be kind.", "User: hi", "Assistant:"]
    assert chat.encode(messages) == tokenizer.encode(text)  # no BOS: the run's tokenizer has none
    assert chat.stop == ("\nUser:",)
    parts = [{"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}]
    assert chat.render(parts) == chat.render(messages[1:])


def test_scored_prompt_equals_the_hugging_face_models_log_probabilities(tmp_path):
    src = folder_with_template(tmp_path, "llama3", HEADER_STYLE, as_file=False)
    lm = LanguageModel.load(import_hf(src, tmp_path / "run"))
    ids = lm.tokenizer.encode("the cat and the dog sat on the mat")
    ours = prompt_logprobs(lm.model, ids, top=3, vocab_size=lm.tokenizer.vocab_size)
    hf = transformers.LlamaForCausalLM.from_pretrained(src).eval()
    with torch.no_grad():
        theirs = torch.log_softmax(hf(torch.tensor([ids])).logits[0].double(), dim=-1)
    assert ours[0] is None and len(ours) == len(ids)
    for position, scored in enumerate(ours[1:], start=1):
        assert scored is not None and scored.token == ids[position]
        assert scored.logprob == pytest.approx(theirs[position - 1, ids[position]].item(), abs=1e-4)
        best = theirs[position - 1].topk(3)
        assert [t for t, _ in scored.top] == best.indices.tolist()
        assert [lp for _, lp in scored.top] == pytest.approx(best.values.tolist(), abs=1e-4)


@pytest.mark.parametrize(
    "decoding",
    [DecodingConfig(max_new_tokens=9), DecodingConfig(max_new_tokens=9, temperature=1.3, top_k=5, seed=2)],
    ids=["greedy", "sampled"],
)
def test_engine_logprobs_while_generating_equal_a_scoring_pass(decoding):
    model = position_gpt("rope", max_len=32)
    engine = ContinuousEngine(model, eos_id=99, decode=lambda ids: " ".join(map(str, ids)), max_batch=4)
    prompt = [3, 4, 5]
    other = engine.submit([7, 1], decoding)  # a neighbour in the batch, without logprobs
    row = engine.submit(prompt, decoding, logprobs=4)
    while engine.rows or engine.pending:
        engine.step()
    generated = row.result().ids
    assert len(row.logprobs) == len(generated) == 9 and other.logprobs == []
    whole = prompt_logprobs(model, prompt + generated, top=4)
    for cached, scored in zip(row.logprobs, whole[len(prompt) :], strict=True):
        assert scored is not None and cached.token == scored.token
        assert cached.logprob == pytest.approx(scored.logprob, abs=1e-9)
        assert [t for t, _ in cached.top] == [t for t, _ in scored.top]
    if decoding.strategy == "greedy":  # the chosen token is the most likely one
        assert all(s.top[0][0] == s.token for s in row.logprobs)


def test_logprobs_of_leaves_impossible_tokens_impossible():
    logits = torch.tensor([[1.0, 2.0, -torch.inf], [0.0, 0.0, 0.0]])
    found = logprobs_of(logits, torch.tensor([1, 2]), top=3)
    assert found[0].logprob == pytest.approx(torch.log_softmax(logits[0], -1)[1].item())
    assert found[0].top[-1][1] == -torch.inf and found[1].logprob == pytest.approx(-1.0986122886681098)


def test_token_texts_join_into_the_text_across_split_characters():
    tokenizer = LMTokenizer.train(["naïve café 🙂🐍 日本語 ça va?"] * 3, "bpe", 270)
    text = "日本語 🙂 naïve café, ça va? 🐍🐍"
    ids = tokenizer.encode(text)
    pieces = token_texts(tokenizer.decode, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == text
    assert "" in pieces  # a byte of a character adds no text until the character is whole
