"""Continuous batching of translations (generation/continuous_seq2seq.py): requests of very different
source lengths that join while others are mid-way and leave at different steps get exactly what
``translate_ids`` gives each source alone (greedy and seeded sampling); a cancelled row leaves and
the others are unchanged; a trained translator's texts equal ``Translator.translate`` alone."""

from __future__ import annotations

import threading

import pytest
import torch

from tests.helpers import tiny_args, write_reverse_task
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError, DataError, InputError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.continuous_seq2seq import Seq2SeqEngine
from vaswani.generation.seq2seq import translate_ids
from vaswani.models.transformer import Transformer
from vaswani.pipelines.translation import Translator

BOS, PAD, VOCAB = 1, 0, 24
NEVER = 99  # an EOS id that the tiny models never produce: every step is compared
SUPPRESS = (5,)
# (source, max_new_tokens or None for the default budget, the step at which it is submitted): the
# sources from 1 to 17 tokens, joining while others are mid-way; the default budget of the longer
# ones (2 * |x| + 10) is cut at max_len - 1.
REQUESTS = [([3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], 14, 0), ([3], 5, 0)]
REQUESTS += [([7, 8, 9], None, 2), ([20, 2, 9, 9, 4, 17, 11], 3, 3), ([4, 4], 12, 4), ([21], 1, 6)]
REQUESTS += [([9, 8, 7, 6, 5, 4, 3, 2, 9, 8, 7, 6], 9, 7), ([13, 3, 13], None, 9)]


def _ids(ids) -> str:
    return " ".join(str(i) for i in ids)


def _model(position: str = "sinusoidal", window: int | None = None) -> Transformer:
    """A tiny float64 encoder-decoder with position scheme ``position``: small random weights and
    an output that maps target token y to about y + 1, so that greedy decoding walks through the
    vocabulary (and the source steers it through cross-attention)."""
    cfg = ModelConfig(
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2,
        n_decoder_layers=2, dropout=0.0, norm="pre_ln", position=position, max_len=24, rel_clip=4,
        tie_embeddings="none", pad_id=PAD, attn_window=window,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg).to(torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.15)
        model.tgt_embed.token.weight.normal_(0.0, 1.0)
        model.output.weight.copy_(2 * model.tgt_embed.token.weight.roll(1, dims=0))
    return model.eval()


def _decoding(n: int | None, **fields) -> DecodingConfig:
    return DecodingConfig(max_new_tokens=n, **fields)


def _alone(model: Transformer, source: list[int], decoding: DecodingConfig) -> list[int]:
    src = torch.tensor([source])
    return translate_ids(model, src, BOS, NEVER, decoding, suppress=SUPPRESS).tokens[0].tolist()


def _run(engine: Seq2SeqEngine, requests, decodings) -> list[list[int]]:
    """Submit each request at its step, step until all end; the ids of each."""
    handles, step = {}, 0
    while len(handles) < len(requests) or engine.rows or engine.pending:
        for i, (source, _, at) in enumerate(requests):
            if at == step:
                handles[i] = engine.submit(source, decodings[i])
        engine.step()
        assert len(engine.rows) <= engine.max_batch
        step += 1
    return [handles[i].result().ids for i in range(len(requests))]


def _engine(model: Transformer, max_batch: int = 8) -> Seq2SeqEngine:
    return Seq2SeqEngine(model, BOS, NEVER, _ids, SUPPRESS, max_batch=max_batch)


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "relative", "rope", "alibi"])
@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
@pytest.mark.parametrize("max_batch", [3, 8])
def test_greedy_rows_joining_and_leaving_equal_each_alone(position, window, max_batch):
    model = _model(position, window)
    engine = _engine(model, max_batch)
    decodings = [_decoding(n) for _, n, _ in REQUESTS]
    got = _run(engine, REQUESTS, decodings)
    for (source, _, _), decoding, ids in zip(REQUESTS, decodings, got, strict=True):
        assert ids == _alone(model, source, decoding)
    assert len(got[2]) == 16 and len(got[0]) == 14  # the default budget 2 * 3 + 10; the one asked
    assert all(SUPPRESS[0] not in ids for ids in got)
    assert len(set(got[0])) >= 3 and got[0] != got[4][: len(got[0])]  # not one walk for every source
    assert engine.cache is None and engine.memory is None and engine.rows == []


def test_seeded_sampling_is_the_same_alone_and_batched():
    model = _model("rope")  # peaked: high temperatures make the draws differ from the argmax
    options = [dict(temperature=4.0), dict(temperature=3.0, top_k=5), dict(temperature=4.0, top_p=0.9)]
    decodings = [_decoding(n, seed=10 + i, **options[i % 3]) for i, (_, n, _) in enumerate(REQUESTS)]
    decodings[1] = _decoding(REQUESTS[1][1])  # a greedy row among them
    got = _run(_engine(model, 4), REQUESTS, decodings)
    for (source, _, _), decoding, ids in zip(REQUESTS, decodings, got, strict=True):
        assert ids == _alone(model, source, decoding)
    greedy = [_alone(model, source, _decoding(n)) for source, n, _ in REQUESTS]
    assert sum(ids != argmax for ids, argmax in zip(got, greedy, strict=True)) >= 3  # draws, not the argmax


def test_a_cancelled_row_leaves_and_the_others_are_unchanged():
    model = _model("relative")
    engine = _engine(model, max_batch=3)
    long, short, waiting = REQUESTS[0][0], [3, 4], [9, 9, 9, 9]
    rows = [engine.submit(source, _decoding(12)) for source in (long, short, waiting)]
    for _ in range(3):
        engine.step()
    rows[0].cancel()  # the longest source leaves: its columns are dropped
    engine.step()
    assert engine.rows == rows[1:] and engine.memory is not None and engine.memory.shape[1] == 4
    while engine.rows:
        engine.step()
    cancelled = rows[0].result()
    assert cancelled.finish_reason == "cancelled" and len(cancelled.ids) == 3
    assert cancelled.ids == _alone(model, long, _decoding(12))[:3]
    for source, row in zip((short, waiting), rows[1:], strict=True):
        assert row.result().ids == _alone(model, source, _decoding(12))
        assert row.result().finish_reason == "length"


def test_rows_joining_at_one_step_are_encoded_together_and_equal_each_alone(monkeypatch):
    model = _model("rope")
    sources = [[3, 4, 6, 7, 8, 9, 10], [3], [20, 2, 9], [4, 4, 11, 12, 13]]  # padded to 7 together
    encoded: list[int] = []
    encode = model.encode
    monkeypatch.setattr(model, "encode", lambda src: encoded.append(src.shape[0]) or encode(src))
    engine = _engine(model, max_batch=8)
    rows = [engine.submit(source, _decoding(9)) for source in sources]
    engine.step()
    assert encoded == [4]  # one pass of the encoder for the four
    while engine.rows:
        engine.step()
    for source, row in zip(sources, rows, strict=True):
        assert row.result().ids == _alone(model, source, _decoding(9))


def test_a_request_whose_prefill_fails_ends_alone_when_joining_with_others(monkeypatch):
    model = _model()
    engine = _engine(model, max_batch=8)
    sources = [[3, 4, 6], [7, 8], [9, 10, 11, 12]]
    prefill = engine._prefill
    monkeypatch.setattr(engine, "_prefill_together", lambda rows: 1 / 0)  # the shared pass fails

    def alone(row):
        if row.prompt == sources[1]:
            raise RuntimeError("no memory for this one")
        return prefill(row)

    monkeypatch.setattr(engine, "_prefill", alone)
    rows = [engine.submit(source, _decoding(6)) for source in sources]
    while engine.rows or engine.pending:
        engine.step()
    with pytest.raises(RuntimeError, match="no memory for this one"):
        rows[1].result()
    assert rows[1].finish_reason == "error"
    for i in (0, 2):
        assert rows[i].result().ids == _alone(model, sources[i], _decoding(6))


def test_bad_requests_are_refused_at_submit():
    engine = Seq2SeqEngine(_model(), BOS, NEVER, _ids, max_batch=1, max_pending=1)
    with pytest.raises(DataError, match="max_len=24"):
        engine.submit([3] * 25)
    with pytest.raises(InputError, match=r"\[0, 24\)"):
        engine.submit([3, 24])
    with pytest.raises(ConfigError, match=r"decoding\.beam"):
        engine.submit([3], DecodingConfig(beam=2))
    with pytest.raises(ConfigError, match=r"decoding\.stop"):
        engine.submit([3], DecodingConfig(stop=("x",)))


@pytest.fixture(scope="module")
def translator(tmp_path_factory) -> Translator:
    folder = tmp_path_factory.mktemp("continuous-seq2seq")
    src, tgt = write_reverse_task(folder)
    assert main(tiny_args(src, tgt, folder / "run", "--max-steps", "60", "--lr", "3e-3")) == 0
    return Translator.load(folder / "run", "cpu")


SENTENCES = ["a b c d", "e", "f g h i j k l m n", "b a", "c c d d e e f"]


@pytest.mark.parametrize(
    "decoding",
    [DecodingConfig(), DecodingConfig(temperature=0.9, top_p=0.9, seed=3)],
    ids=["greedy", "seeded"],
)
def test_texts_of_a_trained_translator_equal_translate_alone(translator, decoding):
    """Through the engine's thread, the sentences submitted at once from several threads: each text
    equals ``Translator.translate`` of that sentence alone, and the streamed pieces join into it."""
    tok = translator.tgt_tok
    engine = Seq2SeqEngine(
        translator.model, tok.bos_id, tok.eos_id, tok.decode, translator.suppressed, max_batch=3
    ).start()
    handles: dict[int, object] = {}

    def submit(i: int) -> None:
        handles[i] = engine.submit(translator.src_tok.encode(SENTENCES[i]), decoding)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(SENTENCES))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        for i, sentence in enumerate(SENTENCES):
            streamed = "".join(handles[i].pieces())
            result = handles[i].result()
            assert result.text == streamed == translator.translate([sentence], decoding)[0]
            assert result.finish_reason == ("stop" if result.ids[-1] == tok.eos_id else "length")
    finally:
        engine.close()
    assert len({handles[i].result().text for i in handles}) >= 3
