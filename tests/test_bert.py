"""BERT's core: the bidirectional encoder, its embeddings and heads (its WordPiece tokenizer:
test_tokenizer.py)."""

from __future__ import annotations

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.models.bert import (
    Bert,
    MaskedLM,
    MaskedLMHead,
    SequenceClassifier,
    TokenClassifier,
    mean_pool,
)

VOCAB = 40


def bert_config(**changes: object) -> ModelConfig:
    """A small BERT (the bert-base preset, shrunk), without dropout."""
    small = {
        "src_vocab_size": VOCAB, "d_model": 32, "n_heads": 4, "d_ff": 64, "n_encoder_layers": 2,
        "max_len": 24, "dropout": 0.0, "attn_dropout": 0.0,
    }  # fmt: skip
    return ModelConfig.preset("bert-base", **{**small, **changes})


def model(seed: int = 0, **changes: object) -> Bert:
    torch.manual_seed(seed)
    return Bert(bert_config(**changes)).eval()


VARIANTS = [
    {},
    {"norm": "pre_ln", "position": "relative"},
    {"norm": "pre_rmsnorm", "position": "sinusoidal", "fused_qkv": True},
    {"attn_window": 2, "activation": "gelu_tanh"},
]


@pytest.mark.parametrize("changes", VARIANTS, ids=["bert", "pre_ln-relative", "rmsnorm-sinusoidal", "window"])
def test_padding_does_not_change_real_tokens(changes):
    bert = model(**changes)
    torch.manual_seed(1)
    lengths = [7, 3, 5]
    rows = [torch.randint(5, VOCAB, (n,)) for n in lengths]
    tokens = torch.zeros(3, 10, dtype=torch.long)  # padded with id 0 past each row's length
    mask = torch.zeros(3, 10, dtype=torch.bool)
    segments = torch.zeros(3, 10, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
        mask[i, : len(row)] = True
        segments[i, len(row) // 2 : len(row)] = 1
    with torch.no_grad():
        batch = bert(tokens, segments, mask)
        for i, row in enumerate(rows):
            alone = bert(row[None], segments[i : i + 1, : len(row)])
            torch.testing.assert_close(batch[i, : len(row)], alone[0], atol=1e-5, rtol=1e-5)
        assert torch.isfinite(batch).all()
        unmasked = bert(tokens, segments)  # the same padding, attended to, does change them
    assert not torch.allclose(unmasked[1, :3], batch[1, :3], atol=1e-3)


@pytest.mark.parametrize("changes", VARIANTS[:2], ids=["bert", "pre_ln-relative"])
def test_every_position_sees_the_later_ones(changes):
    bert = model(**changes)
    tokens = torch.randint(5, VOCAB, (1, 8), generator=torch.Generator().manual_seed(2))
    changed = tokens.clone()
    changed[0, -1] = (tokens[0, -1] + 1 - 5) % (VOCAB - 5) + 5
    with torch.no_grad():
        before, after = bert(tokens), bert(changed)
    assert (before[0, :-1] - after[0, :-1]).abs().amax(dim=-1).min() > 1e-4  # bidirectional: all moved


def test_segment_ids_change_the_outputs():
    bert = model()
    tokens = torch.randint(5, VOCAB, (2, 6), generator=torch.Generator().manual_seed(3))
    pair = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    with torch.no_grad():
        plain, zeros, paired = bert(tokens), bert(tokens, torch.zeros_like(pair)), bert(tokens, pair)
    torch.testing.assert_close(plain, zeros)  # no segment ids: all in segment 0
    assert (paired - plain).abs().amax(dim=-1).min() > 1e-4
    no_segments = model(type_vocab_size=0)
    assert no_segments.embed.segment is None
    with pytest.raises(ValueError, match="segment"):
        no_segments(tokens, pair)


def test_mlm_head_is_tied_to_the_word_embeddings():
    torch.manual_seed(4)
    mlm = MaskedLM(bert_config()).eval()
    assert mlm.head.output.weight is mlm.bert.embed.token.weight
    tokens = torch.randint(8, VOCAB, (2, 6), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        before = mlm(tokens)
        mlm.bert.embed.token.weight[7] += torch.randn(32)  # not in the input: only its logit moves
        after = mlm(tokens)
    assert before.shape == (2, 6, VOCAB)
    moved = (after - before).abs().amax(dim=(0, 1))
    assert moved[7] > 1e-3 and moved[torch.arange(VOCAB) != 7].max() < 1e-6
    untied = MaskedLM(bert_config(tie_embeddings="none"))
    assert untied.head.output.weight is not untied.bert.embed.token.weight


def test_a_head_built_on_pretrained_embeddings_leaves_them_alone():
    bert = model(seed=6)
    saved = bert.embed.token.weight.detach().clone()
    head = MaskedLMHead(bert.config, bert.embed.token)
    torch.testing.assert_close(bert.embed.token.weight.detach(), saved, atol=0, rtol=0)
    assert head.output.bias.abs().max() == 0


def test_mlm_logits_of_selected_positions_are_those_of_the_full_output():
    torch.manual_seed(7)
    mlm = MaskedLM(bert_config()).eval()
    tokens = torch.randint(5, VOCAB, (2, 6), generator=torch.Generator().manual_seed(8))
    predict = torch.zeros(2, 6, dtype=torch.bool)
    predict[0, 1] = predict[1, 4] = predict[1, 5] = True
    with torch.no_grad():
        torch.testing.assert_close(mlm(tokens, predict=predict), mlm(tokens)[predict])


def test_pooler_and_classifiers():
    bert = model(seed=9)
    tokens = torch.randint(5, VOCAB, (2, 6), generator=torch.Generator().manual_seed(10))
    pair = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    torch.manual_seed(11)
    classify, tag = SequenceClassifier(bert.config, 3).eval(), TokenClassifier(bert.config, 5).eval()
    with torch.no_grad():
        hidden = bert(tokens, pair)
        pooled = bert.pool(hidden)
        changed = hidden.clone()
        changed[:, 1:] += 1.0
        torch.testing.assert_close(bert.pool(changed), pooled)  # the [CLS] vector alone
        assert pooled.abs().max() < 1  # tanh
        assert classify(pooled).shape == (2, 3)
        assert not torch.allclose(classify(bert.pool(bert(tokens))), classify(pooled))  # a pair differs
        assert tag(hidden).shape == (2, 6, 5)
    with pytest.raises(ValueError, match="pooler"):
        model(pooler=False).pool(hidden)


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    torch.testing.assert_close(mean_pool(hidden, torch.tensor([[1, 1, 0]])), torch.tensor([[2.0, 3.0]]))


def test_bert_initialisation():
    torch.manual_seed(12)
    mlm = MaskedLM(bert_config(d_model=64, d_ff=256, src_vocab_size=500))
    for name, p in mlm.named_parameters():
        if "norm" in name:
            assert torch.all(p == (1.0 if name.endswith("weight") else 0.0)), name
        elif name.endswith("bias"):
            assert torch.all(p == 0), name
        else:
            assert 0.017 < p.std() < 0.023 and abs(p.mean()) < 0.005, name


def test_encoder_only_config_is_validated():
    with pytest.raises(ConfigError, match="type_vocab_size"):
        bert_config(type_vocab_size=-1)
    with pytest.raises(ConfigError, match="pooler"):
        bert_config(pooler="yes")
    with pytest.raises(ConfigError, match="pad_id"):
        bert_config(pad_id=VOCAB)
    bert_config(pad_id=VOCAB - 1, tgt_vocab_size=8)  # the decoder's vocabulary is not BERT's
    with pytest.raises(ValueError, match="encoder_only"):
        Bert(ModelConfig.preset("tiny"))
