"""Speculative decoding (generation/speculative.py): token for token the target's greedy output,
whatever the draft, and both caches cut back to the accepted tokens."""

from __future__ import annotations

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.generation.speculative import CachedView, speculative_greedy
from vaswani.models.gpt import GPT

VOCAB = 24
REAL = 21  # ids >= REAL pad the embedding: never chosen
NEVER = 99  # an EOS that never comes: every step is compared


def _gpt(seed: int, layers: int = 2, d_model: int = 16, max_len: int = 64, window=None) -> GPT:
    """A random float64 GPT whose greedy outputs vary (the head roughly maps token y to y + 1)."""
    cfg = ModelConfig(
        arch="decoder_only", tgt_vocab_size=VOCAB, d_model=d_model, n_heads=2, d_ff=32,
        n_decoder_layers=layers, dropout=0.0, norm="pre_ln", position="learned", max_len=max_len,
        attn_window=window, tie_embeddings="none", scale_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = GPT(cfg).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1 and "norm" not in name:
                p.normal_(0.0, 0.15)
        model.embed.token.weight.normal_(0.0, 1.0)
        model.output.weight.copy_(2 * model.embed.token.weight.roll(1, dims=0))
    return model.eval()


def _greedy(model: GPT, prompt: list[int], steps: int, eos: int = NEVER) -> list[int]:
    ids = torch.tensor([prompt])
    next_logits = lm_next_logits(model, torch.ones_like(ids, dtype=torch.bool), True, REAL)
    return generate(next_logits, ids, steps, eos, 0).tokens[0].tolist()


PROMPTS = ([3], [5, 9, 2, 11], [7, 1, 7, 1, 7, 1, 2, 3, 4])


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, None])
def test_a_disagreeing_draft_gives_the_targets_greedy_output(prompt, k):
    target, draft = _gpt(0), _gpt(7, layers=1, d_model=8)
    expected = _greedy(target, prompt, 30)
    out = speculative_greedy(target, draft, torch.tensor([prompt]), 30, NEVER, REAL, draft_tokens=k)
    assert out.tokens[0].tolist() == expected
    assert out.proposed > 0 and out.accepted < out.proposed  # the draft was wrong at times


@pytest.mark.parametrize("k", [1, 4, None])
def test_the_target_as_its_own_draft_is_always_accepted(k):
    target = _gpt(0)
    out = speculative_greedy(target, target, torch.tensor([[5, 9, 2]]), 40, NEVER, REAL, draft_tokens=k)
    assert out.tokens[0].tolist() == _greedy(target, [5, 9, 2], 40)
    assert out.acceptance == 1.0
    assert out.rounds < 40  # several tokens a forward pass of the target
    if k == 4:
        assert out.rounds == 8  # 4 proposed + 1 of the target's, 40 / 5 rounds


def test_past_the_context_the_view_is_cut_as_plain_decoding_cuts_it():
    target, draft = _gpt(0, max_len=12), _gpt(3, layers=1, d_model=8, max_len=10)
    for k in (1, 3, 6, None):
        out = speculative_greedy(target, draft, torch.tensor([[4, 2, 8]]), 45, NEVER, REAL, draft_tokens=k)
        assert out.tokens[0].tolist() == _greedy(target, [4, 2, 8], 45)


def test_it_ends_after_eos_and_at_the_budget():
    target, draft = _gpt(0), _gpt(7, layers=1, d_model=8)
    plain = _greedy(target, [3], 30)
    eos = plain[6]
    expected = plain[: plain.index(eos) + 1]
    out = speculative_greedy(target, draft, torch.tensor([[3]]), 30, eos, REAL, draft_tokens=4)
    assert out.tokens[0].tolist() == expected == _greedy(target, [3], 30, eos)
    for budget in (1, 2, 7):
        out = speculative_greedy(target, target, torch.tensor([[3]]), budget, NEVER, REAL, draft_tokens=5)
        assert out.tokens[0].tolist() == plain[:budget]


def test_on_step_sees_each_token_and_stops():
    target, draft = _gpt(0), _gpt(7, layers=1, d_model=8)
    seen: list[int] = []

    def on_step(token: torch.Tensor) -> bool:
        seen.append(int(token))
        return len(seen) == 5

    out = speculative_greedy(target, draft, torch.tensor([[3]]), 30, NEVER, REAL, 4, on_step)
    assert seen == out.tokens[0].tolist() == _greedy(target, [3], 5)


def test_the_cache_cut_back_holds_the_keys_of_the_accepted_tokens():
    model = _gpt(0)
    tokens = torch.tensor([[3, 5, 7, 9, 11, 13]])
    view = CachedView(model, REAL)
    view.logits(tokens, last_only=False)
    view.truncate(4)
    assert view.fed == 4
    again = view.logits(torch.tensor([[3, 5, 7, 9, 2, 4]]), last_only=False)
    fresh = model(torch.tensor([[3, 5, 7, 9, 2, 4]]))[:, 4:]
    fresh[..., REAL:] = float("-inf")
    torch.testing.assert_close(again, fresh)
    keys = view.cache[0].self_attn.key
    direct = CachedView(model, REAL)
    direct.logits(torch.tensor([[3, 5, 7, 9, 2, 4]]), last_only=False)
    torch.testing.assert_close(keys, direct.cache[0].self_attn.key)


def test_refusals():
    target = _gpt(0)
    with pytest.raises(ConfigError, match="batch 1"):
        speculative_greedy(target, target, torch.tensor([[1, 2], [3, 4]]), 5, NEVER, REAL)
    with pytest.raises(ConfigError, match="--draft-tokens"):
        speculative_greedy(target, target, torch.tensor([[1, 2]]), 5, NEVER, REAL, draft_tokens=0)
    windowed = _gpt(0, window=4)
    with pytest.raises(ConfigError, match="attn_window"):
        speculative_greedy(target, windowed, torch.tensor([[1, 2]]), 5, NEVER, REAL)
