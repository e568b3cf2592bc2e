"""Beam search, length penalties and seq2seq sampling: beam 1 is greedy, the search beats greedy
where greedy is wrong, scores are the teacher-forced log-probabilities over the length penalty,
and the rules follow Hugging Face's convention (which EOS candidates finish, what happens at
the length limit)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.generation.beam import Reorderable, beam_search
from vaswani.generation.config import DecodingConfig, LengthPenalty
from vaswani.generation.sampling import generate
from vaswani.generation.seq2seq import seq2seq_decoding, translate_beam_ids, translate_ids
from vaswani.models.transformer import Transformer

DT = torch.float64
VOCAB, PAD, BOS = 15, 0, 1
STEPS = 8
GREEDY = DecodingConfig(max_new_tokens=STEPS)


def _beam(penalty: LengthPenalty, beam: int, n_best: int = 1, **fields) -> DecodingConfig:
    """Beam search of width ``beam`` (1 too) scored with ``penalty``, ``STEPS`` tokens by default."""
    fields.setdefault("max_new_tokens", STEPS)
    return DecodingConfig(
        strategy="beam", beam=beam, n_best=n_best, length_penalty=penalty.alpha,
        length_penalty_kind=penalty.kind, **fields,
    )  # fmt: skip


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
    return int(translate_ids(model, src, BOS, VOCAB, GREEDY).tokens[0, 2])


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
    greedy = translate_ids(model, src, BOS, eos, DecodingConfig(max_new_tokens=STEPS, use_cache=use_cache))
    for penalty in (LengthPenalty("none", 1.0), LengthPenalty("gnmt", 0.6), LengthPenalty("simple", 2.0)):
        beams = translate_beam_ids(model, src, BOS, eos, _beam(penalty, 1, use_cache=use_cache))
        assert torch.equal(beams.tokens[:, 0], greedy.tokens)


@pytest.mark.parametrize(
    "penalty", [LengthPenalty("none", 1.0), LengthPenalty("gnmt", 0.6), LengthPenalty("simple", 1.0)]
)
def test_scores_are_teacher_forced_log_probs_over_the_length_penalty(penalty):
    model, src = _model(), _source()
    eos = _eos(model, src)
    beams = translate_beam_ids(model, src, BOS, eos, _beam(penalty, 4, 4))
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
    beams = translate_beam_ids(model, src, BOS, _eos(model, src), _beam(LengthPenalty("gnmt", 0.6), 5, 5))
    assert (beams.scores[:, :-1] >= beams.scores[:, 1:]).all()
    for row in range(3):
        hyps = {tuple(beams.tokens[row, k, : int(beams.lengths[row, k])].tolist()) for k in range(5)}
        assert len(hyps) == 5
    best = translate_beam_ids(model, src, BOS, _eos(model, src), _beam(LengthPenalty("gnmt", 0.6), 5, 2))
    assert torch.equal(best.scores, beams.scores[:, :2])


def test_batched_beam_equals_one_sentence_at_a_time():
    model, src = _model(), _source()
    eos = _eos(model, src)
    limits = torch.tensor([5, 8, 6])  # each row its own length budget
    decoding = _beam(LengthPenalty("gnmt", 0.6), 3, 3, max_new_tokens=None)
    prefix = torch.full((3, 1), BOS)
    batched = beam_search(seq2seq_decoding(model, src), prefix, limits, eos, PAD, decoding)
    for row in range(3):
        alone_src = src[row : row + 1, : int((src[row] != PAD).sum())]
        alone = translate_beam_ids(
            model, alone_src, BOS, eos, replace(decoding, max_new_tokens=int(limits[row]))
        )
        width = alone.tokens.shape[2]
        assert torch.equal(batched.tokens[row, :, :width], alone.tokens[0])
        assert (batched.tokens[row, :, width:] == PAD).all()
        assert torch.equal(batched.lengths[row], alone.lengths[0])
        torch.testing.assert_close(batched.scores[row], alone.scores[0], atol=1e-5, rtol=0)
        assert int(batched.lengths[row].max()) <= limits[row]


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
def test_cached_beam_equals_uncached(early_stopping):
    model, src = _model("pre_ln", "relative"), _source()
    eos = _eos(model, src)
    decoding = _beam(LengthPenalty("simple", 1.0), 4, 4, early_stopping=early_stopping)
    cached = translate_beam_ids(model, src, BOS, eos, decoding)
    uncached = translate_beam_ids(model, src, BOS, eos, replace(decoding, use_cache=False))
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.scores, uncached.scores, atol=1e-5, rtol=0)


# A toy next-token function over a hand-written tree: tokens A, B, C, D after BOS, with EOS.
EOS, A, B, C, D = 2, 3, 4, 5, 6
TOY_VOCAB = 7
NO_PENALTY = LengthPenalty("none", 1.0)


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
    decoding = _beam(penalty, beam, n_best, max_new_tokens=None, early_stopping=early_stopping)
    found = beam_search(_tree(table), torch.full((1, 1), BOS), max_new_tokens, EOS, PAD, decoding)
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
    ``early_stopping="never"`` the search goes on until none can."""
    table = {(): {EOS: 0.5, A: 0.49, B: 0.01}, (A,): {EOS: 0.99, B: 0.01}}
    penalty = LengthPenalty("simple", 1.0)  # score = mean log-probability
    (early,), early_scores = _search(table, 1, penalty=penalty, early_stopping=True)
    (exact,), exact_scores = _search(table, 1, penalty=penalty, early_stopping="never")
    assert early == [EOS]  # Hugging Face's early_stopping=True: done once `beam` hypotheses have ended
    assert exact == [A, EOS] == _exhaustive_best(table, penalty)
    assert float(exact_scores[0]) == pytest.approx(math.log(0.49 * 0.99) / 2, abs=1e-4)
    assert exact_scores[0] > early_scores[0]


def test_the_three_early_stopping_rules_of_hugging_face():
    """Beam 2, score = mean log-probability. After step 2 the row has two finished hypotheses
    ([EOS] -0.693, [A EOS] -0.857): ``True`` stops there. The best running one, [A C] at
    log(0.27) / 2 = -0.655, still beats the worst of them, so ``False`` goes on, finds
    [A C EOS] (-0.532) and stops after step 3, where [A C D] at its current length (-0.898) no
    longer beats [EOS]; ``"never"`` also bounds [A C D] at the length limit 4 (-0.674) and
    goes on to find [A C D EOS] (-0.674) in place of [EOS]."""
    table = {
        (): {EOS: 0.5, A: 0.45, B: 0.05},
        (A,): {C: 0.6, EOS: 0.4},
        (B,): {EOS: 1.0},
        (A, C): {EOS: 0.75, D: 0.25},
        (A, C, D): {EOS: 1.0},
    }
    penalty = LengthPenalty("simple", 1.0)
    expected = {
        True: ([[EOS], [A, EOS]], [math.log(0.5), math.log(0.18) / 2]),
        False: ([[A, C, EOS], [EOS]], [math.log(0.2025) / 3, math.log(0.5)]),
        "never": ([[A, C, EOS], [A, C, D, EOS]], [math.log(0.2025) / 3, math.log(0.0675) / 4]),
    }
    for rule, (hypotheses, scores) in expected.items():
        found, found_scores = _search(table, beam=2, n_best=2, penalty=penalty, early_stopping=rule)
        assert found == hypotheses, rule
        torch.testing.assert_close(found_scores, torch.tensor(scores), atol=1e-4, rtol=0)
    assert expected["never"][0][0] == _exhaustive_best(table, penalty)


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
        DecodingConfig(beam=2, length_penalty_kind="wu")
    with pytest.raises(ValueError, match="n_best"):
        _search({}, beam=2, n_best=3)


def test_sampled_translation_is_seeded_and_greedy_at_its_limits():
    model, src = _model(), _source()
    greedy = translate_ids(model, src, BOS, VOCAB, GREEDY).tokens

    def sample(sampling: DecodingConfig, seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return translate_ids(model, src, BOS, VOCAB, sampling, generator).tokens

    assert torch.equal(sample(DecodingConfig(temperature=0.0, max_new_tokens=STEPS), 0), greedy)
    assert torch.equal(sample(DecodingConfig(top_k=1, max_new_tokens=STEPS), 0), greedy)
    hot = DecodingConfig(temperature=3.0, top_p=0.95, max_new_tokens=STEPS)
    assert torch.equal(sample(hot, 1), sample(hot, 1))
    assert any(not torch.equal(sample(hot, seed), greedy) for seed in range(3))


def test_generate_with_a_length_limit_per_row():
    def count_up(tokens):  # never EOS: each row runs to its own limit
        return torch.nn.functional.one_hot(torch.full((tokens.shape[0],), tokens.shape[1] + 1), 12).to(DT)

    out = generate(count_up, torch.ones(3, 1, dtype=torch.long), torch.tensor([1, 4, 2]), 11, PAD)
    assert out.tokens.tolist() == [[2, 0, 0, 0], [2, 3, 4, 5], [2, 3, 0, 0]]


def test_on_step_is_consulted_once_a_step_and_can_stop_the_search():
    """Beam search stops where ``on_step`` says (a client that has gone), with the finished
    hypotheses found so far; an ``on_step`` that never stops changes nothing."""
    model, src = _model(), _source()
    decoding = _beam(LengthPenalty("gnmt", 0.6), 3, 2, early_stopping="never", max_new_tokens=None)
    eos = VOCAB  # never produced: every row searches to its budget
    seen: list[tuple[int, ...]] = []

    def watch(tokens: torch.Tensor, stop_at: int | None = None) -> bool:
        seen.append(tuple(tokens.shape))
        return len(seen) == stop_at

    whole = translate_beam_ids(model, src, BOS, eos, decoding)
    watched = translate_beam_ids(model, src, BOS, eos, decoding, on_step=watch)
    assert torch.equal(watched.tokens, whole.tokens) and torch.equal(watched.scores, whole.scores)
    assert len(seen) == whole.tokens.shape[2] > 3 and seen[0] == (3, 3)
    seen.clear()
    stopped = translate_beam_ids(model, src, BOS, eos, decoding, on_step=lambda t: watch(t, stop_at=2))
    assert len(seen) == 2 and stopped.tokens.shape[2] == 0 and (stopped.scores == -math.inf).all()
