"""Chat: a conversation (a list of messages) turned into the prompt a language model continues.

A run imported from a Hugging Face folder keeps the folder's chat template (``tokenizer_config.json``'s
``chat_template``, or ``chat_template.jinja``) as ``chat_template.jinja`` in the run directory;
:class:`ChatTemplate` renders it as Hugging Face's ``apply_chat_template`` does (a sandboxed Jinja
environment with ``trim_blocks`` and ``lstrip_blocks``, ``raise_exception``, ``strftime_now``, a
``tojson`` that keeps non-ASCII text, and the tokenizer's special tokens by name), then encodes the
text reading the special tokens it spells (``<|eot_id|>``, ``</s>``) as those tokens, without
adding a BOS of its own (the template writes it). A run without a template (every run vaswani
trains) gets :data:`PLAIN`: one ``Role: content`` line per message, ``Assistant:`` last, and the
reply stops before the next ``\\nUser:`` line.

A message is ``{"role": ..., "content": ...}``; the text of a content given as parts
(``[{"type": "text", "text": ...}]``) is the parts' texts joined.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from vaswani.errors import DataError, InputError, RunDirError
from vaswani.io import read_bytes_bounded
from vaswani.tokenizer import LMTokenizer

TEMPLATE_FILE = "chat_template.jinja"
PLAIN = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
PLAIN_STOP = ("\nUser:",)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **options: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **options)


def _raise(message: str) -> None:
    raise TemplateError(message)


def environment() -> ImmutableSandboxedEnvironment:
    """The Jinja environment chat templates are written for (Hugging Face's settings)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def template_of(tokenizer_config: Mapping[str, Any]) -> str | None:
    """The chat template of a Hugging Face ``tokenizer_config.json`` (a string, or of a list of
    named templates the one named ``default``); None when it has none."""
    value = tokenizer_config.get("chat_template")
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, Mapping)}
        value = named.get("default")
    return value if isinstance(value, str) and value.strip() else None


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or text parts joined."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))


class ChatTemplate:
    """The chat template of an ``lm`` run and the tokenizer it encodes with:
    ``ChatTemplate.load(run_dir, tokenizer).encode(messages)`` is the prompt's ids."""

    def __init__(self, source: str | None, tokenizer: LMTokenizer) -> None:
        self.source = source or PLAIN
        self.stop: tuple[str, ...] = PLAIN_STOP if source is None else ()
        try:
            self.template = environment().from_string(self.source)
        except TemplateError as exc:
            raise RunDirError(f"{TEMPLATE_FILE}: not a Jinja template ({exc})") from None
        vocab = tokenizer.tokenizer
        self.special = {"eos_token": vocab.id_to_token(tokenizer.eos_id)}
        if tokenizer.bos_id is not None:
            self.special["bos_token"] = vocab.id_to_token(tokenizer.bos_id)
        # A copy that reads the special tokens a template spells (the run's own never does).
        self.tokenizer = Tokenizer.from_str(vocab.to_str())
        self.tokenizer.encode_special_tokens = False

    @classmethod
    def load(cls, run_dir: str | Path, tokenizer: LMTokenizer) -> ChatTemplate:
        """The run's ``chat_template.jinja``, or :data:`PLAIN` where it has none."""
        path = Path(run_dir) / TEMPLATE_FILE
        if not path.exists():
            return cls(None, tokenizer)
        try:
            source = read_bytes_bounded(path).decode("utf-8")
        except UnicodeDecodeError:
            raise RunDirError(f"{path}: not UTF-8 text") from None
        return cls(source, tokenizer)

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        """The conversation as text, ending where the assistant's reply begins; a template's
        ``raise_exception`` (a role it refuses, say) is an InputError naming ``messages``."""
        plain = [{**m, "content": message_text(m.get("content", ""))} for m in messages]
        try:
            return self.template.render(
                messages=plain,
                add_generation_prompt=add_generation_prompt,
                tools=None,
                documents=None,
                **self.special,
            )
        except TemplateError as exc:
            raise InputError(f"messages: the run's chat template refuses them ({exc})") from None

    def encode(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The ids of the rendered conversation (special tokens spelt by the template read as such)."""
        text = self.render(messages)
        if not text:
            raise DataError("messages: the conversation renders as no text")
        return self.tokenizer.encode(text, add_special_tokens=False).ids
