"""Word-level tokenizers of a training text (Hugging Face ``tokenizers``' WordLevel model): one
token per word, for pretrained word vectors (:mod:`vaswani.data.vectors`).

The vocabulary is the special tokens, then the training text's words, most frequent first (ties
in alphabetical order, so the same text always gives the same ids), up to ``vocab_size`` tokens in
all; any other word is the unknown token. A translation source splits words on whitespace and
punctuation (``Whitespace``: runs of word characters, runs of punctuation), case kept; a BERT
encoder's (classify, tag) reads the text as BERT's tokenizer does (its normaliser, lowercasing by
default, and pre-tokenizer), with [CLS] and [SEP] around it. Both are saved like the others.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, models, pre_tokenizers

from vaswani.tokenizer import (
    SPECIALS,
    UNK,
    WP_MAX_LEN,
    WP_SPECIALS,
    WP_UNK,
    TextTokenizer,
    WordPieceTokenizer,
)


def word_vocabulary(words: Iterable[str], specials: Sequence[str], vocab_size: int) -> dict[str, int]:
    """Token → id: ``specials`` first, then the most frequent ``words`` (ties alphabetical),
    ``vocab_size`` tokens at most."""
    counts = Counter(word for word in words if word not in specials)
    ranked = sorted(counts, key=lambda word: (-counts[word], word))[: max(0, vocab_size - len(specials))]
    return {token: i for i, token in enumerate([*specials, *ranked])}


def _words(tokenizer: Tokenizer, texts: Iterable[str]) -> Iterable[str]:
    """The words of ``texts`` as ``tokenizer`` splits them (after its normaliser, if any)."""
    for text in texts:
        if tokenizer.normalizer is not None:
            text = tokenizer.normalizer.normalize_str(text)
        yield from (word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text))


def train_source_words(texts: Iterable[str], vocab_size: int) -> TextTokenizer:
    """A translation source's word-level tokenizer (vaswani's special tokens at ids 0 to 3)."""
    splitter = Tokenizer(models.WordLevel({UNK: 0}, unk_token=UNK))
    splitter.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = Tokenizer(
        models.WordLevel(word_vocabulary(_words(splitter, texts), SPECIALS, vocab_size), UNK)
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(list(SPECIALS))
    return TextTokenizer(tokenizer)


def train_bert_words(
    texts: Iterable[str], vocab_size: int, lowercase: bool = True, max_len: int = WP_MAX_LEN
) -> WordPieceTokenizer:
    """A BERT encoder's word-level tokenizer: BERT's normaliser and pre-tokenizer, [PAD], [UNK],
    [CLS], [SEP] and [MASK] at ids 0 to 4, the words after them."""
    pipeline = WordPieceTokenizer._pipeline  # BERT's normaliser, pre-tokenizer and decoder
    splitter = pipeline(Tokenizer(models.WordLevel({WP_UNK: 0}, unk_token=WP_UNK)), lowercase, None)
    vocab = word_vocabulary(_words(splitter, texts), WP_SPECIALS, vocab_size)
    tokenizer = pipeline(Tokenizer(models.WordLevel(vocab, unk_token=WP_UNK)), lowercase, None)
    tokenizer.add_special_tokens(list(WP_SPECIALS))
    return WordPieceTokenizer(tokenizer, max_len)
