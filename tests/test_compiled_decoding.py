"""Compiled decoding (``--compile``): the decoding step through ``torch.compile`` on a static KV
cache gives eager's ids, greedy and sampled, for a GPT and a translator; one graph serves every
prompt length and batch size of a bucket; a backend that fails, or a machine where compilation
cannot work, gives eager decoding after one line. The fast tests compile with the "eager" backend
(dynamo's tracing, the graph run as it is); one test compiles with inductor, where
``VASWANI_TEST_INDUCTOR=1`` asks for it (``benchmarks/compiled_generation.py`` checks inductor's
tokens too). ``--compile`` on the command line: ``tests/test_bad_inputs.py``."""

from __future__ import annotations

import os

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from tests.helpers import left_padded, position_gpt
from vaswani.config import ModelConfig
from vaswani.generation import compiled as compiled_module
from vaswani.generation.compiled import CompiledDecoding, ModelChanged, bucket, lm_compiled_next_logits
from vaswani.generation.config import DecodingConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.layers.linear import Linear
from vaswani.layers.quantize import Int8Linear, quantize_int8
from vaswani.models.transformer import Transformer

FALLBACK = "vaswani: --compile: torch.compile does not work here ("
PROMPTS = [[5, 6, 7, 8, 9], [3, 4], [12, 2, 9]]
GREEDY = DecodingConfig(max_new_tokens=12)
SAMPLED = DecodingConfig(temperature=1.5, top_k=8, seed=3, max_new_tokens=12)
VOCAB = 20  # of the GPT's 24 embedding rows: the rest are never chosen


def _lm_ids(model, prompts, decoding, compiled=None) -> list[list[int]]:
    ids, mask = left_padded(prompts)
    budget = decoding.max_new_tokens
    if compiled is None:
        next_logits = lm_next_logits(model, mask, True, VOCAB)
    else:
        next_logits = lm_compiled_next_logits(model, mask, budget, compiled, VOCAB)
    with torch.no_grad():
        out = generate(next_logits, ids, budget, 23, 0, decoding, decoding.generator())
    return out.tokens.tolist()


def test_bucket_is_the_next_power_of_two():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 17)] == [1, 2, 4, 4, 8, 32]
    assert bucket(3, 64) == 64 and bucket(65, 64) == 128


@pytest.mark.parametrize("decoding", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize(
    ("scheme", "kv_heads", "window"), [("rope", 1, None), ("learned", None, 2), ("alibi", None, None)]
)
def test_compiled_gpt_generates_the_eager_ids(scheme, kv_heads, window, decoding):
    model = position_gpt(scheme, max_len=64, window=window, n_kv_heads=kv_heads).float()
    compiled = CompiledDecoding(CompileCounterWithBackend("eager"))
    assert _lm_ids(model, PROMPTS, decoding, compiled) == _lm_ids(model, PROMPTS, decoding)
    assert compiled.failure is None and compiled.buckets == {("lm", 4, 64)}


def test_a_compile_mode_compiles_too():
    # torch.compile takes a mode or options, not both: with a mode, the guard filter is left out.
    model = position_gpt("rope", max_len=64).float()
    compiled = CompiledDecoding(CompileCounterWithBackend("eager"), mode="default")
    assert _lm_ids(model, PROMPTS, GREEDY, compiled) == _lm_ids(model, PROMPTS, GREEDY)
    assert compiled.failure is None and compiled.buckets == {("lm", 4, 64)}


def test_one_graph_serves_every_prompt_length_and_batch_size_of_a_bucket():
    model = position_gpt("rope", max_len=64).float()
    counter = CompileCounterWithBackend("eager")
    compiled = CompiledDecoding(counter)
    batches = [PROMPTS, [[1, 2, 3, 4, 5, 6, 7, 8, 9]], *([[4] * n, [7] * (n + 2)] for n in (1, 3, 6))]
    wide = [[[3, 4]] * 4, [[1, 2, 3]] * 3]  # three and four rows share the bucket of four
    for prompts in [*batches[:1], *batches[2:], *wide]:
        assert _lm_ids(model, prompts, GREEDY, compiled) == _lm_ids(model, prompts, GREEDY)
    assert counter.frame_count == 2  # rows 4 (3 and 4 prompts) and rows 2, every prompt length
    _lm_ids(model, batches[1], GREEDY, compiled)
    assert counter.frame_count == 3  # a single prompt: the bucket of one row
    assert compiled.buckets == {("lm", 4, 64), ("lm", 2, 64), ("lm", 1, 64)}
    assert compiled.compile_seconds > 0


def _second_step_logits(model, compiled=None) -> torch.Tensor:
    """The logits (rows, vocab) of the step after the prompts' prefill (compiled where asked)."""
    ids, mask = left_padded(PROMPTS)
    if compiled is None:
        next_logits = lm_next_logits(model, mask, True, VOCAB)
    else:
        next_logits = lm_compiled_next_logits(model, mask, 4, compiled, VOCAB)
    with torch.no_grad():
        next_logits(ids)
        return next_logits(torch.cat([ids, ids[:, -1:] + 1], dim=1))


def test_each_compiled_decoding_runs_its_own_models_graphs():
    # The graphs run without guards on the model: two models whose steps take the same tensors
    # and differ only in an attribute (the norms' eps, a constant of the graph) must still each
    # run their own graph.
    first, second = position_gpt("rope", max_len=64).float(), position_gpt("rope", max_len=64).float()
    for module in second.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 0.5
    eager = [_second_step_logits(model) for model in (first, second)]
    assert not torch.allclose(eager[0], eager[1], atol=1e-3)
    backend = CompileCounterWithBackend("eager")  # one backend, as "inductor" is for every model
    for model, logits in zip((first, second), eager, strict=True):
        torch.testing.assert_close(_second_step_logits(model, CompiledDecoding(backend)), logits)


def test_a_compiled_decoding_refuses_another_model_or_a_changed_one():
    model = position_gpt("rope", max_len=64).float()
    compiled = CompiledDecoding(CompileCounterWithBackend("eager"))
    _lm_ids(model, PROMPTS, GREEDY, compiled)
    with pytest.raises(ModelChanged, match="the model of its first run"):
        _lm_ids(position_gpt("rope", max_len=64).float(), PROMPTS, GREEDY, compiled)
    with pytest.raises(ModelChanged, match=r"\(False, torch.float32\) → \(True, torch.float32\)"):
        _lm_ids(model.train(), PROMPTS, GREEDY, compiled)
    with pytest.raises(ModelChanged, match=r"→ \(False, torch.float64\)"):
        _lm_ids(model.eval().double(), PROMPTS, GREEDY, compiled)
    assert _lm_ids(model.float(), PROMPTS, GREEDY, compiled) == _lm_ids(model, PROMPTS, GREEDY)


def test_batch_1_decoding_reads_blocked_weights_which_follow_weights_changed_in_place():
    """A bucket of one row compiles its products from the blocked copies of the weights
    (``vaswani.layers.kernels.blocked_product``); after an in-place change of the weights (an
    optimizer's step) the same graphs give the changed model's eager ids, not the old ones."""
    model = position_gpt("rope", max_len=64).float()
    compiled = CompiledDecoding(CompileCounterWithBackend("eager"))
    one = PROMPTS[:1]
    before = _lm_ids(model, one, GREEDY)
    assert _lm_ids(model, one, GREEDY, compiled) == before and compiled.buckets == {("lm", 1, 64)}
    projections = [m for m in model.modules() if isinstance(m, Linear)]
    assert projections and all(m.blocked is not None for m in projections)
    with torch.no_grad():
        torch.manual_seed(5)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    after = _lm_ids(model, one, GREEDY)
    assert after != before
    assert _lm_ids(model, one, GREEDY, compiled) == after
    assert compiled.backend.frame_count == 1  # the same graph throughout


def test_batch_1_decoding_of_int8_weights_is_the_weight_only_models():
    """``--quantize int8 --compile`` at one row multiplies by the blocked int8 weights in float32
    (weight-only): the ids of the float model whose weights are the dequantized s ⊙ q."""
    model = quantize_int8(position_gpt("rope", max_len=64).float())
    reference = position_gpt("rope", max_len=64).float()
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, Int8Linear):
                reference.get_submodule(name).weight.copy_(module.dequantized(torch.float32))
    compiled = CompiledDecoding(CompileCounterWithBackend("eager"))
    one = PROMPTS[:1]
    assert _lm_ids(model, one, GREEDY, compiled) == _lm_ids(reference, one, GREEDY)
    assert all(m.blocked is not None for m in model.modules() if isinstance(m, Int8Linear))


def _translator() -> Transformer:
    cfg = ModelConfig(
        src_vocab_size=15, tgt_vocab_size=15, d_model=16, n_heads=4, d_ff=32, n_encoder_layers=2,
        n_decoder_layers=2, dropout=0.0, position="sinusoidal", max_len=32, tie_embeddings="none", pad_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # a head that maps token y to about y + 1: long, varied outputs
        model.tgt_embed.token.weight.normal_(0.0, 1.0)
        model.output.weight.copy_(2 * model.tgt_embed.token.weight.roll(1, dims=0))
    return model


@pytest.mark.parametrize("decoding", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_compiled_translator_generates_the_eager_ids(decoding):
    model = _translator()
    counter = CompileCounterWithBackend("eager")
    compiled = CompiledDecoding(counter)
    sources = [
        torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 0, 0, 0], [12, 13, 14, 3, 4, 0]]),
        torch.tensor([[5, 6, 7], [8, 9, 0]]),  # shorter sources, fewer rows: another bucket of rows
        torch.tensor([[3, 4, 5, 6, 7], [9, 10, 11, 0, 0], [12, 13, 14, 3, 4]]),
    ]
    with torch.no_grad():
        for src in sources:
            eager = translate_ids(model, src, 1, 2, decoding, decoding.generator())
            fast = translate_ids(model, src, 1, 2, decoding, decoding.generator(), compiled=compiled)
            assert fast.tokens.tolist() == eager.tokens.tolist()
    assert counter.frame_count == 4  # the encoder and the steps: 4 rows × 8 source columns, then 2 rows × 8
    assert compiled.buckets == {
        ("seq2seq-encode", 4, 8), ("seq2seq", 4, 8, 32), ("seq2seq-encode", 2, 8), ("seq2seq", 2, 8, 32),
    }  # the context: 32; the first step (BOS) shares the steps' graph  # fmt: skip


def test_compiled_beam_search_gives_the_eager_beams():
    model = _translator()
    counter = CompileCounterWithBackend("eager")
    compiled = CompiledDecoding(counter)
    decoding = DecodingConfig(beam=3, n_best=2)  # budgets of 2 |x| + 10: the rows end at different steps
    src = torch.tensor(
        [
            [3, 4, 5, 6, 7, 8],
            [9, 10, 0, 0, 0, 0],
            [12, 13, 14, 3, 0, 0],
            [5, 0, 0, 0, 0, 0],
            [6, 7, 8, 0, 0, 0],
        ]
    )
    with torch.no_grad():
        eager = translate_beam_ids(model, src, 1, 2, decoding)
        fast = translate_beam_ids(model, src, 1, 2, decoding, compiled=compiled)
    assert fast.tokens.tolist() == eager.tokens.tolist()
    assert fast.lengths.tolist() == eager.lengths.tolist()
    torch.testing.assert_close(fast.scores, eager.scores)
    # 5 sentences: the encoder and the first step (8 rows, one hypothesis each) in graphs of their
    # own, then 8 rows × 3 hypotheses, and fewer as sentences end.
    assert {("seq2seq-encode", 8, 8), ("seq2seq-beam", 8, 8, 8, 32)} <= compiled.buckets
    later = [key for key in compiled.buckets if key[0] == "seq2seq-beam" and key[1] != key[2]]
    row_buckets = sorted(key[2] for key in later)
    assert row_buckets[-1] == 8 and len(row_buckets) > 1
    assert all(key[1] == 3 * key[2] for key in later)
    assert len(compiled.buckets) == len(later) + 2
    assert counter.frame_count == len(compiled.buckets)  # one graph a bucket, whatever the step


def _raising_backend(calls: list[int]):
    def backend(gm, example_inputs):
        calls.append(1)
        raise RuntimeError("no kernels today\nsecond line")

    return backend


def test_a_failing_compilation_decodes_eagerly_after_one_line(capsys):
    model = position_gpt("sinusoidal", max_len=64).float()
    calls: list[int] = []
    compiled = CompiledDecoding(_raising_backend(calls))
    for _ in range(2):
        assert _lm_ids(model, PROMPTS, SAMPLED, compiled) == _lm_ids(model, PROMPTS, SAMPLED)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vaswani:")]
    assert said == [FALLBACK + "RuntimeError: no kernels today); decoding without it"]
    assert calls == [1] and compiled.failure == "RuntimeError: no kernels today"  # never retried


def test_an_unsupported_machine_is_found_up_front(monkeypatch, capsys):
    monkeypatch.setattr(compiled_module, "compile_unsupported", lambda device, backend: "no compiler")
    assert CompiledDecoding.where_supported(torch.device("cpu")) is None
    assert capsys.readouterr().err == FALLBACK + "no compiler); decoding without it\n"


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("VASWANI_TEST_INDUCTOR"),
    reason="inductor's C++ compilation takes 30-90 s on two cores: VASWANI_TEST_INDUCTOR=1 runs it",
)
def test_inductor_compiled_gpt_generates_the_eager_ids():
    model = position_gpt("rope", max_len=64, n_kv_heads=1).float()
    compiled = CompiledDecoding.where_supported(torch.device("cpu"), "inductor")
    if compiled is None:
        pytest.skip("inductor cannot compile here")
    assert _lm_ids(model, PROMPTS, GREEDY, compiled) == _lm_ids(model, PROMPTS, GREEDY)
    assert _lm_ids(model, PROMPTS[:1], GREEDY, compiled) == _lm_ids(model, PROMPTS[:1], GREEDY)  # blocked
    assert compiled.failure is None
