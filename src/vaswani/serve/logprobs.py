"""Log-probabilities as the OpenAI API shows them: the legacy completions' ``tokens``,
``token_logprobs``, ``top_logprobs`` and ``text_offset``, and chat's ``content`` list.

A token's text is the text it adds to the decoded text before it (:class:`TokenTexts`), so that
the tokens joined are the text itself and ``text_offset`` indexes it; a token in the middle of a
character (byte-level BPE splits a Chinese character or an emoji over several) adds nothing, the
token that completes the character adds it whole. An alternative's text is its own decoding.
A stream sends each token's log-probability once its text is known (:class:`StreamedLogprobs`),
so that the streamed entries are the one-shot ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vaswani.generation.logprobs import TokenLogprob
from vaswani.serve.schemas import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob

Decode = Callable[[Sequence[int]], str]
INCOMPLETE = "\ufffd"  # what the decoder shows for bytes that make no character (yet)


class TokenTexts:
    """The text each token adds, token by token: :meth:`add` gives the texts of the tokens it can
    tell (fewer than it was given while the text ends in bytes that make no character: those
    tokens wait), :meth:`finish` those of the tokens still waiting. Each text is decoded with the
    tokens of the text before it as context (a decoder may drop a leading space at the start)."""

    def __init__(self, decode: Decode) -> None:
        self.decode = decode
        self.ids: list[int] = []
        self.prefix = 0  # the context: ids[prefix:read], the tokens of the last text given
        self.read = 0  # the first token whose text is not given yet

    def add(self, ids: Sequence[int]) -> list[str]:
        texts: list[str] = []
        for token in ids:
            self.ids.append(token)
            if not self.decode(self.ids[self.prefix :]).endswith(INCOMPLETE):
                texts.extend(self._given())
        return texts

    def finish(self) -> list[str]:
        """The texts of the tokens still waiting (the last one's incomplete bytes left out, as
        the text leaves them out)."""
        return self._given(ending=True) if self.read < len(self.ids) else []

    def _given(self, ending: bool = False) -> list[str]:
        before = self.decode(self.ids[self.prefix : self.read])
        after = self.decode(self.ids[self.prefix :])
        piece = after[len(before) :] if after.startswith(before) else self.decode(self.ids[self.read :])
        if ending:
            piece = piece.removesuffix(INCOMPLETE)
        texts = [""] * (len(self.ids) - self.read - 1) + [piece]
        self.prefix, self.read = self.read, len(self.ids)
        return texts


def token_texts(decode: Decode, ids: Sequence[int]) -> list[str]:
    """The text each of ``ids`` adds (joined: the text of ``ids``, less a last character whose
    bytes are incomplete)."""
    texts = TokenTexts(decode)
    return texts.add(ids) + texts.finish()


def completion_logprobs(
    decode: Decode, texts: Sequence[str], scored: Sequence[TokenLogprob | None], offset: int = 0
) -> CompletionLogprobs:
    """The legacy ``logprobs`` of tokens whose texts are ``texts`` and log-probabilities ``scored``
    (None for a first prompt token), their offsets counted from ``offset``."""
    offsets, at = [], offset
    for text in texts:
        offsets.append(at)
        at += len(text)
    return CompletionLogprobs(
        tokens=list(texts),
        token_logprobs=[None if s is None else s.logprob for s in scored],
        top_logprobs=[None if s is None else {decode([t]): lp for t, lp in s.top} for s in scored],
        text_offset=offsets,
    )


def chat_logprobs(decode: Decode, texts: Sequence[str], scored: Sequence[TokenLogprob]) -> ChatLogprobs:
    """Chat's ``logprobs`` of the reply's tokens, whose texts are ``texts``: each token's text,
    log-probability, UTF-8 bytes and alternatives."""

    def top(token: int, logprob: float) -> TopLogprob:
        text = decode([token])
        return TopLogprob(token=text, logprob=logprob, bytes=list(text.encode("utf-8")))

    content = [
        ChatTokenLogprob(
            token=text,
            logprob=s.logprob,
            bytes=list(text.encode("utf-8")),
            top_logprobs=[top(t, lp) for t, lp in s.top],
        )
        for text, s in zip(texts, scored, strict=True)
    ]
    return ChatLogprobs(content=content)


class StreamedLogprobs:
    """The log-probabilities of one streamed choice, each sent once its token's text is known
    (:class:`TokenTexts`); :meth:`take` gives the tokens now known, with their texts."""

    def __init__(self, decode: Decode) -> None:
        self.texts = TokenTexts(decode)
        self.waiting: list[TokenLogprob] = []

    def take(self, scored: Sequence[TokenLogprob], ending: bool) -> tuple[list[str], list[TokenLogprob]]:
        self.waiting.extend(scored)
        texts = self.texts.add([s.token for s in scored])
        if ending:
            texts += self.texts.finish()
        given, self.waiting = self.waiting[: len(texts)], self.waiting[len(texts) :]
        return texts, given
