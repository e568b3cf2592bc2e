"""Language modelling: the task adapter (next-token prediction) and the model that uses a run.

Text comes from the user's files or, by default, from Python's own documentation
(:mod:`vaswani.data.text`). The token stream is cut into windows of ``max_len + 1``
tokens: the model reads the first ``max_len`` and predicts each next one. A new run starts from
random weights and a tokenizer trained on its text, or (``--init``) continues an lm run on new
text: that run's model config (but the dropout), tokenizer and weights.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vaswani.config import RunConfig, padded_vocab_size
from vaswani.data.config import LMData
from vaswani.data.text import read_documents, split_documents
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.generation.compiled import CompiledDecoding, lm_compiled_next_logits, say_fallback
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.lm import cut_at_stop, held_back, lm_budget, lm_next_logits
from vaswani.generation.sampling import Generated, NextLogits, generate
from vaswani.generation.speculative import Speculation, is_greedy, speculative_greedy
from vaswani.models.gpt import GPT
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.runtime import CompileBackend, resolve_device
from vaswani.tasks.evaluation import Evaluation, model_device, prepare_inference
from vaswani.tasks.finetune import fixed_model
from vaswani.tasks.lm_text import (
    WindowBatches,
    encode_documents,
    load_documents,
    next_token_loss,
    run_tokenizer,
    stream_loss,
)
from vaswani.tasks.settings import absolute, text_recipe, text_run
from vaswani.tokenizer import LMTokenizer
from vaswani.training.trainer import fit_run

TASK = "lm"
TOKENIZER = "tokenizer.json"
SAMPLE_PROMPT = "The "


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


class LanguageModel:
    """A trained GPT with its tokenizer: ``LanguageModel.load(run_dir).generate(["Once"])``.

    Generation runs on the model's device (the one ``load`` was given, or that of a model in
    memory); the text comes back to the CPU as it is decoded."""

    def __init__(self, model: GPT, tokenizer: LMTokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.compiled: CompiledDecoding | None = None
        self.speculation: Speculation | None = None  # the counts of the last speculative generation

    def compile_decoding(self, backend: CompileBackend | None = None, mode: str | None = None) -> None:
        """Generate through ``torch.compile`` on a static KV cache from now on, wherever the prompt
        and the budget fit the context (:mod:`vaswani.generation.compiled`), or eagerly after one
        line on stderr where compilation cannot work here."""
        self.compiled = CompiledDecoding.where_supported(model_device(self.model), backend, mode)

    def _next_logits(self, mask: Tensor, decoding: DecodingConfig, budget: int) -> NextLogits:
        """The next-token function of a generation: compiled where :meth:`compile_decoding` asked
        for it and the prompt (``mask``: (batch, prompt_len)) and ``budget`` fit the context."""
        vocab, context = self.tokenizer.vocab_size, self.model.config.max_len
        if self.compiled is not None and decoding.use_cache:
            if mask.shape[1] + budget <= context:
                return lm_compiled_next_logits(self.model, mask, budget, self.compiled, vocab)
            say_fallback(f"{mask.shape[1]} prompt and {budget} new tokens exceed the context of {context}")
        return lm_next_logits(self.model, mask, decoding.use_cache, vocab)

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> LanguageModel:
        """The language model of an ``lm`` run, on ``device`` (auto, cpu, cuda, cuda:N, mps); the
        weights are read on the CPU, then moved."""
        where = resolve_device(device)
        folder = RunDir(run_dir)
        run = folder.read_config(TASK, LMData)
        tokenizer = run_tokenizer(folder.file(TOKENIZER), run.data)
        check_vocab(run, tokenizer, folder.path)
        model = folder.load_weights(GPT(run.model)).to(where)
        model.eval()
        return cls(model, tokenizer)

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Left-padded prompt ids (batch, longest) and their mask (True on real tokens), on the
        CPU. An empty prompt starts from ``<|endoftext|>``, as a new document."""
        context = self.model.config.max_len
        rows = [ids or [self.tokenizer.eos_id] for ids in self.tokenizer.encode_batch(list(prompts))]
        for number, row in enumerate(rows, start=1):
            if len(row) >= context:
                raise DataError(
                    f"prompt {number}: {len(row)} tokens do not fit the model's context of {context} "
                    "(model.max_len) with room to generate"
                )
        longest = max(len(r) for r in rows)
        ids = torch.full((len(rows), longest), self.tokenizer.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), longest, dtype=torch.bool)
        for i, row in enumerate(rows):
            ids[i, longest - len(row) :] = torch.tensor(row)
            mask[i, longest - len(row) :] = True
        return ids, mask

    def generate(
        self,
        prompts: Sequence[str],
        decoding: DecodingConfig = GREEDY,
        stream: Callable[[str], None] | None = None,
        draft: GPT | None = None,
        draft_tokens: int | None = None,
    ) -> list[str]:
        """The continuation of each prompt (without the prompt), greedy or sampled as ``decoding``
        says, cut before the first of its ``stop`` strings; generation ends at
        ``<|endoftext|>``, after ``decoding.max_new_tokens`` tokens (default 100), or when every
        row has met a stop string. ``stream`` receives the first row's text as it grows. No
        prompts give no continuations (``[]``); a prompt that leaves no room in the context is a
        :class:`~vaswani.errors.DataError` (see :meth:`encode_prompts`). With a ``draft`` model (of
        the same tokenizer) one greedy prompt is decoded speculatively, ``draft_tokens`` proposals
        a round (None: adaptive); the output is the greedy one, and :attr:`speculation` keeps the
        counts of proposed and accepted tokens."""
        max_new_tokens, stop = lm_budget(decoding), decoding.stop
        if not prompts:
            return []
        self.model.eval()
        device = model_device(self.model)
        ids, mask = (t.to(device) for t in self.encode_prompts(prompts))
        generator = decoding.generator(device)
        rows: list[list[int]] = [[] for _ in prompts]
        shown = 0

        def on_step(choice: Tensor) -> bool:
            nonlocal shown
            for row, token in zip(rows, choice.tolist(), strict=True):
                if not row or row[-1] != self.tokenizer.eos_id:
                    row.append(token)
            texts = [self.tokenizer.decode(row) for row in rows]
            if stream is not None:
                text, _ = cut_at_stop(texts[0], stop)
                safe = len(text) - held_back(text, stop)
                if safe > shown:
                    stream(text[shown:safe])
                    shown = safe
            return all(cut_at_stop(text, stop)[1] for text in texts) if stop else False

        watch = on_step if stream is not None or stop else None
        if draft is not None:
            if not is_greedy(decoding):
                raise ConfigError("--draft decodes greedily: give --temperature 0 and no --top-k/--top-p")
            eos, vocab = self.tokenizer.eos_id, self.tokenizer.vocab_size
            self.speculation = speculative_greedy(
                self.model, draft, ids, max_new_tokens, eos, vocab, draft_tokens, watch
            )
            result = Generated(self.speculation.tokens)
        else:
            result = generate(
                self._next_logits(mask, decoding, max_new_tokens),
                ids,
                max_new_tokens,
                self.tokenizer.eos_id,
                self.tokenizer.pad_id,
                decoding,
                generator,
                on_step=watch,
            )
        if not rows[0] and result.tokens.shape[1]:  # no step was watched
            rows = [
                row[: row.index(self.tokenizer.eos_id) + 1] if self.tokenizer.eos_id in row else row
                for row in result.tokens.tolist()
            ]
        texts = [cut_at_stop(self.tokenizer.decode(row), stop)[0] for row in rows]
        if stream is not None and len(texts[0]) > shown:
            stream(texts[0][shown:])
        return texts

    def loss(self, text: str) -> float:
        """Mean next-token loss (nats per token) of ``text``."""
        self.model.eval()  # a model fresh from train_lm is still in training mode (dropout)
        return stream_loss(
            self.model, encode_documents(self.tokenizer, [text]), vocab_size=self.tokenizer.vocab_size
        )


def check_vocab(run: RunConfig, tokenizer: LMTokenizer, run_dir: Path) -> None:
    if tokenizer.vocab_size > run.model.vocab_size:
        raise ConfigError(
            f"{run_dir / TOKENIZER}: vocabulary of {tokenizer.vocab_size} does not fit the model's "
            f"embedding of {run.model.vocab_size}"
        )


def read_lm_run(run_dir: Path, purpose: str) -> tuple[RunConfig, LMTokenizer]:
    """The config and tokenizer of the lm run ``run_dir``; a run of another task is refused in one
    line saying what ``purpose`` needs."""
    folder = RunDir(run_dir)
    task = folder.read_config().task
    if task != TASK:
        raise RunDirError(f"{run_dir}: a run of task {task!r}; {purpose} needs a run of task {TASK}")
    run = folder.read_config(TASK, LMData)
    tokenizer = run_tokenizer(folder.file(TOKENIZER), run.data)
    check_vocab(run, tokenizer, folder.path)
    return run, tokenizer


def train_lm(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False
) -> tuple[dict[str, Any], LanguageModel, str]:
    """Train (or, with ``resume``, continue) a language model in ``run_dir``; return the
    metrics, the model and the name of its text. A new run with ``data.init`` takes that run's
    model config (but the dropout), tokenizer (and its special tokens) and weights."""
    documents, name = load_documents(run.data)
    train_docs, valid_docs = split_documents(documents, run.data.valid_fraction)
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
    else:
        tokenizer = LMTokenizer.train(train_docs, run.data.tokenizer, run.data.vocab_size)
        vocab = padded_vocab_size(tokenizer.vocab_size)
        run = RunConfig(run.task, run.model.replace(vocab_size=vocab), run.train, run.data)
    check_vocab(run, tokenizer, run_dir)
    task = LMTask(
        run,
        encode_documents(tokenizer, train_docs),
        encode_documents(tokenizer, valid_docs),
        tokenizer.vocab_size,
    )
    metrics, model = fit_run(
        run, run_dir, task, build, lambda d: tokenizer.save(d / TOKENIZER), resume, quiet
    )
    assert isinstance(model, GPT)
    return metrics, LanguageModel(model, tokenizer), name


def model_of(run: RunConfig) -> GPT:
    """The (untrained) model of a language-model run."""
    return GPT(run.model)


def evaluate_run(run_dir: Path, request: Evaluation) -> list[str]:
    """Loss and perplexity of a language-model run on ``request.text``."""
    if not request.text:
        raise ConfigError("a language model is evaluated with --text FILE")
    lm = LanguageModel.load(run_dir, request.device)
    prepare_inference(lm.model, request.quantize, request.dtype)
    ids = encode_documents(lm.tokenizer, read_documents([str(t) for t in request.text]))
    loss = stream_loss(lm.model, ids, vocab_size=lm.tokenizer.vocab_size)
    return [f"loss {loss:.4f}  perplexity {math.exp(min(loss, 50.0)):.2f}  ({len(ids)} tokens)"]


def recipe(flags: Sections) -> str:
    """The embedded default job, the recipe for the user's text once ``--text`` is given, or the
    fine-tuning recipe (``lm-init``) of an ``--init`` run."""
    return f"{TASK}-init" if "init" in flags.get("data", {}) else text_recipe(TASK, flags)


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """A language-model run: a decoder-only model; ``--text`` and ``--init`` are stored absolute,
    the text read as the source; the model of an ``--init`` run is fixed (but its dropout) and so
    is its tokenizer."""
    data = sections.setdefault("data", {})
    if data.get("init") is not None:
        fixed_model(sections, flags, source, recipe(flags))
        kept = [name for name in ("tokenizer", "vocab_size") if name in flags.get("data", {})]
        if kept:
            raise ConfigError(f"--{kept[0].replace('_', '-')}: an --init run keeps its own tokenizer")
        absolute(data, ("init",))
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
