"""An ``lm`` run in use: its files (``config.json``, ``tokenizer.json``, the weights), the GPT its
config builds, and :class:`LanguageModel`, which generates from it and scores text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from vaswani.config import RunConfig
from vaswani.data.config import LMData
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.generation.compiled import CompiledDecoding, lm_compiled_next_logits, say_fallback
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.lm import cut_at_stop, held_back, lm_budget, lm_next_logits
from vaswani.generation.sampling import Generated, NextLogits, generate
from vaswani.generation.speculative import Speculation, is_greedy, speculative_greedy
from vaswani.models.gpt import GPT
from vaswani.pipelines.common import model_device
from vaswani.pipelines.lm_text import (
    encode_documents,
    run_tokenizer,
    stream_loss,
)
from vaswani.rundir import RunDir
from vaswani.runtime import CompileBackend, resolve_device
from vaswani.tokenizer import LMTokenizer

TASK = "lm"
TOKENIZER = "tokenizer.json"


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
        if self.model.training:  # eval() walks every module: not on each call
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


def model_of(run: RunConfig) -> GPT:
    """The (untrained) model of a language-model run."""
    return GPT(run.model)
