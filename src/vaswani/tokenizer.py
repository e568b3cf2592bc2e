"""Subword tokenizers trained on the user's text with Hugging Face ``tokenizers``.

Special tokens have fixed ids in every vaswani tokenizer, saved with it:
``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3. A translation run imported from a
Marian (OPUS-MT) checkpoint keeps Marian's instead (see :class:`TextTokenizer`).

Text is split on spaces SentencePiece-style (a word starts with "▁"), so
decoding gives back the spacing of the input (all but one leading space; a
"▁" in the input reads as a space), and no Unicode normalisation is applied,
so Chinese punctuation (，。？) survives unchanged. A character not seen in
training becomes ``<unk>``, which decoding leaves out. A language written
without spaces (Chinese) becomes one "word" per sentence and BPE learns its
frequent characters and words as pieces.

Special tokens are ids only: the text ``<eos>`` in the input is encoded as
ordinary characters, never as the control token.

BERT's tokenizer (:class:`WordPieceTokenizer`) is WordPiece instead, with BERT's own special
tokens ([PAD], [UNK], [CLS], [SEP], [MASK]) at the ids its vocabulary gives them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from vaswani.errors import RunDirError
from vaswani.io import atomic_write_text, json_text, read_bytes_bounded
from vaswani.resources import train_tokenizer

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
MARIAN_EOS = "</s>"
MARIAN_SPECIALS = (MARIAN_EOS, UNK, PAD)
T = TypeVar("T", bound="TokenizerFile")


def shared_id(vocab: Mapping[str, int]) -> tuple[str, str, int] | None:
    """Two tokens of ``vocab`` (token → id) with one id, and the id (the first such pair in id
    order); None when every id is one token's. A model reads one embedding row per id, so a
    tokenizer whose two tokens share one would decode one of them as the other."""
    seen: dict[int, str] = {}
    for token, token_id in sorted(vocab.items(), key=lambda item: (item[1], item[0])):
        if token_id in seen:
            return seen[token_id], token, token_id
        seen[token_id] = token
    return None


def renumbered(saved: Any, tokenizer: Tokenizer) -> str | None:
    """What is wrong when an added token of the saved JSON ``saved`` (``added_tokens``: content and
    id) did not keep its id in the loaded ``tokenizer``, else None. ``tokenizers`` silently gives
    a new id to an added token whose id is another token's or past the vocabulary, so that the
    embedding row the file meant would be read for another token."""
    entries = saved.get("added_tokens") if isinstance(saved, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        content, token_id = entry.get("content"), entry.get("id")
        if not isinstance(content, str) or tokenizer.token_to_id(content) == token_id:
            continue
        holder = tokenizer.id_to_token(token_id) if isinstance(token_id, int) and token_id >= 0 else None
        if holder is not None:
            return f"added token {content!r} has id {token_id}, which is {holder!r}'s: one id is one token"
        return f"added token {content!r} has id {token_id!r}, not an id of the vocabulary"
    return None


def repeated_line(lines: Sequence[str]) -> tuple[str, int, int] | None:
    """The first token of a ``vocab.txt`` (one token a line, its line number its id) that is on
    two lines, with the two line numbers (1-based); None when every token is on one line."""
    first: dict[str, int] = {}
    for number, token in enumerate(lines, start=1):
        if token in first:
            return token, first[token], number
        first[token] = number
    return None


class TokenizerFile:
    """What every vaswani tokenizer shares: a Hugging Face ``tokenizers`` object, saved as one
    JSON file in the run directory, that never reads typed text as a special token.
    ``post_process`` says whether :meth:`encode` applies the post-processor saved with it."""

    post_process = False

    def __init__(self, tokenizer: Tokenizer) -> None:
        clash = shared_id(tokenizer.get_vocab(with_added_tokens=True))
        if clash is not None:
            first, second, token_id = clash
            raise RunDirError(f"tokens {first!r} and {second!r} share id {token_id}: one id is one token")
        self.tokenizer = tokenizer
        tokenizer.encode_special_tokens = True  # "<eos>" typed by a user is text, not EOS

    @classmethod
    def load(cls: type[T], path: Path, **options: Any) -> T:
        """The tokenizer saved at ``path``; ``options`` go to the class (an
        :class:`LMTokenizer`'s special tokens)."""
        try:
            text = read_bytes_bounded(path).decode("utf-8")
            tokenizer = Tokenizer.from_str(text)
            moved = renumbered(json.loads(text), tokenizer)
            if moved is not None:
                raise RunDirError(moved)
            return cls(tokenizer, **options)
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            if isinstance(exc, RunDirError):
                raise RunDirError(f"{path}: {exc}") from None
            raise RunDirError(f"{path}: not a readable tokenizer file ({exc})") from None

    def save(self, path: Path) -> None:
        """Write the tokenizer to ``path`` atomically, never through a link (:mod:`vaswani.io`)."""
        atomic_write_text(path, self.tokenizer.to_str(pretty=True))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=self.post_process).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        encoded = self.tokenizer.encode_batch(list(texts), add_special_tokens=self.post_process)
        return [e.ids for e in encoded]


class TextTokenizer(TokenizerFile):
    """A subword tokenizer and the ids of its special tokens, read from the tokenizer itself.

    Every tokenizer vaswani trains (BPE) has vaswani's fixed ids (``<pad>`` 0, ``<bos>`` 1,
    ``<eos>`` 2, ``<unk>`` 3). One without ``<bos>`` but with ``</s>``, ``<unk>`` and ``<pad>``
    has Marian's (a run imported from an OPUS-MT checkpoint): ``</s>`` ends a sentence, and
    ``<pad>`` also starts the decoder (``bos_id``, Marian's ``decoder_start_token_id``) and is
    never generated (``suppressed_ids``, as the ``bad_words_ids`` of Marian's generation
    config). A post-processor saved with the tokenizer is applied by :meth:`encode` (a Marian
    source tokenizer appends ``</s>``, as Marian's models were trained); vaswani's have none.
    """

    post_process = True

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__(tokenizer)
        self.suppressed_ids: tuple[int, ...] = ()
        eos, unk, pad = (tokenizer.token_to_id(token) for token in MARIAN_SPECIALS)
        if tokenizer.token_to_id(BOS) is None and eos is not None and unk is not None and pad is not None:
            self.eos_id, self.unk_id, self.pad_id = eos, unk, pad
            self.bos_id = pad
            self.suppressed_ids = (self.pad_id,)
            return
        for token_id, token in enumerate(SPECIALS):
            if tokenizer.token_to_id(token) != token_id:
                raise RunDirError(f"tokenizer does not have {token} at id {token_id}")
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    @classmethod
    def train_bpe(cls, texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> TextTokenizer:
        """Learn BPE merges (Sennrich et al. 2016) on ``texts`` up to ``vocab_size`` pieces."""
        tokenizer = Tokenizer(models.BPE(unk_token=UNK))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIALS),
            show_progress=False,
        )
        tokenizer = train_tokenizer(tokenizer, texts, trainer)
        return cls(tokenizer)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, stopping at EOS and leaving out special tokens."""
        ids = list(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tokenizer.decode(ids, skip_special_tokens=True)


END_OF_TEXT = "<|endoftext|>"
LM_UNK = "<unk>"


class LMTokenizer(TokenizerFile):
    """A language model's tokenizer: byte-level BPE (GPT-2's scheme) or characters.

    Byte-level BPE maps every byte to one of 256 printable symbols before the merges, so
    any text, in any script, encodes without an unknown token and decodes back exactly.
    The character tokenizer has one token per character seen in training, and ``<unk>``
    for the others. ``eos_token`` (``<|endoftext|>``) separates documents and ends generation;
    it also pads batched prompts (padding is masked, so its id does not matter). ``bos_token``
    (None in the tokenizers vaswani trains; an imported Llama's ``<s>`` or
    ``<|begin_of_text|>``) starts every encoded text, as Llama's tokenizer does. As in
    :class:`TextTokenizer`, typed text is never read as a special token.
    """

    def __init__(
        self, tokenizer: Tokenizer, eos_token: str = END_OF_TEXT, bos_token: str | None = None
    ) -> None:
        super().__init__(tokenizer)
        ids = {}
        for token in (eos_token, bos_token):
            if token is not None:
                ids[token] = tokenizer.token_to_id(token)
                if ids[token] is None:
                    raise RunDirError(f"tokenizer has no {token} token")
        self.eos_id = self.pad_id = ids[eos_token]
        self.bos_id: int | None = None if bos_token is None else ids[bos_token]

    def encode(self, text: str) -> list[int]:
        ids = super().encode(text)
        return ids if self.bos_id is None else [self.bos_id, *ids]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        rows = super().encode_batch(texts)
        return rows if self.bos_id is None else [[self.bos_id, *ids] for ids in rows]

    @classmethod
    def train(cls, texts: Iterable[str], kind: str, vocab_size: int) -> LMTokenizer:
        """Train a ``kind`` ("bpe" or "char") tokenizer on ``texts``."""
        texts = list(texts)
        if kind == "char":
            chars = sorted(set("".join(texts)) - {"\r"})
            vocab = {END_OF_TEXT: 0, LM_UNK: 1, **{c: i + 2 for i, c in enumerate(chars)}}
            tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=LM_UNK))
            tokenizer.decoder = decoders.Fuse()
            tokenizer.add_special_tokens([END_OF_TEXT, LM_UNK])
            return cls(tokenizer)
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[END_OF_TEXT],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer = train_tokenizer(tokenizer, texts, trainer)
        return cls(tokenizer)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, leaving out special tokens."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


WP_PAD, WP_UNK, WP_CLS, WP_SEP, WP_MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
WP_SPECIALS = (WP_PAD, WP_UNK, WP_CLS, WP_SEP, WP_MASK)
CONTINUATION = "##"
WP_MAX_LEN = 512


class WordPieceTokenizer(TokenizerFile):
    """BERT's tokenizer: BERT's normaliser and pre-tokenizer, then WordPiece (Wu et al. 2016).

    The normaliser cleans control characters, spaces out CJK characters, lowercases
    (``lowercase``) and strips accents (``strip_accents``; None: when lowercasing, as BERT's);
    the pre-tokenizer splits on whitespace and punctuation; WordPiece splits each word greedily
    into the longest pieces of the vocabulary, pieces after the first marked "##" ("playing" →
    "play", "##ing"), a word it cannot split being [UNK].

    A text encodes as ``[CLS] A [SEP]`` and a sentence pair as ``[CLS] A [SEP] B [SEP]``, with
    segment ids 0 up to the first [SEP] and 1 after it, truncated to ``max_len`` tokens (the
    longer text first). The ids of [PAD], [UNK], [CLS], [SEP] and [MASK] are the vocabulary's
    (0, 100, 101, 102, 103 in Google's BERT vocabularies; 0 to 4 in one trained here). As in every
    vaswani tokenizer, typed text is never read as a special token: ids like ``mask_id`` are
    put in by the code that needs them.
    """

    post_process = True

    def __init__(self, tokenizer: Tokenizer, max_len: int = WP_MAX_LEN) -> None:
        super().__init__(tokenizer)
        ids: dict[str, int] = {}
        for token in WP_SPECIALS:
            token_id = tokenizer.token_to_id(token)
            if token_id is None:
                raise RunDirError(f"tokenizer has no {token} token")
            ids[token] = token_id
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (ids[t] for t in WP_SPECIALS)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{WP_CLS} $A {WP_SEP}",
            pair=f"{WP_CLS} $A {WP_SEP} $B:1 {WP_SEP}:1",
            special_tokens=[(WP_CLS, self.cls_id), (WP_SEP, self.sep_id)],
        )
        tokenizer.no_padding()
        self.max_len = max_len

    @classmethod
    def load(cls, path: Path, max_len: int = WP_MAX_LEN) -> WordPieceTokenizer:
        """A saved tokenizer (vaswani's, or a BERT checkpoint's ``tokenizer.json``: its padding is
        dropped and its truncation replaced by ``max_len``)."""
        tokenizer = super().load(path)
        tokenizer.max_len = max_len
        return tokenizer

    def to_json(self) -> bytes:
        """``tokenizer.json`` without truncation or padding (as a run keeps it and Hugging Face
        writes it: the length limit is the reader's to set)."""
        payload = json.loads(self.tokenizer.to_str())
        payload["truncation"] = payload["padding"] = None
        return json_text(payload, ensure_ascii=False).encode("utf-8")

    @property
    def max_len(self) -> int:
        """The most tokens an encoding has, special tokens included (longer texts are cut)."""
        truncation = self.tokenizer.truncation
        return int(truncation["max_length"]) if truncation else WP_MAX_LEN

    @max_len.setter
    def max_len(self, value: int) -> None:
        if value < 3:
            raise ValueError(f"max_len must leave room for [CLS] and [SEP] and a token, got {value}")
        self.tokenizer.enable_truncation(value, strategy="longest_first")

    @staticmethod
    def _pipeline(tokenizer: Tokenizer, lowercase: bool, strip_accents: bool | None) -> Tokenizer:
        """BERT's normaliser, pre-tokenizer and decoder around a WordPiece model."""
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
        return tokenizer

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        min_frequency: int = 2,
        max_len: int = WP_MAX_LEN,
    ) -> WordPieceTokenizer:
        """Learn a WordPiece vocabulary of at most ``vocab_size`` pieces on ``texts``; the special
        tokens take ids 0 to 4 ([PAD], [UNK], [CLS], [SEP], [MASK]).

        The same texts always give the same vocabulary: the trainer of ``tokenizers`` numbers the
        "##" pieces of single characters in hash-map order, and its choice between merges of
        equal counts follows those numbers (huggingface/tokenizers#1794), so they are given to it
        up front, sorted, and become ordinary pieces again afterwards."""
        texts = list(texts)
        tokenizer = cls._pipeline(
            Tokenizer(models.WordPiece(unk_token=WP_UNK, continuing_subword_prefix=CONTINUATION)),
            lowercase,
            strip_accents,
        )
        inner: set[str] = set()
        for text in texts:
            for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(text)):
                inner.update(word[1:])
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[*WP_SPECIALS, *(CONTINUATION + c for c in sorted(inner))],
            continuing_subword_prefix=CONTINUATION,
            show_progress=False,
        )
        tokenizer = train_tokenizer(tokenizer, texts, trainer)
        model = models.WordPiece(
            tokenizer.get_vocab(), unk_token=WP_UNK, continuing_subword_prefix=CONTINUATION
        )
        trained = cls._pipeline(Tokenizer(model), lowercase, strip_accents)
        trained.add_special_tokens(list(WP_SPECIALS))
        return cls(trained, max_len)

    @classmethod
    def from_vocab(
        cls,
        path: Path,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        max_len: int = WP_MAX_LEN,
    ) -> WordPieceTokenizer:
        """BERT's tokenizer of a ``vocab.txt`` (one piece a line, the line number its id), as
        Hugging Face's ``BertTokenizer`` builds it (uncased models lowercase, cased ones not)."""
        repeated = repeated_line(read_bytes_bounded(path).decode("utf-8", errors="replace").splitlines())
        if repeated is not None:
            token, line, again = repeated
            raise RunDirError(f"token {token!r} is on lines {line} and {again}: one token is one id")
        try:
            model = models.WordPiece.from_file(str(path), unk_token=WP_UNK)
        except Exception as exc:  # tokenizers raises a bare Exception on an unreadable file
            raise RunDirError(f"{path}: not a readable vocabulary ({exc})") from None
        tokenizer = cls._pipeline(Tokenizer(model), lowercase, strip_accents)
        tokenizer.add_special_tokens([t for t in WP_SPECIALS if tokenizer.token_to_id(t) is not None])
        return cls(tokenizer, max_len)

    @property
    def lowercase(self) -> bool:
        """Whether BERT's normaliser lowercases (an uncased model)."""
        return bool(getattr(self.tokenizer.normalizer, "lowercase", False))

    @property
    def strip_accents(self) -> bool | None:
        """BERT's normaliser's accent stripping (None: when lowercasing)."""
        return getattr(self.tokenizer.normalizer, "strip_accents", None)

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text``, without special tokens: "playing" → ["play", "##ing"]."""
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def encode_segments(self, text: str, pair: str | None = None) -> tuple[list[int], list[int]]:
        """Ids and segment ids of ``[CLS] text [SEP]``, or of ``[CLS] text [SEP] pair [SEP]``."""
        encoded = self.tokenizer.encode(text, pair)
        return encoded.ids, encoded.type_ids

    def encode_segments_batch(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None
    ) -> list[tuple[list[int], list[int]]]:
        """:meth:`encode_segments` of each text (with the pair of the same index)."""
        if pairs is None:
            encoded = self.tokenizer.encode_batch(list(texts))
        else:
            if len(pairs) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
            encoded = self.tokenizer.encode_batch(list(zip(texts, pairs, strict=True)))
        return [(e.ids, e.type_ids) for e in encoded]

    def encode_pieces_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text's pieces alone: no [CLS] or [SEP] and no truncation (a document
        to be cut into windows, the text on either side of a [MASK])."""
        max_len = self.max_len
        self.tokenizer.no_truncation()
        try:
            encoded = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        finally:
            self.max_len = max_len
        return [e.ids for e in encoded]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``: pieces joined back into words, special tokens left out."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def vocab_text(self) -> str:
        """The vocabulary as ``vocab.txt``: one piece a line, in id order."""
        vocab = self.tokenizer.get_vocab()
        by_id = sorted(vocab, key=vocab.__getitem__)
        if [vocab[piece] for piece in by_id] != list(range(len(by_id))):
            raise RunDirError("tokenizer ids are not 0 … n-1: the vocabulary cannot be written as vocab.txt")
        return "".join(f"{piece}\n" for piece in by_id)
