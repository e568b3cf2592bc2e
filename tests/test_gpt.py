"""The decoder-only model and its generation: causality, the tied head, the KV cache, left-padded
batches, the sliding context past ``max_len``, and sampling (temperature, top-k, top-p, seeds)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import choose_next, generate, sampling_probs
from vaswani.layers.blocks import BlockStack
from vaswani.models.gpt import GPT

DT = torch.float64
VOCAB = 24  # the embedding; the "tokenizer" below knows only the first REAL ids
REAL = 21
NEVER = 99  # an EOS id that is never produced: every step is compared
NORMS = ("post_ln", "pre_ln", "pre_rmsnorm")
POSITIONS = ("learned", "sinusoidal", "relative")


def _gpt(position="learned", norm="pre_ln", window=None, max_len=16, tie="none", layers=2) -> GPT:
    """A small random GPT in float64 whose greedy outputs are varied: the output head roughly maps
    token y to y + 1 (as in test_decoding.py), on top of small random weights (larger ones make the
    generations repeat one token)."""
    cfg = ModelConfig(
        arch="decoder_only", tgt_vocab_size=VOCAB, d_model=16, n_heads=2, d_ff=32,
        n_decoder_layers=layers, dropout=0.0, norm=norm, position=position, max_len=max_len,
        rel_clip=3, attn_window=window, tie_embeddings=tie, scale_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT(cfg).to(DT)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1 and "norm" not in name:
                p.normal_(0.0, 0.5 if "positions" in name else 0.15)
        model.embed.token.weight.normal_(0.0, 1.0)
        if tie == "none":
            model.output.weight.copy_(2 * model.embed.token.weight.roll(1, dims=0))
    return model.eval()


def _left_pad(prompts: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad, dtype=torch.long)
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, longest - len(p) :] = torch.tensor(p)
        mask[i, longest - len(p) :] = True
    return ids, mask


def _alone(model: GPT, prompt: list[int], steps: int, use_cache: bool, decoding=GREEDY, generator=None):
    ids, mask = _left_pad([prompt])
    next_logits = lm_next_logits(model, mask, use_cache, REAL)
    return generate(next_logits, ids, steps, NEVER, 0, decoding, generator, keep_logits=True)


def _not_degenerate(tokens: torch.Tensor) -> None:
    for row in tokens.tolist():
        assert len(set(row)) >= 3, f"degenerate generation {row}: the comparison would prove little"


# ---------------------------------------------------------------------------------------------
# The model


@pytest.mark.parametrize(
    "position,norm,window",
    [*itertools.product(POSITIONS, NORMS, [None]), *[(p, "pre_ln", 3) for p in POSITIONS]],
)
def test_changing_later_tokens_never_changes_earlier_logits(position, norm, window):
    model = _gpt(position, norm, window)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, 12), generator=g)
    base = model(tokens)
    for t in (0, 4, 10):
        changed = tokens.clone()
        changed[:, t + 1 :] = torch.randint(0, VOCAB, changed[:, t + 1 :].shape, generator=g)
        changed[:, t + 1] = (tokens[:, t + 1] + 1) % VOCAB  # surely different
        out = model(changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], atol=1e-10, rtol=0)
        # Not vacuous: the changed token does change its own logits.
        assert not torch.allclose(out[:, t + 1], base[:, t + 1], atol=1e-6)


@pytest.mark.parametrize("position", POSITIONS)
def test_attention_window_limits_what_a_position_sees(position):
    window = 3
    model = _gpt(position, window=window)
    tokens = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(2))
    base = model(tokens)
    changed = tokens.clone()
    changed[0, 0] = (tokens[0, 0] + 5) % VOCAB
    out = model(changed)
    # Two layers of a window of 3 see back at most 2 * 3 positions: position 7 and later do not
    # depend on token 0 at all (with the window off they would).
    torch.testing.assert_close(out[:, 2 * window + 1 :], base[:, 2 * window + 1 :], atol=1e-10, rtol=0)
    assert not torch.allclose(out[:, 1], base[:, 1], atol=1e-6)
    full = _gpt(position)
    assert not torch.allclose(full(changed)[:, -1], full(tokens)[:, -1], atol=1e-6)


@pytest.mark.parametrize("tie", ["output", "all"])
def test_tied_head_shares_storage_with_the_token_embedding(tie):
    model = _gpt(tie=tie)
    assert model.output.weight is model.embed.token.weight
    assert model.output.weight.data_ptr() == model.embed.token.weight.data_ptr()
    names = [name for name, _ in model.named_parameters()]
    assert "output.weight" not in names  # counted (and decayed, and saved) once
    with torch.no_grad():
        model.embed.token.weight[5].add_(1.0)
    assert torch.equal(model.output.weight[5], model.embed.token.weight[5])


def test_untied_head_has_its_own_weights():
    model = _gpt(tie="none")
    assert model.output.weight.data_ptr() != model.embed.token.weight.data_ptr()
    before = model.output.weight.clone()
    with torch.no_grad():
        model.embed.token.weight.add_(1.0)
    assert torch.equal(model.output.weight, before)


def test_gpt_is_the_shared_block_stack_without_cross_attention():
    model = _gpt(layers=3)
    assert isinstance(model.blocks, BlockStack)
    assert len(model.blocks.layers) == 3
    for block in model.blocks.layers:
        assert block.cross_attn is None and block.cross_attn_norm is None
        assert block.self_attn.causal
    assert not any("cross" in name for name, _ in model.named_parameters())


def test_gpt_refuses_an_encoder_decoder_config():
    with pytest.raises(ValueError, match="decoder_only"):
        GPT(ModelConfig(d_model=16, n_heads=2, d_ff=32, src_vocab_size=10, tgt_vocab_size=10))


# ---------------------------------------------------------------------------------------------
# The KV cache and left padding


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("norm", ["post_ln", "pre_rmsnorm"])
def test_cached_generation_equals_uncached(position, norm):
    model = _gpt(position, norm, max_len=16)
    prompt = [3, 7, 1, 12]
    steps = 30  # past max_len: the sliding context is compared too
    cached = _alone(model, prompt, steps, use_cache=True)
    uncached = _alone(model, prompt, steps, use_cache=False)
    assert cached.tokens.shape == (1, steps)
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.logits[..., :REAL], uncached.logits[..., :REAL], atol=1e-5, rtol=0)
    _not_degenerate(cached.tokens)
    assert not torch.allclose(cached.logits[:, 1:, :REAL], cached.logits[:, :-1, :REAL], atol=1e-3)


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [3, 4], [12], [2, 9, 9, 4, 17]]


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
def test_left_padded_batch_equals_each_prompt_alone(position, use_cache, window):
    model = _gpt(position, window=window, max_len=12)
    ids, mask = _left_pad(PROMPTS)
    steps = 30  # the context of 12 fills up more than once, at a different step in each row
    batch = generate(lm_next_logits(model, mask, use_cache, REAL), ids, steps, NEVER, 0, keep_logits=True)
    _not_degenerate(batch.tokens)
    for i, prompt in enumerate(PROMPTS):
        alone = _alone(model, prompt, steps, use_cache)
        assert batch.tokens[i].tolist() == alone.tokens[0].tolist(), f"row {i}"
        torch.testing.assert_close(batch.logits[i, :, :REAL], alone.logits[0, :, :REAL], atol=1e-6, rtol=0)


def test_left_padded_batch_with_a_trained_model(tiny_lm):
    """Float32, a lightly trained model and its tokenizer: the same logits and text batched or alone."""
    prompts = ["the cat sat on the", "a", "dog ran to the red hat and"]
    vocab = tiny_lm.tokenizer.vocab_size

    def run(batch):
        ids, mask = tiny_lm.encode_prompts(batch)
        next_logits = lm_next_logits(tiny_lm.model, mask, True, vocab)
        return generate(next_logits, ids, 40, NEVER, 0, keep_logits=True)

    together = run(prompts)
    for i, prompt in enumerate(prompts):
        alone = run([prompt])
        assert torch.equal(together.tokens[i], alone.tokens[0])
        torch.testing.assert_close(
            together.logits[i, :, :vocab], alone.logits[0, :, :vocab], atol=1e-4, rtol=0
        )
    assert not torch.allclose(together.logits[:, 1:, :vocab], together.logits[:, :-1, :vocab], atol=1e-2)
    greedy = DecodingConfig(max_new_tokens=40, temperature=0)
    texts = tiny_lm.generate(prompts, greedy)
    assert texts == [tiny_lm.generate([p], greedy)[0] for p in prompts]
    assert all(len(set(text)) >= 3 for text in texts)


# ---------------------------------------------------------------------------------------------
# The sliding context


def _reference_view_starts(prompt_len: int, steps: int, max_len: int) -> list[int]:
    """The documented policy for one row: when more than ``max_len`` tokens would be in view,
    the view restarts ``max_len // 2`` tokens before the end."""
    view_from, starts = 0, []
    for length in range(prompt_len, prompt_len + steps):
        if length - view_from > max_len:
            view_from = length - max_len // 2
        starts.append(view_from)
    return starts


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_sliding_context_never_feeds_more_than_max_len(position, use_cache):
    max_len = 10
    model = _gpt(position, max_len=max_len)
    seen: list[int] = []

    def watch(module, args, kwargs):  # the keys in view: cached ones and those fed now
        cached = kwargs["cache"][0].self_attn.length if kwargs.get("cache") else 0
        keys = cached + args[0].shape[1]
        if kwargs.get("attention_mask") is not None:
            assert kwargs["attention_mask"].shape[1] == keys
        seen.append(keys)

    handle = model.register_forward_pre_hook(watch, with_kwargs=True)
    prompt = [4, 8, 15]
    steps = 4 * max_len
    out = _alone(model, prompt, steps, use_cache)
    handle.remove()
    assert out.tokens.shape == (1, steps)
    assert len(seen) == steps and max(seen) <= max_len
    assert max(seen) == max_len  # the context does fill up before it slides
    # Each step's logits are those of the model reading exactly the documented view, uncached.
    tokens = torch.cat([torch.tensor([prompt]), out.tokens], dim=1)
    for step, start in enumerate(_reference_view_starts(len(prompt), steps, max_len)):
        end = len(prompt) + step
        assert end - start <= max_len and (start == 0 or end - start >= max_len // 2)
        expected = model(tokens[:, start:end])[:, -1, :REAL].float()
        torch.testing.assert_close(out.logits[:, step, :REAL], expected, atol=1e-5, rtol=0)


def test_past_max_len_without_the_sliding_policy_is_refused():
    """The guard the policy relies on: absolute positions past max_len raise rather than wrap."""
    model = _gpt("learned", max_len=8)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 9, dtype=torch.long))


# ---------------------------------------------------------------------------------------------
# Sampling


def _logits(rows=64, vocab=12, seed=0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def test_temperature_zero_and_top_k_one_are_greedy():
    logits = _logits()
    greedy = logits.argmax(-1)
    assert torch.equal(choose_next(logits, GREEDY), greedy)
    assert torch.equal(choose_next(logits, DecodingConfig(temperature=0.0)), greedy)
    assert torch.equal(choose_next(logits, DecodingConfig(temperature=0.0, top_k=5, top_p=0.5)), greedy)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        assert torch.equal(choose_next(logits, DecodingConfig(temperature=1.5, top_k=1), g), greedy)


@pytest.mark.parametrize("extra", [{}, {"top_k": 5}, {"top_p": 0.9}])
def test_sampling_is_finite_at_every_finite_temperature(extra):
    """A temperature so small that logits / T overflows is argmax; one so large that it underflows
    is the uniform draw over the tokens not masked (issue 34: both were 'probability tensor
    contains inf, nan' before the largest logit was subtracted in float64)."""
    logits = _logits(rows=6, vocab=40)
    logits[:, 7] = -math.inf  # a suppressed token stays impossible
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        drawn = choose_next(logits, DecodingConfig(temperature=1e-300, **extra), g)
        assert torch.equal(drawn, logits.argmax(-1))
    for temperature in (1e-300, 1e-30, 1e30, 1e308):
        probs = sampling_probs(logits, DecodingConfig(temperature=temperature, **extra))
        assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), probs.new_ones(6))
        assert (probs[:, 7] == 0).all()
    uniform = sampling_probs(logits, DecodingConfig(temperature=1e308, **extra))
    allowed = uniform > 0
    share = (1 / allowed.sum(-1, keepdim=True).double()).expand_as(uniform)
    assert torch.allclose(uniform[allowed], share[allowed])


def test_top_k_draws_only_from_the_k_most_likely():
    logits = _logits(rows=1, vocab=12).expand(3000, 12)
    k = 4
    allowed = set(logits[0].topk(k).indices.tolist())
    drawn = choose_next(logits, DecodingConfig(temperature=2.0, top_k=k), torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == allowed  # never outside, and every one of them is reachable


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "top_p,nucleus",
    [(0.3, {0}), (0.5, {0}), (0.7, {0, 1}), (0.8, {0, 1}), (0.81, {0, 1, 2}), (0.95, {0, 1, 2}),
     (0.96, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3})],
)  # fmt: skip
def test_top_p_keeps_the_smallest_set_that_reaches_p(top_p, nucleus, dtype):
    """Probabilities 0.5, 0.3, 0.15, 0.05 (in a shuffled order): the nucleus is the smallest set of
    the most likely ids whose total reaches top_p; at exactly 0.8 (= 0.5 + 0.3) that is two ids,
    whatever the rounding of the cumulative sum."""
    order = [2, 0, 3, 1]  # id order[i] has the i-th largest probability
    probs = torch.zeros(4, dtype=dtype)
    probs[order] = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=dtype)
    logits = probs.log().expand(4000, 4)
    drawn = choose_next(
        logits, DecodingConfig(temperature=1.0, top_p=top_p), torch.Generator().manual_seed(0)
    )
    assert set(drawn.tolist()) == {order[i] for i in nucleus}


def test_a_tiny_top_p_keeps_the_most_likely_token():
    logits = _logits(rows=200, vocab=12)
    for top_p in (1e-9, 1e-3):
        drawn = choose_next(
            logits, DecodingConfig(temperature=1.0, top_p=top_p), torch.Generator().manual_seed(0)
        )
        assert torch.equal(drawn, logits.argmax(-1))


def test_same_seed_same_samples_different_seed_different_samples():
    logits = _logits(rows=50, vocab=30)
    sampling = DecodingConfig(temperature=1.0, top_k=20, top_p=0.95)

    def draw(seed):
        return choose_next(logits, sampling, torch.Generator().manual_seed(seed))

    assert torch.equal(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))


def test_generation_with_a_seed_is_reproducible():
    model = _gpt("relative")
    sampling = DecodingConfig(temperature=1.0)

    def run(seed):
        return _alone(model, [1, 2, 3], 20, True, sampling, torch.Generator().manual_seed(seed)).tokens

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


@pytest.mark.parametrize(
    "kwargs",
    [{"temperature": -0.1}, {"temperature": math.nan}, {"top_k": 0}, {"top_k": -3}, {"top_p": 0.0},
     {"top_p": 1.5}, {"top_p": -0.2}, {"top_p": math.nan}],
)  # fmt: skip
def test_invalid_sampling_is_refused(kwargs):
    with pytest.raises(ValueError):
        DecodingConfig(**kwargs)


@pytest.mark.parametrize(
    "sampling",
    [
        GREEDY,
        DecodingConfig(temperature=1.0),
        DecodingConfig(temperature=5.0, top_k=3),
        DecodingConfig(top_p=0.9),
    ],
)
def test_padded_vocabulary_ids_are_never_generated(sampling):
    model = _gpt("learned", max_len=32)
    # Make the padding rows of the head the most likely by far.
    boost = torch.tensor([0.0] * REAL + [50.0] * (VOCAB - REAL), dtype=DT)
    model.output.register_forward_hook(lambda module, args, out: out + boost)
    prompts = [[1, 2, 3], [4]]
    ids, mask = _left_pad(prompts)
    g = torch.Generator().manual_seed(0)
    out = generate(lm_next_logits(model, mask, True, REAL), ids, 25, NEVER, 0, sampling, g)
    assert out.tokens.shape == (2, 25) and int(out.tokens.max()) < REAL
    # Without the tokenizer's vocabulary size they would be chosen: the check above is not vacuous.
    unguarded = generate(lm_next_logits(model, mask, True, None), ids, 5, NEVER, 0)
    assert int(unguarded.tokens.min()) >= REAL


# ---------------------------------------------------------------------------------------------
# A lightly trained model, shared with the batch test


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from tests.helpers import tiny_lm_run
    from vaswani.pipelines.lm import LanguageModel

    return LanguageModel.load(tiny_lm_run(tmp_path_factory.mktemp("gpt")))
