"""GPTs with rotary and ALiBi positions: cached = uncached generation, a left-padded batch = each
row alone, bf16 autocast close to fp32, and tiny ``vaswani train lm`` runs that decode."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import left_padded, position_gpt, tiny_lm_args, tiny_lm_run, write_lm_text
from vaswani.cli import main
from vaswani.generation.config import DecodingConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.pipelines.lm import LanguageModel

DT = torch.float64
SCHEMES = ["rope", "rope_interleaved", "alibi"]
PROMPTS = [[5, 6, 7, 8, 9], [3, 4], [12, 2, 9]]


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("kind", SCHEMES)
def test_cached_generation_equals_uncached(kind, window):
    model = position_gpt(kind, window=window)
    ids, mask = left_padded(PROMPTS)
    cached = generate(lm_next_logits(model, mask, True), ids, 10, 99, 0, keep_logits=True)
    uncached = generate(lm_next_logits(model, mask, False), ids, 10, 99, 0, keep_logits=True)
    assert cached.tokens.tolist() == uncached.tokens.tolist()
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-9, rtol=0)
    assert all(len(set(row)) >= 4 for row in cached.tokens.tolist())  # not one repeated token


@pytest.mark.parametrize("kind", SCHEMES)
def test_a_left_padded_batch_equals_each_row_alone(kind):
    model = position_gpt(kind)
    ids, mask = left_padded(PROMPTS)
    batch = generate(lm_next_logits(model, mask), ids, 6, 99, 0, keep_logits=True)
    for i, prompt in enumerate(PROMPTS):
        one, one_mask = left_padded([prompt])
        alone = generate(lm_next_logits(model, one_mask), one, 6, 99, 0, keep_logits=True)
        assert batch.tokens[i].tolist() == alone.tokens[0].tolist()
        torch.testing.assert_close(batch.logits[i], alone.logits[0], atol=1e-9, rtol=0)


@pytest.mark.parametrize("kind", SCHEMES)
def test_positions_change_the_output(kind):
    """The scheme acts: the logits at a token depend on how far back the earlier tokens are."""
    model = position_gpt(kind)
    near = model(torch.tensor([[5, 6, 7]]))[0, -1]
    far = model(torch.tensor([[5, 1, 1, 1, 6, 7]]))[0, -1]
    assert not torch.allclose(near, far, atol=1e-3)


@pytest.mark.parametrize("kind", SCHEMES)
def test_bf16_autocast_is_close_to_fp32(kind):
    model = position_gpt(kind).float()
    tokens = torch.tensor([[5, 6, 7, 8, 9, 3, 4, 12]])
    with torch.no_grad():
        full = model(tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model(tokens)
    torch.testing.assert_close(half.float(), full, atol=0.1, rtol=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rope", "alibi"])
def test_train_lm_with_the_position_trains_and_decodes(tmp_path, kind):
    run = tiny_lm_run(tmp_path, "--position", kind)
    lm = LanguageModel.load(run)
    assert json.loads((run / "config.json").read_text())["model"]["position"] == kind
    attn = lm.model.blocks.layers[0].self_attn
    assert (attn.qk_positions if kind == "rope" else attn.relative) is not None
    greedy = DecodingConfig(max_new_tokens=20, temperature=0.0)
    text = lm.generate(["the cat", "a"], greedy)
    assert all(len(t) > 0 for t in text)
    uncached = DecodingConfig(max_new_tokens=20, temperature=0.0, use_cache=False)
    assert lm.generate(["the cat", "a"], uncached) == text


def test_train_lm_refuses_rope_with_an_odd_head_dimension(tmp_path, capsys):
    text = write_lm_text(tmp_path / "train.txt")
    args = tiny_lm_args(text, tmp_path / "run", "--position", "rope", "--d-model", "36", "--heads", "4")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model.position" in err and "even head dimension" in err
    assert not (tmp_path / "run").exists()
