"""Beam search, length penalties and seq2seq sampling: beam 1 is greedy, the search beats greedy
where greedy is wrong, scores are the teacher-forced log-probabilities over the length penalty,
and the rules follow Hugging Face's convention (which EOS candidates finish, what happens at
the length limit)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.generation import (
    LengthPenalty,
    Reorderable,
    Sampling,
    beam_search,
    generate,
    translate_beam_ids,
    translate_ids,
)
from vaswani.models.transformer import Transformer

DT = torch.float64
VOCAB, PAD, BOS = 15, 0, 1
STEPS = 8


def _model(norm: str = "post_ln", position: str = "sinusoidal") -> Transformer:
    cfg = ModelConfig(
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=16, n_heads=4, d_ff=32, n_encoder_layers=2,
        n_decoder_layers=2, dropout=0.0, norm=norm, position=position, max_len=32, rel_clip=2,
        tie_embeddings="none", pad_id=PAD,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg).to(DT)
    with torch.no_grad():  # a less degenerate random model: the output roughly maps token y to y + 1
        model.tgt_embed.token.weight.div_(3.0)
        model.output.weight.copy_(model.tgt_embed.token.weight.roll(1, dims=0))
    return model.eval()


def _source() -> torch.Tensor:
    src = torch.randint(3, VOCAB, (3, 6), generator=torch.Generator().manual_seed(7))
    src[1, 3:] = PAD
    src[2, 5:] = PAD
    return src


def _eos(model: Transformer, src: torch.Tensor) -> int:
    """A token greedy search produces at row 0's third step: rows then end at different steps."""
    return int(translate_ids(model, src, BOS, VOCAB, STEPS).tokens[0, 2])


def _teacher_forced_score(model, src_row, tokens, length, penalty) -> float:
    """sum_t log P(y_t | y_<t, x) / lp(|y|), recomputed in one forward pass."""
    y = torch.tensor(tokens[:length])
    tgt_in = torch.cat([torch.tensor([BOS]), y[:-1]])[None]
    with torch.no_grad():
        log_probs = model(src_row[None], tgt_in)[0].float().log_softmax(dim=-1)
    total = log_probs.gather(1, y[:, None]).sum()
    return float(total / penalty(torch.tensor(length)))


@pytest.mark.parametrize("norm,position", [("post_ln", "sinusoidal"), ("pre_ln", "relative")])
@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_one_is_greedy(norm, position, use_cache):
    model, src = _model(norm, position), _source()
    eos = _eos(model, src)
    greedy = translate_ids(model, src, BOS, eos, STEPS, use_cache)
    for penalty in (LengthPenalty("none"), LengthPenalty("gnmt", 0.6), LengthPenalty("simple", 2.0)):
        beams = translate_beam_ids(model, src, BOS, eos, STEPS, 1, 1, penalty, use_cache)
        assert torch.equal(beams.tokens[:, 0], greedy.tokens)


@pytest.mark.parametrize(
    "penalty", [LengthPenalty("none"), LengthPenalty("gnmt", 0.6), LengthPenalty("simple", 1.0)]
)
def test_scores_are_teacher_forced_log_probs_over_the_length_penalty(penalty):
    model, src = _model(), _source()
    eos = _eos(model, src)
    beams = translate_beam_ids(model, src, BOS, eos, STEPS, beam=4, n_best=4, length_penalty=penalty)
    assert beams.tokens.shape[:2] == beams.scores.shape == (3, 4)
    assert (beams.lengths >= 1).all()
    ended = 0
    for row, k in itertools.product(range(3), range(4)):
        tokens, length = beams.tokens[row, k].tolist(), int(beams.lengths[row, k])
        # |y| counts EOS: a hypothesis is EOS-terminated, or was cut at the length limit.
        assert tokens[length - 1] == eos or length == STEPS
        assert all(t == PAD for t in tokens[length:])
        ended += tokens[length - 1] == eos
        expected = _teacher_forced_score(model, src[row], tokens, length, penalty)
        assert float(beams.scores[row, k]) == pytest.approx(expected, abs=1e-4)
    assert ended  # both kinds of hypotheses were checked


def test_n_best_is_sorted_and_distinct():
    model, src = _model(), _source()
    beams = translate_beam_ids(model, src, BOS, _eos(model, src), STEPS, beam=5, n_best=5)
    assert (beams.scores[:, :-1] >= beams.scores[:, 1:]).all()
    for row in range(3):
        hyps = {tuple(beams.tokens[row, k, : int(beams.lengths[row, k])].tolist()) for k in range(5)}
        assert len(hyps) == 5
    best = translate_beam_ids(model, src, BOS, _eos(model, src), STEPS, beam=5, n_best=2)
    assert torch.equal(best.scores, beams.scores[:, :2])


def test_batched_beam_equals_one_sentence_at_a_time():
    model, src = _model(), _source()
    eos = _eos(model, src)
    limits = torch.tensor([5, 8, 6])  # each row its own length budget
    penalty = LengthPenalty("gnmt", 0.6)
    batched = translate_beam_ids(model, src, BOS, eos, limits, beam=3, n_best=3, length_penalty=penalty)
    for row in range(3):
        alone_src = src[row : row + 1, : int((src[row] != PAD).sum())]
        alone = translate_beam_ids(model, alone_src, BOS, eos, int(limits[row]), 3, 3, penalty)
        width = alone.tokens.shape[2]
        assert torch.equal(batched.tokens[row, :, :width], alone.tokens[0])
        assert (batched.tokens[row, :, width:] == PAD).all()
        assert torch.equal(batched.lengths[row], alone.lengths[0])
        torch.testing.assert_close(batched.scores[row], alone.scores[0], atol=1e-5, rtol=0)
        assert int(batched.lengths[row].max()) <= limits[row]


@pytest.mark.parametrize("early_stopping", [True, False])
def test_cached_beam_equals_uncached(early_stopping):
    model, src = _model("pre_ln", "relative"), _source()
    eos = _eos(model, src)
    args = (model, src, BOS, eos, STEPS, 4, 4, LengthPenalty("simple", 1.0))
    cached = translate_beam_ids(*args, use_cache=True, early_stopping=early_stopping)
    uncached = translate_beam_ids(*args, use_cache=False, early_stopping=early_stopping)
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.scores, uncached.scores, atol=1e-5, rtol=0)


# A toy next-token function over a hand-written tree: tokens A, B, C after BOS, with EOS.
EOS, A, B, C = 2, 3, 4, 5
TOY_VOCAB = 6
NO_PENALTY = LengthPenalty("none")


def _tree(table: dict[tuple[int, ...], dict[int, float]]) -> Reorderable:
    """P(next | prefix after BOS) from ``table`` (each entry sums to 1); unlisted prefixes end;
    unlisted tokens get ~e^-30."""

    def next_logits(tokens: torch.Tensor) -> torch.Tensor:
        rows = []
        for row in tokens.tolist():
            probs = table.get(tuple(row[1:]), {EOS: 1.0})
            rows.append([math.log(probs[t]) if t in probs else -30.0 for t in range(TOY_VOCAB)])
        return torch.tensor(rows, dtype=DT)

    return Reorderable(next_logits, lambda index, sources: None)


def _search(table, beam, max_new_tokens=4, n_best=1, penalty=NO_PENALTY, early_stopping=True):
    found = beam_search(
        _tree(table), torch.full((1, 1), BOS), max_new_tokens, EOS, PAD, beam, n_best, penalty, early_stopping
    )
    return [found.tokens[0, k, : int(found.lengths[0, k])].tolist() for k in range(n_best)], found.scores[0]


def _exhaustive_best(table, penalty: LengthPenalty, max_new_tokens: int = 4) -> list[int]:
    """The complete sequence of the listed tokens with the best log P / lp, by enumeration."""
    best, best_score = [], -math.inf
    stack: list[tuple[list[int], float]] = [([], 0.0)]
    while stack:
        prefix, logp = stack.pop()
        for token, p in table.get(tuple(prefix), {EOS: 1.0}).items():
            seq, total = [*prefix, token], logp + math.log(p)
            if token == EOS or len(seq) == max_new_tokens:
                score = total / float(penalty(torch.tensor(len(seq))))
                if score > best_score:
                    best, best_score = seq, score
            else:
                stack.append((seq, total))
    return best


def test_beam_finds_the_best_sequence_where_greedy_is_wrong():
    table = {
        (): {A: 0.6, B: 0.4},
        (A,): {EOS: 0.35, A: 0.33, B: 0.32},  # greedy takes A (0.6), then ends: P = 0.21
        (B,): {EOS: 0.9, C: 0.1},  # P(B EOS) = 0.36
    }
    greedy = generate(_tree(table).next_logits, torch.full((1, 1), BOS), 4, EOS, PAD).tokens[0].tolist()
    assert greedy == [A, EOS]
    (found,), scores = _search(table, beam=2)
    assert found == [B, EOS] == _exhaustive_best(table, NO_PENALTY)
    assert float(scores[0]) == pytest.approx(math.log(0.36), abs=1e-4)


def test_exact_stopping_finds_a_longer_hypothesis_that_early_stopping_misses():
    """Under a length penalty an unfinished hypothesis can beat the finished ones: with
    ``early_stopping=False`` the search goes on until none can."""
    table = {(): {EOS: 0.5, A: 0.49, B: 0.01}, (A,): {EOS: 0.99, B: 0.01}}
    penalty = LengthPenalty("simple", 1.0)  # score = mean log-probability
    (early,), early_scores = _search(table, 1, penalty=penalty, early_stopping=True)
    (exact,), exact_scores = _search(table, 1, penalty=penalty, early_stopping=False)
    assert early == [EOS]  # Hugging Face's early_stopping=True: done once `beam` hypotheses have ended
    assert exact == [A, EOS] == _exhaustive_best(table, penalty)
    assert float(exact_scores[0]) == pytest.approx(math.log(0.49 * 0.99) / 2, abs=1e-4)
    assert exact_scores[0] > early_scores[0]


def test_an_eos_ranked_below_the_beam_does_not_finish():
    """Of the 2·beam candidates of a step, only those ranked in the first ``beam`` may finish
    (Hugging Face's rule): [EOS] (P = 0.25, third at step 1) is not among the results."""
    table = {(): {A: 0.4, B: 0.35, EOS: 0.25}, (A,): {EOS: 0.3, C: 0.7}, (B,): {EOS: 0.3, C: 0.7}}
    found, scores = _search(table, beam=2, n_best=2)
    assert found == [[A, C, EOS], [B, C, EOS]]
    torch.testing.assert_close(scores, torch.tensor([math.log(0.28), math.log(0.245)]), atol=1e-4, rtol=0)


def test_at_the_length_limit_unfinished_hypotheses_are_returned():
    table = {(): {A: 0.6, B: 0.4}, (A,): {A: 0.45, B: 0.55}, (B,): {A: 0.9, B: 0.1}}
    found, scores = _search(table, beam=2, max_new_tokens=2, n_best=2, penalty=LengthPenalty("simple", 1.0))
    assert found == [[B, A], [A, B]]  # no EOS: the best two at the limit, P = 0.36 and 0.33, |y| = 2
    torch.testing.assert_close(scores, torch.tensor([math.log(0.36), math.log(0.33)]) / 2, atol=1e-4, rtol=0)


def test_length_penalties():
    lengths = torch.tensor([1, 7, 10])
    torch.testing.assert_close(LengthPenalty("gnmt", 0.6)(lengths), ((5 + lengths) / 6) ** 0.6)
    assert float(LengthPenalty("gnmt", 0.6)(torch.tensor(1))) == pytest.approx(1.0)
    torch.testing.assert_close(LengthPenalty("simple", 0.5)(lengths), lengths.float() ** 0.5)
    assert (LengthPenalty("none", 3.0)(lengths) == 1).all()
    with pytest.raises(ValueError, match="kind"):
        LengthPenalty("wu", 0.6)
    with pytest.raises(ValueError, match="n_best"):
        _search({}, beam=2, n_best=3)


def test_sampled_translation_is_seeded_and_greedy_at_its_limits():
    model, src = _model(), _source()
    greedy = translate_ids(model, src, BOS, VOCAB, STEPS).tokens

    def sample(sampling: Sampling, seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return translate_ids(model, src, BOS, VOCAB, STEPS, sampling=sampling, generator=generator).tokens

    assert torch.equal(sample(Sampling(temperature=0.0), 0), greedy)
    assert torch.equal(sample(Sampling(top_k=1), 0), greedy)
    hot = Sampling(temperature=3.0, top_p=0.95)
    assert torch.equal(sample(hot, 1), sample(hot, 1))
    assert any(not torch.equal(sample(hot, seed), greedy) for seed in range(3))


def test_generate_with_a_length_limit_per_row():
    def count_up(tokens):  # never EOS: each row runs to its own limit
        return torch.nn.functional.one_hot(torch.full((tokens.shape[0],), tokens.shape[1] + 1), 12).to(DT)

    out = generate(count_up, torch.ones(3, 1, dtype=torch.long), torch.tensor([1, 4, 2]), 11, PAD)
    assert out.tokens.tolist() == [[2, 0, 0, 0], [2, 3, 4, 5], [2, 3, 0, 0]]
