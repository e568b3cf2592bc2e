"""What data a run reads, one config per kind of task: the ``data`` section of a run config.

Each class is validated like the model and training configs (:class:`vaswani.config.Config`):
a bad value is a :class:`~vaswani.errors.ConfigError` naming the field. A task names its class
in the task registry (``TaskSpec.data``), and a run directory's ``data`` section is read with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from vaswani.data.conll import column_problem
from vaswani.schema import Config, flag, no_flag

BLEU_TOKENIZERS = (
    "13a", "zh", "intl", "char", "none", "ja-mecab", "ko-mecab", "spm", "flores101", "flores200",
)  # fmt: skip
LM_TOKENIZERS = ("bpe", "char")
LABELED_FORMATS = ("tsv", "csv", "jsonl")
POOLS = ("cls", "mean")
CLASSIFIER_POOLS = (*POOLS, "last")  # "last": a GPT classifier's last real token
PARALLEL_TOKENIZERS = ("bpe", "word")
OBJECTIVES, MRT_SEARCHES, MRT_COSTS = ("token", "mrt"), ("beam", "sample"), ("bleu", "chrf")
TEXT_TOKENIZERS = ("wordpiece", "word")  # a classifier's or tagger's, from scratch
VECTOR_FORMATS = ("word2vec", "word2vec-binary", "glove")  # see vaswani.data.vectors


class DataConfig(Config):
    """What every task's data config shares: the section name in errors, and ``vocab_size``."""

    _section = "data"


@dataclass(frozen=True)
class DatasetData(DataConfig):
    """A Hugging Face dataset as a task's data (:mod:`vaswani.data.hf_datasets`, read offline):
    ``dataset``, a ``save_to_disk`` folder, a folder of data files or one Parquet, JSON Lines, JSON
    or CSV file (stored absolute); its ``split`` is trained on and ``dev_split`` scored on (null:
    ``validation`` where the dataset has one; without it, the task's own held-out part where it has
    one). The columns are the task's fields."""

    dataset: str | None = flag(
        None,
        "a Hugging Face dataset instead of files: a save_to_disk folder, a folder of data files, or a "
        ".parquet, .jsonl, .json or .csv file (read offline; needs vaswani[datasets])",
        metavar="PATH",
    )
    split: str = flag("train", "the --dataset split to train on (default train)")
    dev_split: str | None = flag(
        None, "the --dataset split to score on (default: validation, where the dataset has one)"
    )

    def _refuse_files(self, *fields: str) -> None:
        """A dataset replaces the files of ``fields``: refuse both given."""
        for name in fields:
            if self.dataset is not None and getattr(self, name) is not None:
                self._fail(name, "--dataset replaces the files: give one or the other")


@dataclass(frozen=True)
class WordVectorsData(DataConfig):
    """Pretrained word vectors as the input embedding (translation's source, a classifier's or
    tagger's encoder): ``word_vectors``, a file in one of :data:`VECTOR_FORMATS`
    (``word_vectors_format``; null: detected), read into the embedding rows of a word-level
    tokenizer's words; ``freeze_embeddings`` keeps the word table fixed during training."""

    word_vectors: str | None = flag(
        None,
        "pretrained word vectors for the embedding (word2vec text or binary, GloVe; needs --tokenizer word)",
        metavar="FILE",
    )
    word_vectors_format: str | None = flag(
        None, "format of --word-vectors (default: detected)", choices=VECTOR_FORMATS
    )
    freeze_embeddings: bool = flag(False, "keep the word embedding fixed during training")

    def _check_vectors(self, tokenizer: str, tokenizer_field: str) -> None:
        """Word vectors need the word-level tokenizer (``tokenizer``, of the field ``tokenizer_field``)."""
        if self.word_vectors_format is not None:
            self._one_of("word_vectors_format", VECTOR_FORMATS)
        if self.word_vectors is not None and tokenizer != "word":
            self._fail(
                "word_vectors",
                f"word vectors fill a word-level vocabulary: set '{tokenizer_field}' to "
                f"'word' (--tokenizer word), got {tokenizer!r}",
            )


@dataclass(frozen=True)
class EncoderData(WordVectorsData):
    """What a BERT encoder fine-tuned for a task (a classifier, a tagger) starts from: the run
    ``init`` (its tokenizer and weights), or nothing, with a WordPiece vocabulary (or, with
    ``text_tokenizer`` "word", a word-level one, for ``word_vectors``) of the training text.
    (The field is not ``tokenizer``: old classifier run directories hold an unused
    ``data.tokenizer`` of "bpe".)"""

    init: str | None = flag(None, "start from this mlm or encoder run", metavar="RUN_DIR")
    text_tokenizer: str = flag(
        "wordpiece",
        "tokenizer from scratch: wordpiece (default) or word",
        flag="--tokenizer",
        choices=TEXT_TOKENIZERS,
    )

    def _check(self) -> None:
        super()._check()
        self._one_of("text_tokenizer", TEXT_TOKENIZERS)
        self._check_vectors(self.text_tokenizer, "text_tokenizer")
        if self.init is not None and self.text_tokenizer == "word":
            self._fail(
                "text_tokenizer", "an --init run keeps its own tokenizer and embedding (no word level)"
            )


@dataclass(frozen=True)
class ParallelData(WordVectorsData, DatasetData):
    """Sentence pairs for translation.

    ``source="default"`` generates the embedded English→Chinese corpus (``seed``, ``n_*`` sizes);
    ``source="files"`` reads the user's parallel files (absolute paths); ``source="tsv"`` reads
    sentence pairs from two ``columns`` of one tab-separated file (``pairs``) and holds out
    ``n_test`` and ``n_valid`` of them at random (``seed``), keeping every translation of one
    source sentence in the same split; ``source="dataset"`` reads the pairs of a Hugging Face
    ``dataset`` (:class:`DatasetData`) from its ``source_column`` and ``target_column``, or, with
    ``source_lang`` and ``target_lang``, from its ``translation`` column of one sentence per
    language (its ``test`` split, where it has one, is the test). BPE tokenizers of ``vocab_size``
    pieces are trained on the training text, one per side or one for both (``shared_vocab``);
    ``tokenizer`` "word" makes the source side a word-level vocabulary of ``vocab_size`` words
    instead (the words of the training text, most frequent first; for ``word_vectors``).
    ``bleu_tokenize`` is sacreBLEU's tokenizer; left null, it is chosen from the target language.
    """

    source: str = flag(
        "files", "default (the embedded corpus), files (--src/--tgt), tsv (--pairs) or dataset (--dataset)"
    )
    seed: int = flag(
        0,
        "seed of the embedded corpus and of the --pairs split",
        flags=("--data-seed",),
        range="[0, 4294967296)",
    )
    n_train: int = flag(60_000, "sentence pairs of the embedded corpus", range="(0, inf)")
    n_valid: int = flag(500, "validation pairs (embedded corpus, --pairs)", range="(0, inf)")
    n_test: int = flag(1_000, "test pairs (embedded corpus, --pairs)", range="(0, inf)")
    src: str | None = flag(None, "training source file, one sentence per line")
    tgt: str | None = flag(None, "training target file, aligned with --src")
    valid_src: str | None = flag(None)
    valid_tgt: str | None = flag(None)
    test_src: str | None = flag(None)
    test_tgt: str | None = flag(None)
    pairs: str | None = flag(
        None,
        "instead of --src/--tgt: one tab-separated file of sentence pairs (e.g. a Tatoeba export); test "
        "and valid pairs are held out at random (data.n_test, data.n_valid)",
    )
    columns: tuple[int, int] = flag(
        (0, 1),
        "the --pairs columns of source and target, from 0 (default 0,1)",
        metavar="SRC,TGT",
        range="[0, inf)",
    )
    source_column: str = flag("source", "the --dataset column of the source sentences (default source)")
    target_column: str = flag("target", "the --dataset column of the target sentences (default target)")
    source_lang: str | None = flag(
        None, "the source language in a --dataset's translation column ({'de': ..., 'en': ...}), such as de"
    )
    target_lang: str | None = flag(
        None, "the target language in a --dataset's translation column, such as en"
    )
    vocab_size: int = flag(8000, "BPE vocabulary size per tokenizer", range="(0, inf)")
    shared_vocab: bool = flag(False, "one BPE for both languages")
    tokenizer: str = flag(
        "bpe", "the source side's tokenizer: bpe (default) or word", choices=PARALLEL_TOKENIZERS
    )
    bleu_tokenize: str | None = flag(
        None, "sacrebleu tokenizer (default: zh for Chinese, else 13a)", choices=BLEU_TOKENIZERS
    )
    init: str | None = flag(
        None,
        "start from this run's weights and tokenizers (its model): a translation run's, a nat run's for nat",
        metavar="RUN_DIR",
    )
    objective: str = flag(
        "token",
        "token (label-smoothed cross-entropy) or mrt: minimum risk training (needs --init)",
        choices=OBJECTIVES,
    )
    mrt_candidates: int = flag(4, "minimum risk training: candidates per source", range="[1, inf)")
    mrt_search: str = flag("beam", "how the candidates are found: beam or sample", choices=MRT_SEARCHES)
    mrt_cost: str = flag("bleu", "the cost: 1 - sentence BLEU, or 1 - sentence chrF", choices=MRT_COSTS)
    mrt_weight: float = flag(0.3, "the token-level loss's weight beside the risk's 1 - w", range="[0, 1]")
    mrt_alpha: float = flag(1.0, "sharpness of the candidates' distribution, q ~ P^alpha", range="(0, inf)")

    def _check(self) -> None:
        super()._check()
        self._one_of("source", ("default", "files", "tsv", "dataset"))
        self._one_of("tokenizer", PARALLEL_TOKENIZERS)
        self._check_vectors(self.tokenizer, "tokenizer")
        if self.tokenizer == "word" and self.shared_vocab:
            self._fail("shared_vocab", "a word-level source vocabulary is not shared with the target's BPE")
        if self.bleu_tokenize is not None:
            self._one_of("bleu_tokenize", BLEU_TOKENIZERS)
        if self.source == "files" and (self.src is None or self.tgt is None):
            self._fail("src", "files need both 'src' and 'tgt'")
        if self.source == "tsv" and self.pairs is None:
            self._fail("pairs", "source 'tsv' needs the tab-separated file of sentence pairs")
        if self.source == "dataset" and self.dataset is None:
            self._fail("dataset", "source 'dataset' needs the dataset (--dataset PATH)")
        self._refuse_files("src", "pairs")
        if (self.source_lang is None) != (self.target_lang is None):
            self._fail("source_lang", "'source_lang' and 'target_lang' go together")
        if self.columns[0] == self.columns[1]:
            self._fail("columns", f"two different column numbers >= 0, got {list(self.columns)}")
        for a, b in (("valid_src", "valid_tgt"), ("test_src", "test_tgt")):
            if (getattr(self, a) is None) != (getattr(self, b) is None):
                self._fail(a, f"'{a}' and '{b}' go together")
        self._one_of("objective", OBJECTIVES)
        self._one_of("mrt_search", MRT_SEARCHES)
        self._one_of("mrt_cost", MRT_COSTS)
        if self.objective == "mrt" and self.init is None:
            self._fail("objective", "mrt fine-tunes a trained run: give --init RUN_DIR")


@dataclass(frozen=True)
class TextData(DatasetData):
    """Plain text for a language model (GPT) or a masked language model (BERT).

    The text comes from ``text`` (files or folders, ``source="text"``) or the embedded default
    (Python's own documentation, ``source="default"``) or a Hugging Face ``dataset``, one document
    a row of its ``text_column`` (``source="dataset"``, :class:`DatasetData`); the last
    ``valid_fraction`` of it is held out (of a dataset without a ``dev_split``: of its ``split``).
    A language model splits it with a ``tokenizer`` ("bpe": byte-level BPE of ``vocab_size``
    pieces, as GPT-2; "char": one token per character). ``eos_token`` (``<|endoftext|>``) and
    ``bos_token`` (none) are the special tokens of the run's tokenizer (see
    :class:`~vaswani.tokenizer.LMTokenizer`); a run imported from a Llama checkpoint keeps its own.

    A masked language model uses a WordPiece vocabulary of at most ``vocab_size`` pieces and
    cuts the text into windows of up to ``max_len`` tokens; in each, a fraction ``mask_prob`` of
    the tokens is chosen for prediction, and of those a fraction ``mask_random`` is replaced by a
    random token, ``mask_keep`` is left as it is and the rest become [MASK] (BERT's 15%, 10%,
    10%, 80%). With ``nsp`` it also learns next-sentence prediction (:mod:`vaswani.pipelines.nsp`): its
    examples are sentence pairs of the text's documents (blank-line-separated blocks, one sentence
    a line) instead of windows.
    """

    source: str = flag("default", "default (the embedded text), text (--text) or dataset (--dataset)")
    text: tuple[str, ...] | None = flag(None, "text files or folders to train on", nargs="+")
    text_column: str = flag("text", "the --dataset column of the text (default text)")
    tokenizer: str = flag("bpe", "byte-level BPE (default) or characters (lm)", choices=LM_TOKENIZERS)
    vocab_size: int = flag(8000, "BPE (lm) or WordPiece (mlm) vocabulary size", range="(0, inf)")
    valid_fraction: float = flag(0.1, "held-out end of the text (default 0.1)", range="(0, 1)")
    mask_prob: float = flag(0.15, "fraction of the tokens chosen for prediction (mlm, 0.15)", range="(0, 1)")
    mask_random: float = flag(
        0.1, "of those, the fraction replaced by a random token (mlm, 0.1)", range="[0, 1]"
    )
    mask_keep: float = flag(0.1, "of those, the fraction left as it is (mlm, 0.1)", range="[0, 1]")
    nsp: bool = flag(
        False,
        "next-sentence prediction beside masked LM: sentence pairs of the documents (blank-line-"
        "separated blocks, one sentence a line), half IsNext, half NotNext (mlm)",
    )
    eos_token: str = no_flag("<|endoftext|>")  # lm: ends documents and generation (a Llama's </s>)
    bos_token: str | None = no_flag(None)  # lm: starts every text (an imported Llama's <s>)

    def _check(self) -> None:
        super()._check()
        self._one_of("source", ("default", "text", "dataset"))
        self._one_of("tokenizer", LM_TOKENIZERS)
        if self.source == "text" and not self.text:
            self._fail("text", "source 'text' needs at least one file or folder")
        if self.source == "dataset" and self.dataset is None:
            self._fail("dataset", "source 'dataset' needs the dataset (--dataset PATH)")
        self._refuse_files("text")
        if self.mask_random + self.mask_keep > 1.0:
            total = self.mask_random + self.mask_keep
            self._fail("mask_keep", f"mask_random + mask_keep must be <= 1, got {total}")


@dataclass(frozen=True)
class LMData(TextData):
    """A language model's text (:class:`TextData`), and the lm run ``init`` that a new run
    continues from (null: from scratch): its model config, tokenizer and weights, on the new
    ``text``. With ``streaming``, the ``dataset`` is read a batch of rows at a time and its token
    ids written to a file that training memory-maps (:mod:`vaswani.pipelines.lm_text`), so that a
    corpus larger than memory can be trained on. With ``distill_from`` (an lm run, the target) the
    run is a draft for speculative decoding: it keeps the target's tokenizer and trains on the
    target's greedy continuations of prompts cut from the text (sequence-level distillation, Kim
    and Rush 2016), so that its greedy tokens are the target's as often as it can learn them."""

    init: str | None = flag(
        None,
        "continue from this lm run (one trained here, or imported from GPT-2 or Llama) on --text",
        metavar="RUN_DIR",
    )
    streaming: bool = flag(
        False,
        "read --dataset as a stream: its token ids go to a file in the run directory that training "
        "memory-maps (for corpora larger than memory; needs a --dev-split or a validation split)",
    )
    distill_from: str | None = flag(
        None,
        "train a draft for speculative decoding (--draft) on this lm run's greedy continuations of "
        "prompts cut from the text, with its tokenizer",
        metavar="RUN_DIR",
    )

    def _check(self) -> None:
        new_text = {"text": self.text, "dataset": self.dataset}.get(self.source)
        if self.init is not None and not new_text:
            self._fail("text", "an --init run trains on new text: give --text FILES or --dataset PATH")
        if self.streaming and self.source != "dataset":
            self._fail("streaming", "streaming reads a --dataset")
        if self.distill_from is not None and self.init is not None:
            self._fail("distill_from", "a draft is trained from scratch: give --distill-from or --init")
        if self.distill_from is not None and self.streaming:
            self._fail("distill_from", "a draft is distilled from a text held in memory, not --streaming")
        super()._check()


@dataclass(frozen=True)
class LabeledData(EncoderData, DatasetData):
    """Labeled examples for a classifier.

    Examples come from ``train_file`` and ``dev_file`` (TSV, CSV or JSON lines: ``file_format``,
    or by extension), their text from one or two ``text_columns`` and their label from
    ``label_column`` (a header name, or a 0-based index written in digits; null: the defaults of
    :mod:`vaswani.data.labeled`), or from the ``split`` and ``dev_split`` of a Hugging Face ``dataset``
    (:class:`DatasetData`; the label column by default ``label``, the text columns by default its
    one or two string columns besides). ``labels`` is the label set of the training file (sorted), the
    classes in order. The encoder starts from the run ``init`` (null: from scratch, with a
    WordPiece vocabulary of ``vocab_size``, or with ``text_tokenizer`` "word" a word-level one of
    that many words: :class:`EncoderData`), and a text becomes one vector by ``pool`` ("cls": the
    pooled [CLS] state; "mean": the mean of its tokens' states). ``init`` may also be an ``lm`` run:
    a GPT classifier (GPT-1's), whose text's vector is its last real token's state ("last") or the
    mean, whose loss adds ``lm_weight`` times the language-modelling loss of the same input, and
    which keeps that run's tokenizer and its ``eos_token`` and ``bos_token``.
    """

    source: str = no_flag("labeled")
    init: str | None = flag(
        None, "start from this mlm or encoder run (BERT), or lm run (a GPT classifier)", metavar="RUN_DIR"
    )
    train_file: str | None = flag(None, "labeled training examples (.tsv, .csv or .jsonl)", flag="--train")
    dev_file: str | None = flag(None, "labeled examples to score on", flag="--dev")
    file_format: str | None = flag(
        None, "file format (default: the extension)", flag="--format", choices=LABELED_FORMATS
    )
    text_columns: tuple[str, ...] | None = flag(
        None,
        "the column of the text: a header name or a 0-based index (default: text, sentence, ... or the "
        "first); twice for sentence pairs",
        flag="--text-column",
        append=True,
    )
    label_column: str | None = flag(None, "the column of the label (default: label, ... or the last)")
    labels: tuple[str, ...] | None = no_flag(None)
    pool: str = flag(
        "cls",
        "the text's vector: pooled [CLS] (default) or mean of tokens; a GPT's: last (default) or mean",
        choices=CLASSIFIER_POOLS,
    )
    lm_weight: float = flag(
        0.5,
        "a GPT classifier's weight of the language-modelling loss beside the labels' (0.5, GPT-1's; 0: none)",
        range="[0, inf)",
    )
    eos_token: str | None = no_flag(None)  # a GPT classifier's: its --init run's (text pairs' separator)
    bos_token: str | None = no_flag(None)  # a GPT classifier's: its --init run's
    vocab_size: int = flag(8000, "WordPiece vocabulary size from scratch (default 8000)", range="(0, inf)")

    def _check(self) -> None:
        super()._check()
        self._one_of("source", ("labeled",))
        self._one_of("pool", CLASSIFIER_POOLS)
        if self.file_format is not None:
            self._one_of("file_format", LABELED_FORMATS)
        if self.text_columns is not None and len(self.text_columns) not in (1, 2):
            self._fail("text_columns", f"one or two (a text, or a pair), got {len(self.text_columns)}")
        if self.labels is not None and (len(self.labels) < 2 or len(set(self.labels)) < len(self.labels)):
            self._fail("labels", f"two or more distinct labels, got {list(self.labels)}")
        self._refuse_files("train_file", "dev_file")
        if self.dataset is None and (self.train_file is None or self.dev_file is None):
            self._fail("train_file", "source 'labeled' needs 'train_file' and 'dev_file' (or a dataset)")


DIGITS = 1797  # images in scikit-learn's digits


@dataclass(frozen=True)
class ImageData(DataConfig):
    """Images for a classifier: scikit-learn's digits (``source="digits"``) or the folder
    ``data_dir`` (``source="folder"``); ``source="imported"`` is a run imported from a checkpoint,
    with no images of its own. ``classes`` are the class names in order (the digits' 0-9, or the
    folder's subfolders, sorted); none (``()``) is an imported ``ViTModel``: an encoder without a
    classifier, which ``--init`` fine-tunes. ``init`` is the image run whose ViT a new run starts from
    (its model, weights and preprocessing; the classifier is new, for the data's classes)."""

    source: str = no_flag("digits")
    data_dir: str | None = flag(
        None, "a folder of one subfolder of images per class (default: scikit-learn's digits)", flag="--data"
    )
    seed: int = flag(0, "seed of the held-out splits", flags=("--data-seed",), range="[0, 4294967296)")
    valid_fraction: float = flag(0.1, "images held out for validation (default 0.1)", range="(0, 0.5)")
    test_fraction: float = flag(
        0.2, "digits held out for the test after training (default 0.2)", range="(0, 0.5)"
    )
    crop_scale: float | None = flag(
        None,
        "random resized crops of at least this fraction of the area (default: none)",
        flag="--random-crop",
        metavar="MIN",
        range="(0, 1]",
    )
    flip: bool = flag(False, "mirror training images left-right at random")
    skip_bad_images: bool = flag(False, "skip (and count) unreadable image files")
    init: str | None = flag(
        None,
        "start from this image run's ViT (e.g. one imported with import-hf), with a new classifier",
        metavar="RUN_DIR",
    )
    classes: tuple[str, ...] | None = no_flag(None)

    def _check(self) -> None:
        self._one_of("source", ("digits", "folder", "imported"))
        if self.source == "folder" and self.data_dir is None:
            self._fail("data_dir", "source 'folder' needs the image folder (--data DIR)")
        if self.source == "imported" and (self.data_dir is not None or self.init is not None):
            self._fail("source", "an imported run has no data folder and no --init of its own")
        headless = self.classes == () and self.source == "imported"  # an imported ViTModel
        if (
            self.classes is not None
            and not headless
            and (len(self.classes) < 2 or len(set(self.classes)) < len(self.classes))
        ):
            self._fail("classes", f"two or more distinct classes, got {list(self.classes)}")


@dataclass(frozen=True)
class NatData(ParallelData):
    """A translation run's data (:class:`~vaswani.data.config.ParallelData`), and ``distill_from``: an
    autoregressive translation run whose beam-5 translations of the training sources replace the
    training targets (sequence-level knowledge distillation, Kim and Rush 2016); its tokenizers must
    be the ones this run trains on the same data."""

    distill_from: str | None = flag(
        None, "train on this translation run's beam-5 translations of the training sources", metavar="RUN_DIR"
    )

    def _check(self) -> None:
        super()._check()
        if self.objective != "token":
            self._fail(
                "objective",
                "a nat run learns by its masked-token loss (minimum risk training is translation's)",
            )


@dataclass(frozen=True)
class TagData(EncoderData, DatasetData):
    """Tagged sentences for a tagger (CoNLL-U or column files, :mod:`vaswani.data.conll`):
    ``train_file`` and ``dev_file``, their tags in ``column`` (null: UPOS, or a column file's last
    field), or the ``split`` and ``dev_split`` of a Hugging Face ``dataset`` (:class:`DatasetData`),
    each row a sentence: its words in ``tokens_column``, its tags in ``tags_column`` (null: the first
    of ``tags``, ``ner_tags``, ``upos``, ``pos_tags`` it has);
    ``tags`` is the tag set of the training file (sorted), the classes in order. The
    encoder starts from the run ``init`` (null: from scratch, with a WordPiece or word-level
    vocabulary of ``vocab_size``: see :class:`~vaswani.data.config.EncoderData`)."""

    train_file: str | None = flag(
        None, "training sentences: CoNLL-U, or a word and its tag a line (CoNLL-2003 style)", flag="--train"
    )
    dev_file: str | None = flag(None, "sentences to score on (the same format)", flag="--dev")
    column: str | None = flag(
        None,
        "the tags' column: a CoNLL-U field (UPOS, the default; XPOS, DEPREL...) or a column number "
        "from 1 (default for a column file: its last)",
        metavar="COLUMN",
    )
    tokens_column: str = flag("tokens", "the --dataset column of a sentence's words (default tokens)")
    tags_column: str | None = flag(
        None, "the --dataset column of their tags (default: tags, ner_tags, upos or pos_tags)"
    )
    tags: tuple[str, ...] | None = no_flag(None)
    vocab_size: int = flag(8000, "WordPiece vocabulary size from scratch (default 8000)", range="(0, inf)")

    def _check(self) -> None:
        super()._check()
        problem = None if self.column is None else column_problem(self.column)
        if problem is not None:
            self._fail("column", f"--column must be {problem}")
        if self.tags is not None and (len(self.tags) < 2 or len(set(self.tags)) < len(self.tags)):
            self._fail("tags", f"two or more distinct tags, got {list(self.tags)}")
        self._refuse_files("train_file", "dev_file")
        if self.dataset is None and (self.train_file is None or self.dev_file is None):
            self._fail("train_file", "a tagger needs 'train_file' and 'dev_file' (or a dataset)")
