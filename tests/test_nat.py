"""The nat task: the CMLM (models/cmlm.py), Mask-Predict (generation/mask_predict.py), its training
(tasks/nat.py: masking, the length predictor, resume, distillation) and its translator."""

from __future__ import annotations

import itertools
import json
import random
import shutil
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import WORDS, assert_resumed_like_whole, write_reverse_task
from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import NatData
from vaswani.errors import ConfigError, RunDirError
from vaswani.generation.mask_predict import (
    PADDING_SLACK,
    MaskPredictConfig,
    length_groups,
    mask_predict,
    remasked,
    teacher_ranking,
)
from vaswani.models.cmlm import CMLM
from vaswani.models.rnn import RNNTranslator
from vaswani.models.transformer import Transformer
from vaswani.pipelines.nat import NatTranslator, with_mask
from vaswani.pipelines.translation import Translator
from vaswani.rundir import RunDir
from vaswani.tasks import lifecycle, nat, registry, translation
from vaswani.tasks.nat import DISTILLED_FILE, TEACHER_BEAM, NatTask, mask_targets, train_nat
from vaswani.tasks.translation import TranslationData
from vaswani.training.selection import chosen_weights

MASK_ID, PAD = 7, 0
BANNED = (PAD, MASK_ID)


def tiny_cmlm(seed: int = 0, max_len: int = 16) -> CMLM:
    torch.manual_seed(seed)
    cfg = ModelConfig.preset("tiny", src_vocab_size=32, tgt_vocab_size=32, max_len=max_len, dropout=0.0)
    model = CMLM(cfg)
    with torch.no_grad():  # lengths spread out, so that rows differ
        model.length.bias.copy_(torch.randn(max_len) * 3)
    return model.eval()


def sources() -> torch.Tensor:
    return torch.tensor([[5, 9, 11, 4, 0, 0], [12, 13, 14, 15, 16, 17], [20, 0, 0, 0, 0, 0]])


def test_the_decoder_is_not_causal_and_ignores_padding():
    model = tiny_cmlm()
    source = model.encode(sources()[:1, :4])
    tgt = torch.tensor([[MASK_ID, 9, MASK_ID, 10]])
    first, _ = model.decode(tgt, source)
    changed, _ = model.decode(torch.tensor([[MASK_ID, 9, MASK_ID, 11]]), source)
    padded, _ = model.decode(torch.tensor([[MASK_ID, 9, MASK_ID, 10, PAD, PAD]]), source)
    assert not torch.allclose(first[0, 0], changed[0, 0])  # position 0 sees position 3
    torch.testing.assert_close(padded[:, :4], first)


def test_one_iteration_is_the_argmax_of_one_decoder_pass():
    model, src = tiny_cmlm(), sources()
    found = mask_predict(model, src, MASK_ID, MaskPredictConfig(iterations=1, length_beam=1), BANNED)
    for row in range(src.shape[0]):
        alone = src[row : row + 1, : int((src[row] != PAD).sum())]
        source = model.encode(alone)
        length_logits = model.length_logits(source)[0]
        length = int(length_logits[1:].argmax()) + 1
        logits, _ = model.decode(torch.full((1, length), MASK_ID), source)
        logits[..., list(BANNED)] = float("-inf")
        assert int(found.lengths[row]) == length
        assert found.tokens[row, :length].tolist() == logits[0].argmax(-1).tolist()
        torch.testing.assert_close(found.scores[row], logits[0].log_softmax(-1).max(-1).values.mean())


def test_remasked_is_the_papers_linear_schedule():
    assert remasked(torch.tensor([10]), 10, 1).item() == 9
    assert [remasked(torch.tensor([10]), 10, t).item() for t in range(1, 10)] == list(range(9, 0, -1))
    assert [remasked(torch.tensor([7]), 4, t).item() for t in (1, 2, 3)] == [7 * 3 // 4, 7 * 2 // 4, 7 // 4]


def test_the_number_re_masked_follows_the_schedule(monkeypatch):
    model, src, iterations = tiny_cmlm(), sources(), 5
    seen: list[torch.Tensor] = []
    decode = model.decode

    def counting(tgt, source, *args, **kwargs):
        seen.append((tgt == MASK_ID).sum(1))
        return decode(tgt, source, *args, **kwargs)

    monkeypatch.setattr(model, "decode", counting)
    mask_predict(model, src, MASK_ID, MaskPredictConfig(iterations=iterations, length_beam=2), BANNED)
    groups = len(seen) // iterations  # one decoder pass a group of similar lengths, each iteration
    by_step = [torch.cat(seen[i * groups : (i + 1) * groups]) for i in range(iterations)]
    lengths = by_step[0]  # the first pass: every position of every candidate masked
    assert len(seen) == iterations * groups and lengths.min() >= 1 and len(lengths) == 2 * len(src)
    for step in range(1, iterations):
        assert by_step[step].tolist() == (lengths * (iterations - step) // iterations).tolist()


def reference_mask_predict(model: CMLM, src: torch.Tensor, iterations: int, beam: int):
    """Mask-Predict written plainly: one unpadded source, one candidate at a time, every position's
    log-softmax of a full decoder pass at every iteration, nothing cached. (length, tokens, score)."""
    source = model.encode(src)
    length_logits = model.length_logits(source)[0]
    length_logits[0] = float("-inf")
    best = None
    for length in length_logits.topk(beam).indices.tolist():
        tokens, logp = torch.full((1, length), MASK_ID), torch.zeros(1, length)
        masked = torch.ones(1, length, dtype=torch.bool)
        for step in range(iterations):
            if step > 0:
                lowest = logp[0].argsort(stable=True)[: length * (iterations - step) // iterations]
                masked = torch.zeros(1, length, dtype=torch.bool)
                masked[0, lowest] = True
                tokens = tokens.masked_fill(masked, MASK_ID)
            logits, _ = model.decode(tokens, source)
            logits[..., list(BANNED)] = float("-inf")
            top_logp, top = logits.log_softmax(-1).max(-1)
            tokens, logp = torch.where(masked, top, tokens), torch.where(masked, top_logp, logp)
        if best is None or logp.mean() > best[2]:
            best = (length, tokens[0], logp.mean())
    return best


def test_mask_predict_is_the_plain_algorithm_run_on_each_sentence_alone():
    """The batched search (length groups, the source's keys and values computed once, logits only
    where a token is predicted) gives each sentence the plain algorithm's tokens, length and score."""
    model, src = tiny_cmlm(), sources()
    found = mask_predict(model, src, MASK_ID, MaskPredictConfig(iterations=4, length_beam=3), BANNED)
    for row in range(src.shape[0]):
        length, tokens, score = reference_mask_predict(
            model, src[row : row + 1, : int((src[row] != PAD).sum())], 4, 3
        )
        assert int(found.lengths[row]) == length
        assert found.tokens[row, :length].tolist() == tokens.tolist()
        torch.testing.assert_close(found.scores[row], score, rtol=1e-4, atol=1e-5)


def test_length_groups_bound_the_padding_and_cover_every_candidate():
    assert length_groups([]) == []
    assert length_groups([9, 10, 11, 12, 60]) == [(0, 4), (4, 5)]  # the far-off fifth length alone
    lengths = sorted(random.Random(0).choices(range(1, 64), k=320))
    groups = length_groups(lengths)
    assert groups[0][0] == 0 and groups[-1][1] == 320
    assert all(a < b == c for (a, b), (c, _) in itertools.pairwise(groups))
    for a, b in groups:
        assert b - a == 1 or lengths[b - 1] * (b - a) <= PADDING_SLACK * sum(lengths[a:b])


def test_a_batch_decodes_its_long_candidates_apart_and_as_one_at_a_time(monkeypatch):
    """One candidate far longer than the others is decoded in its own group (no row padded to its
    length), and every translation is the one its sentence gets alone."""
    model, src = tiny_cmlm(), sources()
    widths: list[int] = []
    decode = model.decode

    def recording(tgt, source, *args, **kwargs):
        widths.append(tgt.shape[1])
        return decode(tgt, source, *args, **kwargs)

    monkeypatch.setattr(model, "decode", recording)
    given = torch.tensor([3, 4, 15])
    found = mask_predict(model, src, MASK_ID, MaskPredictConfig(iterations=2, length_beam=1), BANNED, given)
    assert sorted(set(widths)) == [4, 15] and found.tokens.shape == (3, 15)
    for row in range(3):
        alone = mask_predict(
            model, src[row : row + 1], MASK_ID, MaskPredictConfig(2, 1), BANNED, given[row : row + 1]
        )
        assert found.tokens[row, : given[row]].tolist() == alone.tokens[0].tolist()


def test_translations_do_not_depend_on_the_other_sentences_of_the_batch():
    model, src = tiny_cmlm(), sources()
    config = MaskPredictConfig(iterations=4, length_beam=3)
    together = mask_predict(model, src, MASK_ID, config, BANNED)
    for row in range(src.shape[0]):
        alone = mask_predict(
            model, src[row : row + 1, : int((src[row] != PAD).sum())], MASK_ID, config, BANNED
        )
        length = int(alone.lengths[0])
        assert int(together.lengths[row]) == length
        assert together.tokens[row, :length].tolist() == alone.tokens[0, :length].tolist()
        assert (together.tokens[row, length:] == PAD).all()
        torch.testing.assert_close(together.scores[row], alone.scores[0], rtol=1e-4, atol=1e-5)


def test_given_lengths_decode_as_the_classifiers_own_choice_would():
    """Given lengths replace the classifier: its own argmax given back is the length beam of 1, and
    any other lengths give candidates of exactly those lengths."""
    model, src = tiny_cmlm(), sources()
    config = MaskPredictConfig(iterations=4, length_beam=1)
    own = mask_predict(model, src, MASK_ID, config, BANNED)
    given = mask_predict(model, src, MASK_ID, replace(config, length_beam=5), BANNED, lengths=own.lengths)
    assert torch.equal(given.tokens, own.tokens) and torch.equal(given.lengths, own.lengths)
    torch.testing.assert_close(given.scores, own.scores)
    other = torch.tensor([2, 9, 5])
    found = mask_predict(model, src, MASK_ID, config, BANNED, lengths=other)
    assert torch.equal(found.lengths, other) and found.tokens.shape == (3, 9)
    assert [int((row != PAD).sum()) for row in found.tokens] == other.tolist()


def test_joint_ranking_picks_the_candidate_of_the_best_tokens_and_length_log_probability():
    """rank_by="joint": of each source's l candidates (each what it is decoded alone at its length),
    the one of the largest Σ log p(y_i) + log P(N | x); "average" the one of the largest mean."""
    model, src, beam = tiny_cmlm(), sources(), 4
    config = MaskPredictConfig(iterations=3, length_beam=beam)
    length_logits = model.length_logits(model.encode(src)).float()
    length_logits[:, 0] = float("-inf")
    length_logp, candidates = length_logits.log_softmax(1).topk(beam, dim=1)
    alone = [
        mask_predict(model, src, MASK_ID, replace(config, length_beam=1), BANNED, lengths=candidates[:, k])
        for k in range(beam)
    ]
    mean = torch.stack([found.scores for found in alone], 1)  # (batch, beam)
    joint = mean * candidates + length_logp
    for rule, ranked in (("average", mean), ("joint", joint)):
        found = mask_predict(model, src, MASK_ID, replace(config, rank_by=rule), BANNED)
        assert (
            found.lengths.tolist() == candidates.gather(1, ranked.argmax(1, keepdim=True)).flatten().tolist()
        )
    assert not torch.equal(mean.argmax(1), joint.argmax(1))  # the two rules differ on these sources


@pytest.mark.parametrize("arch", ["encoder_decoder", "rnn"])
def test_teacher_ranking_picks_the_candidate_an_autoregressive_model_scores_best(arch):
    """rank_by="teacher": of each source's l candidates (each what it is decoded alone at its length),
    the one of the largest log P(y EOS | x) by an autoregressive model (a Transformer, whose sources
    are encoded once, or the RNN), computed here one candidate at a time on the unpadded source;
    without a teacher, a clear error."""
    model, src, beam, bos, eos = tiny_cmlm(), sources(), 4, 1, 2
    torch.manual_seed(3)
    cfg = ModelConfig.preset("tiny", arch=arch, src_vocab_size=32, tgt_vocab_size=32, dropout=0.0)
    teacher = (RNNTranslator(cfg) if arch == "rnn" else Transformer(cfg)).eval()
    config = MaskPredictConfig(iterations=3, length_beam=beam, rank_by="teacher")
    length_logits = model.length_logits(model.encode(src)).float()
    length_logits[:, 0] = float("-inf")
    candidates = length_logits.topk(beam, dim=1).indices
    scores, ids = torch.zeros(candidates.shape), []
    with torch.no_grad():
        for k in range(beam):
            alone = mask_predict(
                model,
                src,
                MASK_ID,
                replace(config, length_beam=1, rank_by="average"),
                BANNED,
                lengths=candidates[:, k],
            )
            ids.append([alone.tokens[b, : int(alone.lengths[b])].tolist() for b in range(src.shape[0])])
            for b in range(src.shape[0]):
                y = [*ids[k][b], eos]
                x = src[b : b + 1, : int((src[b] != PAD).sum())]
                logp = teacher(x, torch.tensor([[bos, *y[:-1]]])).log_softmax(-1)[0]
                scores[b, k] = sum(float(logp[t, token]) for t, token in enumerate(y))
    rank = teacher_ranking(teacher, bos, eos)
    with torch.no_grad():  # the batched, padded scores are the one-at-a-time ones
        texts = [alone_k[b] for alone_k in ids for b in range(src.shape[0])]
        batched = rank(src, torch.arange(src.shape[0]).repeat(beam), texts).view(beam, -1).t()
    torch.testing.assert_close(batched, scores, atol=1e-4, rtol=0)
    found = mask_predict(model, src, MASK_ID, config, BANNED, teacher=rank)
    assert found.lengths.tolist() == candidates.gather(1, scores.argmax(1, keepdim=True)).flatten().tolist()
    average = mask_predict(model, src, MASK_ID, replace(config, rank_by="average"), BANNED)
    assert not torch.equal(found.lengths, average.lengths)  # the teacher decides here
    with pytest.raises(ConfigError, match=r"decoding\.rank_by teacher needs the autoregressive run"):
        mask_predict(model, src, MASK_ID, config, BANNED)


def test_a_length_beam_wider_than_the_length_classes_is_refused():
    model = tiny_cmlm(max_len=8)
    with pytest.raises(ConfigError, match=r"decoding\.length_beam 8 is more than the run's 7 target lengths"):
        mask_predict(model, sources(), MASK_ID, MaskPredictConfig(length_beam=8), BANNED)
    with pytest.raises(ConfigError, match=r"decoding\.iterations must be between 1 and 1000, got 0"):
        MaskPredictConfig(iterations=0)


def test_masking_hides_between_one_and_all_of_each_target():
    torch.manual_seed(0)
    tgt = torch.tensor([[5, 6, 7, 8, 9, 10], [5, 6, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0]])
    counts = {row: set() for row in range(3)}
    for _ in range(200):
        inputs, masked = mask_targets(tgt, PAD, 99)
        assert not masked[tgt == PAD].any()
        assert torch.equal(inputs, tgt.masked_fill(masked, 99))
        for row in range(3):
            counts[row].add(int(masked[row].sum()))
    assert counts == {0: set(range(1, 7)), 1: {1, 2}, 2: {1}}


def copy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(n)]
    return [(row, row) for row in rows]


def test_the_length_predictor_learns_the_lengths_of_a_copy_task():
    data = TranslationData(copy_pairs(600, 0), copy_pairs(100, 1), [])
    src_tok, tgt_tok = translation.build_tokenizers(data, 60, shared=False)
    with_mask(tgt_tok)
    model_cfg = ModelConfig.preset(
        "tiny", src_vocab_size=64, tgt_vocab_size=64, max_len=16, dropout=0.0, n_layers=1
    )
    run = RunConfig(
        "nat",
        model_cfg,
        TrainConfig(batch_tokens=600, eval_sentences=4, label_smoothing=0.0),
        NatData(source="default"),
    )
    task = NatTask(run, src_tok, tgt_tok, data, tgt_tok.tokenizer.token_to_id("<mask>"))
    torch.manual_seed(0)
    model = CMLM(model_cfg)
    before = task.evaluate(model.eval())["valid_length_accuracy"]
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(30):
        for batch in task.train_batches():
            loss, items = task.loss(model, batch)
            optimizer.zero_grad()
            (loss / items).backward()
            optimizer.step()
    after = task.evaluate(model.eval())["valid_length_accuracy"]
    assert before < 0.2 and after > 0.4, (before, after)  # 8 lengths: chance is 1/8; 0.08 → 0.52 seen


def nat_run(tmp_path, name: str, max_steps: int, **data) -> RunConfig:
    src, tgt = write_reverse_task(tmp_path, n=200)
    model = ModelConfig.preset("tiny", dropout=0.1, max_len=24, tie_embeddings="output")
    train = TrainConfig(
        batch_tokens=300, max_steps=max_steps, lr=3e-3, warmup_steps=4, eval_every=1000,
        checkpoint_every=5, eval_sentences=4, seed=3,
    )  # fmt: skip
    return RunConfig(
        "nat", model, train, NatData(source="files", src=str(src), tgt=str(tgt), vocab_size=60, **data)
    )


def test_a_resumed_nat_run_ends_with_the_same_weights(tmp_path):
    whole = tmp_path / "whole"
    train_nat(nat_run(tmp_path, "whole", 10), whole, quiet=True)
    parts = tmp_path / "parts"
    train_nat(nat_run(tmp_path, "parts", 5), parts, quiet=True)
    first_leg = load_file(parts / "model.safetensors")
    lifecycle.resume(parts, quiet=True, max_steps=10)
    assert_resumed_like_whole(whole, parts, first_leg, 10)


def test_a_nat_run_loads_through_the_registry_and_translates(tmp_path):
    run_dir = tmp_path / "run"
    _, translator, _ = train_nat(nat_run(tmp_path, "run", 3), run_dir, quiet=True)
    loaded = registry.load(run_dir, "cpu")
    assert isinstance(loaded, NatTranslator)
    config = MaskPredictConfig(iterations=3, length_beam=2)
    assert loaded.translate(["a b c", "d"], config) == translator.translate(["a b c", "d"], config)
    assert loaded.translate([]) == []


def test_distillation_trains_on_the_teachers_beam_translations(tmp_path, monkeypatch):
    src, tgt = write_reverse_task(tmp_path, n=200)
    teacher = tmp_path / "teacher"
    flags = {"model": {"preset": "tiny", "max_len": 24}, "train": {"max_steps": 3, "batch_tokens": 300}}
    files = {"src": str(src), "tgt": str(tgt), "vocab_size": 60}
    lifecycle.train(registry.configure("translation", {**flags, "data": files}), teacher, quiet=True)
    seen: list[TranslationData] = []
    monkeypatch.setattr(
        NatTask, "__init__", lambda self, run, s, t, data, m: seen.append(data) or exit_early()
    )
    run = registry.configure("nat", {**flags, "data": {**files, "distill_from": str(teacher)}})
    with pytest.raises(StopTraining):
        train_nat(run, tmp_path / "student", quiet=True)
    beams = registry.load(teacher, "cpu").translate([s for s, _ in seen[0].train], TEACHER_BEAM)
    assert [t for _, t in seen[0].train] == beams
    assert json.loads((tmp_path / "student" / DISTILLED_FILE).read_text(encoding="utf-8")) == beams
    other = registry.configure(
        "nat", {**flags, "data": {**files, "vocab_size": 20, "distill_from": str(teacher)}}
    )
    with pytest.raises(ConfigError, match=r"its source vocabulary .* differs from this run's"):
        train_nat(other, tmp_path / "other", quiet=True)


def test_a_resumed_distilled_run_reads_its_translations_without_the_teacher(tmp_path):
    src, tgt = write_reverse_task(tmp_path, n=200)
    teacher = tmp_path / "teacher"
    flags = {"model": {"preset": "tiny", "max_len": 24}, "train": {"max_steps": 3, "batch_tokens": 300}}
    files = {"src": str(src), "tgt": str(tgt), "vocab_size": 60}
    lifecycle.train(registry.configure("translation", {**flags, "data": files}), teacher, quiet=True)
    student = tmp_path / "student"
    lifecycle.train(nat_run(tmp_path, "student", 5, distill_from=str(teacher)), student, quiet=True)
    kept = (student / DISTILLED_FILE).read_bytes()
    shutil.move(teacher, tmp_path / "gone")
    lifecycle.resume(student, quiet=True, max_steps=8)
    assert RunDir(student).read_config().train.max_steps == 8
    assert (student / DISTILLED_FILE).read_bytes() == kept


def test_a_run_started_from_a_distilled_nat_run_takes_its_weights_corpus_and_translations(
    tmp_path, monkeypatch
):
    src, tgt = write_reverse_task(tmp_path, n=200)
    teacher, student, more = tmp_path / "teacher", tmp_path / "student", tmp_path / "more"
    flags = {"model": {"preset": "tiny", "max_len": 24}, "train": {"max_steps": 3, "batch_tokens": 300}}
    files = {"src": str(src), "tgt": str(tgt), "vocab_size": 60}
    lifecycle.train(registry.configure("translation", {**flags, "data": files}), teacher, quiet=True)
    lifecycle.train(nat_run(tmp_path, "student", 5, distill_from=str(teacher)), student, quiet=True)
    shutil.move(teacher, tmp_path / "gone")  # the translations must come from the student's run
    seen: list = []
    monkeypatch.setattr(
        nat, "NatTask", lambda run, s, t, data, m: seen.append((run, t, data)) or NatTask(run, s, t, data, m)
    )
    monkeypatch.setattr(
        nat, "fit_run", lambda run, run_dir, task, build, *a, **k: seen.append(build()) or exit_early()
    )
    run = registry.configure("nat", {"train": {"max_steps": 2}, "data": {"init": str(student)}})
    with pytest.raises(StopTraining):
        train_nat(run, more, quiet=True)
    (run, tgt_tok, data), model = seen
    chosen = load_file(chosen_weights(RunDir(student), "bleu")[0])
    state = model.state_dict()  # every stored weight (a tied output projection is not stored)
    assert len(chosen) > 10 and all(torch.equal(state[k], v) for k, v in chosen.items())
    assert run.model == RunDir(student).read_config().model
    assert (run.data.src, run.data.distill_from) == (str(src), str(teacher))
    assert tgt_tok.tokenizer.get_vocab() == NatTranslator.load(student, "cpu").tgt_tok.tokenizer.get_vocab()
    translations = json.loads((student / DISTILLED_FILE).read_text(encoding="utf-8"))
    assert [t for _, t in data.train] == translations
    assert (more / DISTILLED_FILE).read_bytes() == (student / DISTILLED_FILE).read_bytes()
    (tmp_path / "other").mkdir()  # as many sources, other sentences: the teacher must translate them
    other_src, other_tgt = write_reverse_task(tmp_path / "other", n=200, seed=1)
    files = {"init": str(student), "src": str(other_src), "tgt": str(other_tgt), "distill_from": str(teacher)}
    run = registry.configure("nat", {"train": {"max_steps": 2}, "data": files})
    with pytest.raises(RunDirError, match="teacher: no such run directory"):
        train_nat(run, tmp_path / "other-run", quiet=True)


@pytest.mark.slow  # trains three tiny runs
def test_translate_with_a_teacher_prints_what_the_api_ranks_and_refuses_another_vocabulary(tmp_path, capsys):
    src, tgt = write_reverse_task(tmp_path, n=200)
    flags = {"model": {"preset": "tiny", "max_len": 24}, "train": {"max_steps": 3, "batch_tokens": 300}}
    files = {"src": str(src), "tgt": str(tgt), "vocab_size": 60}
    teacher, other, student = tmp_path / "teacher", tmp_path / "other", tmp_path / "student"
    lifecycle.train(registry.configure("translation", {**flags, "data": files}), teacher, quiet=True)
    other_files = {**files, "vocab_size": 20}
    lifecycle.train(registry.configure("translation", {**flags, "data": other_files}), other, quiet=True)
    lifecycle.train(nat_run(tmp_path, "student", 3), student, quiet=True)
    sentences, config = ["a b c d", "e"], MaskPredictConfig(iterations=3, length_beam=3, rank_by="teacher")
    api = NatTranslator.load(student, "cpu").with_teacher(Translator.load(teacher, "cpu"))
    capsys.readouterr()
    flags_ = ["--iterations", "3", "--length-beam", "3", "--teacher", str(teacher)]
    assert main(["translate", str(student), *sentences, *flags_]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == api.translate(sentences, config)
    assert "the teacher's weights" in captured.err
    with pytest.raises(ConfigError, match=r"--teacher .*other: its vocabularies are not the nat run's"):
        NatTranslator.load(student, "cpu").with_teacher(Translator.load(other, "cpu"), f"--teacher {other}")


class StopTraining(Exception):
    """Raised in place of training, once the task's data is seen."""


def exit_early() -> None:
    raise StopTraining


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_mask_predict_on_cuda_gives_the_cpus_translations():
    model, src = tiny_cmlm(), sources()
    config = MaskPredictConfig(iterations=4, length_beam=3)
    on_cpu = mask_predict(model, src, MASK_ID, config, BANNED)
    on_gpu = mask_predict(model.cuda(), src.cuda(), MASK_ID, config, BANNED)
    assert on_gpu.tokens.device.type == "cuda"
    assert torch.equal(on_gpu.lengths.cpu(), on_cpu.lengths)
    assert torch.equal(on_gpu.tokens.cpu(), on_cpu.tokens)


def test_a_nat_run_is_used_with_its_best_weights_and_says_so(tmp_path):
    run_dir = tmp_path / "run"
    run = nat_run(tmp_path, "run", 3)
    train_nat(replace(run, train=replace(run.train, select_by="bleu", eval_every=1)), run_dir, quiet=True)
    assert (run_dir / RunDir.BEST).is_file()
    loaded = NatTranslator.load(run_dir, "cpu")
    assert loaded.weights_note.startswith("weights: model.best.safetensors (the best by bleu")
    best = load_file(run_dir / RunDir.BEST)
    assert best and all(torch.equal(loaded.model.state_dict()[k], t) for k, t in best.items())
