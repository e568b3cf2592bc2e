"""Incremental decoding: the KV cache gives the same logits as recomputing the prefix, for every
norm placement and position scheme, and greedy search stops and pads as documented."""

from __future__ import annotations

import itertools

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.generation.config import DecodingConfig
from vaswani.generation.sampling import generate
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.models.transformer import Transformer

DT = torch.float64
VOCAB, PAD, BOS = 15, 0, 1
NORMS = ("post_ln", "pre_ln", "pre_rmsnorm")
POSITIONS = ("sinusoidal", "learned", "relative")
VARIANTS = list(itertools.product(NORMS, POSITIONS, (None, 2)))
STEPS = 8
CACHED, UNCACHED = DecodingConfig(max_new_tokens=STEPS), DecodingConfig(max_new_tokens=STEPS, use_cache=False)


def _model(norm="post_ln", position="sinusoidal", window=None, fused=False, tie="none") -> Transformer:
    cfg = ModelConfig(
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=16, n_heads=4, d_ff=32,
        n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, norm=norm, position=position,
        max_len=32, rel_clip=2, attn_window=window, fused_qkv=fused, tie_embeddings=tie, pad_id=PAD,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg).to(DT)
    if tie == "none":  # a less degenerate random model: the output roughly maps token y to y + 1
        with torch.no_grad():
            model.tgt_embed.token.weight.div_(3.0)
            model.output.weight.copy_(model.tgt_embed.token.weight.roll(1, dims=0))
    return model.eval()


def _source():
    g = torch.Generator().manual_seed(7)
    src = torch.randint(3, VOCAB, (3, 6), generator=g)
    src[1, 3:] = PAD  # padding in the batch
    src[2, 5:] = PAD
    return src


@pytest.mark.parametrize("norm,position,window", VARIANTS)
def test_cached_greedy_equals_uncached(norm, position, window):
    model = _model(norm, position, window)
    src = _source()
    never = VOCAB  # an EOS id that is never produced: every step is compared
    cached = translate_ids(model, src, BOS, never, CACHED, keep_logits=True)
    uncached = translate_ids(model, src, BOS, never, UNCACHED, keep_logits=True)
    assert cached.tokens.shape == (3, STEPS) and cached.logits.shape == (3, STEPS, VOCAB)
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-5, rtol=0)
    # Not degenerate: the logits change from step to step, so positions and the prefix matter.
    assert not torch.allclose(cached.logits[:, 1:], cached.logits[:, :-1], atol=1e-3)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("tie", ["none", "output", "all"])
def test_cached_greedy_equals_uncached_other_projections(fused, tie):
    model = _model("pre_ln", "relative", 3, fused=fused, tie=tie)
    src = _source()
    cached = translate_ids(model, src, BOS, VOCAB, CACHED, keep_logits=True)
    uncached = translate_ids(model, src, BOS, VOCAB, UNCACHED, keep_logits=True)
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_stops_at_eos_and_pads_finished_rows(position, use_cache):
    model = _model("pre_ln", position)
    src = _source()
    decoding = CACHED if use_cache else UNCACHED
    free = translate_ids(model, src, BOS, VOCAB, decoding, keep_logits=True)
    eos = int(free.tokens[0, 2])  # a token that row 0 produces at its third step
    out = translate_ids(model, src, BOS, eos, decoding, keep_logits=True)
    assert out.tokens.shape[1] <= STEPS
    for row in range(3):
        produced = free.tokens[row].tolist()
        end = produced.index(eos) if eos in produced else STEPS
        n = min(end + 1, out.tokens.shape[1])
        # Up to and including EOS the row is what it would have been without the stop...
        assert out.tokens[row, :n].tolist() == produced[:n]
        torch.testing.assert_close(out.logits[row, :n], free.logits[row, :n], atol=1e-5, rtol=0)
        # ...then padding.
        assert (out.tokens[row, n:] == PAD).all()
    if all(eos in r for r in free.tokens.tolist()):
        last_eos = max(r.index(eos) for r in free.tokens.tolist())
        assert out.tokens.shape[1] == last_eos + 1  # stops once every row is finished


def test_batched_translation_equals_one_sentence_at_a_time():
    model = _model("post_ln", "sinusoidal")
    src = _source()
    batched = translate_ids(model, src, BOS, VOCAB, CACHED, keep_logits=True)
    for row in range(3):
        length = int((src[row] != PAD).sum())
        alone = translate_ids(model, src[row : row + 1, :length], BOS, VOCAB, CACHED, keep_logits=True)
        assert torch.equal(alone.tokens[0], batched.tokens[row])
        torch.testing.assert_close(alone.logits[0], batched.logits[row], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm,position,window", VARIANTS)
def test_decode_in_chunks_with_cache_equals_full_decode(norm, position, window):
    model = _model(norm, position, window)
    src = _source()
    tgt = torch.randint(3, VOCAB, (3, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, _ = model.decode(tgt, model.encode(src))
        source = model.start_decoding(src)
        chunks = [model.decode(tgt[:, a:b], source)[0] for a, b in [(0, 3), (3, 4), (4, 6), (6, 7)]]
    assert source.cache[0].self_attn.length == 7
    assert source.cache[0].cross_attn.length == src.shape[1]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-10, rtol=1e-8)


def test_reorder_keeps_the_chosen_rows():
    model = _model("pre_ln", "relative", 2)
    src = _source()
    tgt = torch.randint(3, VOCAB, (3, 5), generator=torch.Generator().manual_seed(2))
    index = torch.tensor([2, 0, 0])
    with torch.no_grad():
        source = model.start_decoding(src)
        model.decode(tgt[:, :3], source)
        source.reorder(index, index)
        after, _ = model.decode(tgt[index, 3:], source)
        expected, _ = model.decode(tgt[index], model.encode(src[index]))
    torch.testing.assert_close(after, expected[:, 3:], atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("use_cache", [True, False])
def test_hypotheses_share_their_source_row(use_cache):
    """Beam search's state: decoder rows grow from one per source to two (without copies of the
    memory), follow their parents, then a finished source is dropped. Every step must equal
    decoding each hypothesis from scratch against its own copy of the source."""
    model = _model("post_ln", "sinusoidal", fused=True)
    src = _source()
    g = torch.Generator().manual_seed(3)
    first = torch.randint(3, VOCAB, (3, 2), generator=g)
    parents = torch.tensor([0, 0, 1, 1, 2, 2])  # two hypotheses per source
    grown = torch.cat([first[parents], torch.randint(3, VOCAB, (6, 2), generator=g)], dim=1)
    kept, sources = torch.tensor([5, 4, 1, 1]), torch.tensor([2, 0])  # source 1 finished
    final = torch.cat([grown[kept], torch.randint(3, VOCAB, (4, 1), generator=g)], dim=1)
    with torch.no_grad():
        source = model.start_decoding(src) if use_cache else model.encode(src)
        model.decode(first, source)
        source.reorder(parents)
        step, _ = model.decode(grown[:, 2:] if use_cache else grown, source)
        source.reorder(kept, sources)
        last, _ = model.decode(final[:, 4:] if use_cache else final, source)
        grown_ref, _ = model.decode(grown, model.encode(src[parents]))
        final_ref, _ = model.decode(final, model.encode(src[parents[kept]]))
    assert source.memory.shape[0] == 2
    torch.testing.assert_close(step[:, -2:], grown_ref[:, 2:], atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(last[:, -1:], final_ref[:, 4:], atol=1e-10, rtol=1e-8)


def test_greedy_search_with_a_toy_next_token_function():
    """The search alone: a next-token function that counts up, EOS at a per-row length."""
    eos, pad = 9, 0
    lengths = torch.tensor([2, 4, 7])

    def next_logits(tokens):
        t = tokens.shape[1]  # prefix + produced so far
        nxt = torch.where(t - 1 >= lengths, torch.full_like(lengths, eos), torch.full_like(lengths, t + 1))
        return torch.nn.functional.one_hot(nxt, 10).to(DT)

    out = generate(next_logits, torch.ones(3, 1, dtype=torch.long), 20, eos, pad, keep_logits=True)
    assert out.tokens.tolist() == [
        [2, 3, 9, 0, 0, 0, 0, 0],
        [2, 3, 4, 5, 9, 0, 0, 0],
        [2, 3, 4, 5, 6, 7, 8, 9],
    ]
    assert out.logits.shape == (3, 8, 10)
    capped = generate(next_logits, torch.ones(3, 1, dtype=torch.long), 3, eos, pad)
    assert capped.tokens.shape == (3, 3) and capped.logits is None


@pytest.mark.parametrize("beam", [1, 3])
def test_the_drivers_encode_without_recording_gradients(beam):
    """``translate_ids`` and ``translate_beam_ids`` are inference: called with gradients on (the
    Python API's default), the encoder must not record an autograd graph (memory, and on CPUs where
    training's projections take another kernel, 2× the encoder's time)."""
    model, seen = _model(), []
    model.encoder.register_forward_hook(lambda module, args, out: seen.append(torch.is_grad_enabled()))
    assert torch.is_grad_enabled()
    if beam == 1:
        translate_ids(model, _source(), BOS, VOCAB, CACHED)
    else:
        beams = DecodingConfig(strategy="beam", beam=beam, max_new_tokens=4)
        translate_beam_ids(model, _source(), BOS, VOCAB, beams)
    assert seen == [False]
