"""Language modelling: the task adapter (next-token prediction); a run in use is
:class:`vaswani.pipelines.lm.LanguageModel`.

Text comes from the user's files, a Hugging Face dataset (:mod:`vaswani.data.hf_datasets`; with
``--streaming``, token ids memory-mapped from the run directory: :mod:`vaswani.pipelines.lm_text`)
or, by default, from Python's own documentation (:mod:`vaswani.data.text`). The token stream is
cut into windows of ``max_len + 1`` tokens: the model reads the first ``max_len`` and predicts each
next one. A new run starts from random weights and a tokenizer trained on its text, or
(``--init``) continues an lm run on new text: that run's model config (but the dropout), tokenizer
and weights, or (``--distill-from``) is a draft for speculative decoding: random weights of its
own size, trained on another run's greedy continuations with that run's tokenizer.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import Tensor, nn
from tqdm import tqdm

from vaswani.config import RunConfig, padded_vocab_size
from vaswani.data.config import LMData
from vaswani.data.text import read_documents
from vaswani.errors import ConfigError, DataError
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.io import atomic_write
from vaswani.layers.quantize import prepare_weights
from vaswani.models.gpt import GPT
from vaswani.pipelines.lm import TASK, TOKENIZER, LanguageModel, check_vocab, model_of, read_lm_run
from vaswani.pipelines.lm_text import (
    STREAM_FILE,
    WindowBatches,
    encode_documents,
    next_token_loss,
    run_tokenizer,
    split_text,
    stream_ids,
    stream_loss,
    streamed_text,
    tokenizer_sample,
)
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.runtime import Resolved
from vaswani.tasks.evaluation import Evaluation, Report
from vaswani.tasks.finetune import fixed_model
from vaswani.tasks.settings import absolute, text_recipe, text_run
from vaswani.tokenizer import LMTokenizer
from vaswani.training.distributed import world
from vaswani.training.progress import Stage
from vaswani.training.trainer import fit_run

SAMPLE_PROMPT = "The "
DISTILLED_FILE = "distilled.safetensors"  # a draft's training and validation ids (--distill-from)
DISTILL_BATCH = 64  # prompts the target continues at once


class LMTask:
    """Next-token prediction on windows of ``max_len + 1`` tokens, ``batch_tokens // max_len``
    windows a batch, the window starts shuffled once by the seed (every offset is a window)."""

    batch_flag = "--batch-tokens"  # what to lower when a step runs out of memory

    def __init__(self, run: RunConfig, train_ids: Tensor, valid_ids: Tensor, vocab_size: int) -> None:
        self.context = run.model.max_len
        self.vocab_size = vocab_size
        self.train_ids, self.valid_ids = train_ids, valid_ids
        self.batch_size = max(1, run.train.batch_tokens // self.context)
        self.eval_windows = run.train.eval_sentences
        n_windows = len(train_ids) - self.context
        if n_windows < 1:
            raise DataError(
                f"the training text has {len(train_ids)} tokens, fewer than the context of "
                f"{self.context} + 1 (model.max_len)"
            )
        generator = torch.Generator().manual_seed(run.train.seed)
        self.starts = torch.randperm(n_windows, generator=generator)
        self.n_batches = max(1, n_windows // self.batch_size)

    def train_batches(self) -> WindowBatches:
        return WindowBatches(self.train_ids, self.starts, self.batch_size, self.context + 1, self.n_batches)

    def loss(self, model: nn.Module, batch: Tensor) -> tuple[Tensor, int]:
        return next_token_loss(model, batch, self.vocab_size)

    def batch_tokens(self, batch: Tensor) -> int:
        return batch.shape[0] * self.context

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        assert isinstance(model, GPT)
        loss = stream_loss(model, self.valid_ids, max_windows=self.eval_windows, vocab_size=self.vocab_size)
        return {"valid_loss": loss, "perplexity": math.exp(min(loss, 50.0))}


@torch.no_grad()
def distilled_ids(target: LanguageModel, ids: Tensor, length: int, quiet: bool = True) -> Tensor:
    """``target``'s greedy continuations of the text ``ids`` (a stream of token ids), as one stream:
    the text cut into chunks of ``length`` tokens, each chunk's first quarter (at least one token)
    kept as a prompt and the rest replaced by what ``target`` generates greedily from it (through
    its end of text, or to ``length`` tokens). A draft trained on it learns to predict the target's
    own argmax, which is what speculative decoding accepts. ``length`` must fit the target's
    context (``max_len``)."""
    prompt = max(1, length // 4)
    starts = torch.arange(0, len(ids) - prompt + 1, length)
    prompts = ids[starts[:, None] + torch.arange(prompt)]
    eos, pad = target.tokenizer.eos_id, target.tokenizer.pad_id
    target.model.eval()
    rows: list[Tensor] = []
    for batch in tqdm(prompts.split(DISTILL_BATCH), desc="distill", unit="batch", disable=quiet):
        mask = torch.ones_like(batch, dtype=torch.bool)
        step = lm_next_logits(target.model, mask, True, target.tokenizer.vocab_size)
        tokens = generate(step, batch, length - prompt, eos, pad, GREEDY).tokens
        for head, tail in zip(batch, tokens, strict=True):
            ended = (tail == eos).nonzero()
            rows += [head, tail[: int(ended[0]) + 1] if len(ended) else tail]
    return torch.cat(rows)


def distilled_text(
    run: RunConfig, run_dir: Path, train_ids: Tensor, valid_ids: Tensor, quiet: bool
) -> tuple[Tensor, Tensor]:
    """The training and validation streams of a draft (``data.distill_from``): the target's greedy
    continuations of each (:func:`distilled_ids`, chunks of the draft's context), made once and
    kept in ``run_dir`` (``DISTILLED_FILE``, written whole or not at all), where a resumed run reads
    them without the target."""
    path = run_dir / DISTILLED_FILE
    if path.is_file():
        kept = safetensors.torch.load_file(path)
        return kept["train"], kept["valid"]
    assert isinstance(run.data, LMData) and run.data.distill_from is not None
    target = LanguageModel.load(run.data.distill_from, "cpu")
    length = min(run.model.max_len, target.model.config.max_len)
    with Stage(f"distilling {run.data.distill_from}'s greedy continuations", quiet=quiet):
        train = distilled_ids(target, train_ids, length, quiet)
        valid = distilled_ids(target, valid_ids, length, quiet)
    if world().main:  # every process distills the same ids; one writes them
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(path, safetensors.torch.save({"train": train, "valid": valid}))
    return train, valid


def train_lm(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False, device: Resolved = None
) -> tuple[dict[str, Any], LanguageModel, str]:
    """Train (or, with ``resume``, continue) a language model in ``run_dir``; return the
    metrics, the model and the name of its text. A new run with ``data.init`` takes that run's
    model config (but the dropout), tokenizer (and its special tokens) and weights. A streamed
    dataset's tokenizer is trained on the start of its text, and its ids are memory-mapped from
    ``run_dir`` (where a resumed run finds them). A draft (``data.distill_from``) takes the target's
    tokenizer (and its special tokens) and trains on its greedy continuations (:func:`distilled_text`)."""
    streaming = isinstance(run.data, LMData) and run.data.streaming
    if streaming:
        read_train, valid_docs, name = streamed_text(run.data)
        train_docs = tokenizer_sample(read_train())
    else:
        train_docs, valid_docs, name = split_text(run.data)
    init: Path | None = None  # the run whose weights a new run starts from

    def build() -> GPT:
        model = model_of(run)
        return model if init is None else RunDir(init).load_weights(model)

    if resume:
        tokenizer = run_tokenizer(run_dir / TOKENIZER, run.data)
    elif isinstance(run.data, LMData) and run.data.init is not None:
        init = Path(run.data.init)
        pretrained, tokenizer = read_lm_run(init, "--init")
        kept = {k: getattr(pretrained.data, k) for k in ("tokenizer", "vocab_size", "eos_token", "bos_token")}
        model = pretrained.model.replace(dropout=run.model.dropout)
        run = RunConfig(run.task, model, run.train, run.data.replace(**kept))
    elif isinstance(run.data, LMData) and run.data.distill_from is not None:
        target, tokenizer = read_lm_run(Path(run.data.distill_from), "--distill-from")
        kept = {k: getattr(target.data, k) for k in ("tokenizer", "vocab_size", "eos_token", "bos_token")}
        model = run.model.replace(vocab_size=target.model.vocab_size)
        run = RunConfig(run.task, model, run.train, run.data.replace(**kept))
    else:
        what = f"training a {run.data.tokenizer} tokenizer on {len(train_docs):,} documents"
        with Stage(what, quiet=quiet):
            tokenizer = LMTokenizer.train(train_docs, run.data.tokenizer, run.data.vocab_size)
        vocab = padded_vocab_size(tokenizer.vocab_size)
        run = RunConfig(run.task, run.model.replace(vocab_size=vocab), run.train, run.data)
    check_vocab(run, tokenizer, run_dir)
    if streaming:
        run_dir.mkdir(parents=True, exist_ok=True)
        train_ids = stream_ids(tokenizer, read_train(), run_dir / STREAM_FILE)
    else:
        train_ids = encode_documents(tokenizer, train_docs)
    valid_ids = encode_documents(tokenizer, valid_docs)
    if isinstance(run.data, LMData) and run.data.distill_from is not None:
        train_ids, valid_ids = distilled_text(run, run_dir, train_ids, valid_ids, quiet)
    task = LMTask(run, train_ids, valid_ids, tokenizer.vocab_size)
    metrics, model = fit_run(
        run, run_dir, task, build, lambda d: tokenizer.save(d / TOKENIZER), resume, quiet, device=device
    )
    assert isinstance(model, GPT)
    return metrics, LanguageModel(model, tokenizer), name


def evaluate_run(run_dir: Path, request: Evaluation) -> Report:
    """Loss and perplexity of a language-model run on ``request.text``."""
    if not request.text:
        raise ConfigError("a language model is evaluated with --text FILE")
    lm = LanguageModel.load(run_dir, request.device)
    prepare_weights(lm.model, request.quantize, request.dtype)
    ids = encode_documents(lm.tokenizer, read_documents([str(t) for t in request.text]))
    loss = stream_loss(lm.model, ids, vocab_size=lm.tokenizer.vocab_size)
    return Report([f"loss {loss:.4f}  perplexity {math.exp(min(loss, 50.0)):.2f}  ({len(ids)} tokens)"])


def recipe(flags: Sections) -> str:
    """The embedded default job, the recipe for the user's text once ``--text`` is given, or the
    fine-tuning recipe (``lm-init``) of an ``--init`` run."""
    return f"{TASK}-init" if "init" in flags.get("data", {}) else text_recipe(TASK, flags)


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """A language-model run: a decoder-only model; ``--text``, ``--init`` and ``--distill-from`` are
    stored absolute, the text read as the source; the model of an ``--init`` run is fixed (but its
    dropout) and so is its tokenizer, as a draft's (``--distill-from``) is its target's."""
    data = sections.setdefault("data", {})
    for field, whose in (
        ("init", "an --init run keeps its own"),
        ("distill_from", "a draft keeps its target's"),
    ):
        if data.get(field) is None:
            continue
        if field == "init":
            fixed_model(sections, flags, source, recipe(flags))
        kept = [name for name in ("tokenizer", "vocab_size") if name in flags.get("data", {})]
        if kept:
            raise ConfigError(f"--{kept[0].replace('_', '-')}: {whose} tokenizer")
        absolute(data, (field,))
    return text_run(TASK, "decoder_only", LMData, sections, flags, source)


def finish(
    result: tuple[dict[str, Any], LanguageModel, str], run_dir: Path, started: float, quiet: bool
) -> list[str]:
    """The report after training: the validation loss and a sample."""
    metrics, lm, name = result
    lines = [
        f"\nvalid loss {metrics['valid_loss']:.3f}  perplexity {metrics['perplexity']:.1f}  "
        f"({name}, {metrics['steps']} steps, {metrics['tokens_per_second']:,.0f} tokens/s, "
        f"total {time.perf_counter() - started:.0f} s)"
    ]
    sample = lm.generate(
        [SAMPLE_PROMPT], DecodingConfig(max_new_tokens=120, temperature=0.8, top_k=50, seed=0)
    )[0]
    lines.append(f"\nsample:\n{SAMPLE_PROMPT}{sample}\n")
    lines.append(
        f'run directory: {run_dir}\n  vaswani generate {run_dir} "{SAMPLE_PROMPT}" --max-new-tokens 100'
    )
    return lines
