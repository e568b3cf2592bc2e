"""What every task that fine-tunes a BERT encoder shares (``classify``, ``tag``): starting from a
pretrained run (``--init``), batches of examples of similar length, and a budget in epochs.

A fine-tuning run starts from a pretrained ``mlm`` or ``encoder`` run, whose model config, weights
and tokenizer it takes (all but the dropout), or from scratch (a WordPiece or word-level tokenizer
of the training text, and pretrained word vectors in the embedding if given); its batches hold ``batch_size``
examples, not a number of tokens; and ``epochs`` sets the steps, the warmup (the first 10%) and the
evaluation interval (once an epoch) where they are not given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from vaswani import recipes
from vaswani.config import RunConfig, padded_vocab_size
from vaswani.data.words import train_bert_words
from vaswani.errors import ConfigError
from vaswani.models.bert import POOLER_KEYS, Bert, MaskedLM
from vaswani.pipelines.bert import BERT_TASKS, read_bert_run
from vaswani.pipelines.bert import model_of as bert_model_of
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.tasks.settings import absolute, one_stack
from vaswani.tasks.word_vectors import EmbeddingRows, embedding_rows, sized_for, with_word_vectors
from vaswani.tokenizer import WordPieceTokenizer
from vaswani.training.progress import Stage

WARMUP_FRACTION = 0.1
FILE_FIELDS = ("train_file", "dev_file", "init", "word_vectors", "dataset")


def pretrained_bert(init: Path) -> tuple[RunConfig, Bert, WordPieceTokenizer]:
    """The config, encoder and tokenizer of a pretrained run (task ``mlm`` or ``encoder``)."""
    run, tokenizer = read_bert_run(init, BERT_TASKS, "--init")
    model = RunDir(init).load_weights(bert_model_of(run))
    return run, model.bert if isinstance(model, MaskedLM) else model, tokenizer


def copy_encoder(into: Bert, pretrained: Bert) -> None:
    """Copy a pretrained encoder's weights into the encoder ``into``: a pooler ``into`` lacks is
    left out, one that the pretrained encoder lacks keeps its fresh initialisation."""
    state = {
        k: v for k, v in pretrained.state_dict().items() if into.pooler is not None or k not in POOLER_KEYS
    }
    missing, unexpected = into.load_state_dict(state, strict=False)
    if unexpected or set(missing) - set(POOLER_KEYS):
        raise ConfigError(
            f"the --init encoder does not fit this model (missing {missing}, unexpected {unexpected})"
        )


def epoch_settings(train: dict[str, Any], n_examples: int, batch_size: int, epochs: float) -> dict[str, Any]:
    """``train`` with what was not set taken from ``epochs``: ``max_steps`` (the steps of that
    many epochs), ``warmup_steps`` (10% of them) and ``eval_every`` (once an epoch). The epochs
    are then written as those steps (``epochs`` left out), so that a resume may extend them."""
    per_epoch = math.ceil(n_examples / batch_size)
    out = {k: v for k, v in train.items() if k != "epochs"}
    out.setdefault("max_steps", max(1, math.ceil(epochs * per_epoch)))
    out.setdefault("warmup_steps", int(WARMUP_FRACTION * out["max_steps"]))
    out.setdefault("eval_every", per_epoch)
    return out


def refuse_model_flags(flags: Sections) -> None:
    """A model flag other than ``--dropout`` beside ``--init``: a one-line error naming it (the model
    of an ``--init`` run is the pretrained run's)."""
    fixed = [name for name in flags.get("model", {}) if name != "dropout"]
    if fixed:
        name = "layers" if fixed[0] == "n_layers" else fixed[0]
        flag_name = name.replace("_", "-")
        raise ConfigError(f"--{flag_name}: the model of an --init run is fixed (only --dropout may change)")


def fine_tuning_rules(
    sections: Sections, flags: Sections, source: str, recipe: str, needs: str, examples: str
) -> None:
    """The rules every fine-tuning task's ``configure`` applies, in place: ``--train`` and
    ``--dev`` (or ``--dataset``) are required (``needs`` says what, e.g. "train classify needs
    --train and --dev files"), batches are counted in ``examples`` (``--batch-tokens`` is refused),
    the model of an ``--init`` run is fixed but its dropout (a flag or a config file that changes
    it is refused; ``recipe`` is the packaged recipe it started from), the model is encoder-only,
    and the files are stored absolute."""
    model, data = sections.setdefault("model", {}), sections.setdefault("data", {})
    if data.get("dataset") is None and (data.get("train_file") is None or data.get("dev_file") is None):
        raise ConfigError(f"{needs} (or --dataset PATH, or --resume RUN_DIR)")
    if "batch_tokens" in flags.get("train", {}):
        raise ConfigError(f"--batch-tokens: these batches hold --batch-size {examples}")
    if data.get("init") is not None:
        fixed_model(sections, flags, source, recipe)
    one_stack(model, "encoder_only", source)
    absolute(data, FILE_FIELDS)


def fixed_model(sections: Sections, flags: Sections, source: str, recipe: str) -> None:
    """Refuse a change to the model of an ``--init`` run, whose model config is the run's: a model
    flag other than ``--dropout``, or a config file's model field that differs from the packaged
    ``recipe`` the run started from (every task that starts from a pretrained run applies it)."""
    refuse_model_flags(flags)
    model = sections.get("model", {})
    defaults = recipes.packaged(recipe)["model"]
    changed = [k for k in model if k != "dropout" and model[k] != defaults.get(k)]
    if changed:
        raise ConfigError(
            f"{source}: config field 'model.{changed[0]}': the model of an --init run is fixed "
            "(only dropout may change)"
        )


def init_recipe(task: str, flags: Sections) -> str:
    """A fine-tuning task's recipe: ``TASK`` from scratch, ``TASK-init`` from a pretrained run."""
    return f"{task}-init" if "init" in flags.get("data", {}) else task


def with_encoder(build: Callable[[], nn.Module], pretrained: Bert | None) -> Callable[[], nn.Module]:
    """``build`` (a model with a ``bert`` encoder) followed, when there is one, by copying the
    ``pretrained`` encoder into it (:func:`copy_encoder`)."""

    def built() -> nn.Module:
        model = build()
        if pretrained is not None:
            copy_encoder(model.bert, pretrained)  # type: ignore[arg-type]
        return model

    return built


def scratch_encoder(
    run: RunConfig, texts: Sequence[str], quiet: bool
) -> tuple[RunConfig, WordPieceTokenizer, EmbeddingRows | None]:
    """A new encoder's tokenizer trained on ``texts`` (WordPiece, or word-level with
    ``data.text_tokenizer`` "word"), the run config sized to it, and the embedding rows of
    ``data.word_vectors`` (None without; their count printed unless ``quiet``)."""
    spec, max_len = run.data, run.model.max_len
    kind = "word-level" if spec.text_tokenizer == "word" else "WordPiece"
    with Stage(f"training a {kind} tokenizer on {len(texts):,} texts", quiet=quiet):
        if spec.text_tokenizer == "word":
            tokenizer = train_bert_words(texts, spec.vocab_size, max_len=max_len)
        else:
            tokenizer = WordPieceTokenizer.train(texts, spec.vocab_size, max_len=max_len)
    model = run.model.replace(vocab_size=padded_vocab_size(tokenizer.vocab_size), pad_id=tokenizer.pad_id)
    rows = embedding_rows(spec, tokenizer, model.d_model) if spec.word_vectors is not None else None
    if rows is not None and not quiet:
        print(rows.report)
    return RunConfig(run.task, sized_for(model, rows), run.train, spec), tokenizer, rows


def encoder_builder(
    build: Callable[[], nn.Module], pretrained: Bert | None, rows: EmbeddingRows | None, freeze: bool
) -> Callable[[], nn.Module]:
    """``build`` (a model with a ``bert`` encoder), the ``pretrained`` encoder copied into it
    (:func:`with_encoder`), then the word vectors ``rows`` and ``freeze`` applied to its word table
    (:func:`~vaswani.tasks.word_vectors.with_word_vectors`)."""
    return with_word_vectors(with_encoder(build, pretrained), lambda m: m.bert.embed, rows, freeze)  # type: ignore[union-attr]
