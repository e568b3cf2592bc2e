"""Devices: ``--device`` on the commands that decode or evaluate, ``load(run_dir, device=...)``,
``resolve_device``, and a forward pass without host synchronisation (traced whole by
``torch.compile``). The tests that need a GPU skip cleanly without one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vaswani
from tests.helpers import FIXTURES, copied_run
from tests.test_old_run_dirs import COMMANDS, EXPECTED, output_of
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.seq2seq import translate_ids
from vaswani.models.bert import Bert, BertClassifier, MaskedLM
from vaswani.models.gpt import GPT
from vaswani.models.tagger import BertTagger
from vaswani.models.transformer import Transformer
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.translation import Translator
from vaswani.runtime import resolve_device

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
VOCAB, PAD = 24, 0


def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# -- resolve_device --------------------------------------------------------------------------------


def test_auto_is_the_cpu_without_cuda_or_mps(monkeypatch):
    no_cuda(monkeypatch)
    monkeypatch.setattr("vaswani.runtime.mps_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_prefers_cuda_then_mps(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("auto") == torch.device("cuda", 1)
    no_cuda(monkeypatch)
    monkeypatch.setattr("vaswani.runtime.mps_available", lambda: True)
    assert resolve_device("auto") == torch.device("mps")


def test_cuda_n_is_checked_against_the_device_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    with pytest.raises(
        ConfigError, match=r"^device 'cuda:2': this machine has 2 CUDA device\(s\), cuda:0 to cuda:1$"
    ):
        resolve_device("cuda:2")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("cuda", "CUDA is not available here"),
        ("cuda:0", "CUDA is not available here"),
        ("mps", "no Apple MPS device"),
        ("gpu", "expected auto, cpu, cuda, cuda:N or mps"),
        ("cuda:x", "expected auto, cpu, cuda, cuda:N or mps"),
    ],
)
def test_a_missing_or_unknown_device_is_one_line(monkeypatch, name, words):
    no_cuda(monkeypatch)
    monkeypatch.setattr("vaswani.runtime.mps_available", lambda: False)
    with pytest.raises(ConfigError, match=words) as exc:
        resolve_device(name)
    assert "\n" not in str(exc.value) and repr(name) in str(exc.value)


# -- the commands ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", "{RUN}", "a b c"],
        ["evaluate", "{RUN}", "--src", "{DATA}/train.src", "--ref", "{DATA}/train.tgt"],
        ["attention", "{RUN}", "a b c", "--out", "{DATA}/map.png"],
        ["train", "translation", "--max-steps", "1", "--out", "{DATA}/new"],
    ],
)
def test_device_cuda_without_cuda_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys, argv):
    no_cuda(monkeypatch)
    run, data = copied_run("translation", tmp_path)
    argv = [a.replace("{RUN}", str(run)).replace("{DATA}", str(data)) for a in argv]
    assert main([*argv, "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("vaswani: error: device 'cuda': CUDA is not available here")


@pytest.mark.parametrize("task", sorted(task for task, commands in COMMANDS.items() if commands))
def test_device_cpu_gives_the_outputs_of_before(task, tmp_path, capsys):
    run, data = copied_run(task, tmp_path)
    for command, expected in zip(COMMANDS[task], EXPECTED[task]["outputs"], strict=True):
        assert output_of([*command, "--device", "cpu"], run, data, capsys) == expected, command


def test_embed_on_the_cpu_gives_the_vectors_of_before(tmp_path):
    run, _ = copied_run("encoder", tmp_path)
    out = tmp_path / "vectors.npy"
    assert main(["embed", str(run), "one two three", "four five", "--out", str(out), "--device", "cpu"]) == 0
    np.testing.assert_allclose(np.load(out), np.array(EXPECTED["encoder"]["vectors"]), atol=1e-6)


# -- the Python API --------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["translation", "lm", "mlm", "classify", "encoder"])
def test_load_puts_the_model_on_the_device(task):
    wrapper = vaswani.load(FIXTURES / task, device="cpu")
    model = wrapper.model
    assert {p.device for p in model.parameters()} == {torch.device("cpu")}


def test_load_refuses_a_missing_device_in_one_line(monkeypatch):
    no_cuda(monkeypatch)
    with pytest.raises(ConfigError, match="device 'cuda:1'"):
        vaswani.load(FIXTURES / "lm", device="cuda:1")


@needs_cuda
def test_a_cpu_run_decodes_on_cuda_as_on_the_cpu():
    """Greedy ids of the fixture runs (trained on the CPU), on the GPU and on the CPU."""
    sentences = ["a b c", "l h k", "d e f g h"]
    ids = {}
    for device in ("cpu", "cuda"):
        translator = Translator.load(FIXTURES / "translation", device=device)
        assert next(translator.model.parameters()).is_cuda == (device == "cuda")
        src = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(row) for row in translator.src_tok.encode_batch(sentences)], batch_first=True
        ).to(device)
        bos, eos = translator.tgt_tok.bos_id, translator.tgt_tok.eos_id
        ids[device] = translate_ids(translator.model, src, bos, eos).tokens.cpu()
    assert torch.equal(ids["cpu"], ids["cuda"])
    texts = {}
    for device in ("cpu", "cuda"):
        lm = LanguageModel.load(FIXTURES / "lm", device=device)
        texts[device] = lm.generate(["The ", "the cat"], DecodingConfig(max_new_tokens=12))
    assert texts["cpu"] == texts["cuda"]


@needs_cuda
def test_seeded_sampling_on_cuda_repeats():
    lm = LanguageModel.load(FIXTURES / "lm", device="cuda")
    decoding = DecodingConfig(max_new_tokens=12, temperature=1.0, seed=3)
    assert lm.generate(["The "], decoding) == lm.generate(["The "], decoding)


@needs_cuda
@pytest.mark.parametrize("task", ["translation", "lm", "mlm", "classify", "encoder"])
def test_a_run_loads_on_cuda(task):
    wrapper = vaswani.load(FIXTURES / task, device="cuda")
    model = wrapper.model
    assert {p.device.type for p in model.parameters()} == {"cuda"}


# -- no host synchronisation in the forward pass ---------------------------------------------------


def small(arch: str, **changes: object) -> ModelConfig:
    return ModelConfig(
        arch=arch, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=16, n_heads=2, d_ff=32,
        n_encoder_layers=2, n_decoder_layers=2, dropout=0.1, max_len=16, pad_id=PAD, **changes,
    )  # fmt: skip


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of ids, the second padded at the end (right) and True on real tokens."""
    tokens = torch.tensor([[3, 5, 7, 9, 11, 4], [6, 8, 10, PAD, PAD, PAD]])
    return tokens, tokens != PAD


def traced(model: torch.nn.Module, *args: object, **kwargs: object) -> torch.Tensor:
    """``model(*args)`` run by dynamo over the whole forward (``fullgraph``: a graph break, such as
    reading a tensor with ``bool()`` or ``.item()``, fails), checked equal to eager."""
    model.eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True, dynamic=False)
    out = compiled(*args, **kwargs)
    torch.testing.assert_close(out, model(*args, **kwargs))
    return out


def test_the_transformer_forward_is_one_graph():
    torch.manual_seed(0)
    model = Transformer(small("encoder_decoder"))
    src, _ = padded_batch()
    traced(model, src, torch.tensor([[1, 3, 5], [1, 4, PAD]]))


def test_the_gpt_forward_is_one_graph_with_a_padding_mask():
    torch.manual_seed(0)
    tokens, mask = padded_batch()
    traced(GPT(small("decoder_only")), tokens.flip(1), attention_mask=mask.flip(1))  # left-padded


@pytest.mark.parametrize("model_of", [Bert, MaskedLM, lambda c: BertClassifier(c, 3, "mean")])
def test_bert_and_its_heads_are_one_graph(model_of):
    torch.manual_seed(0)
    tokens, mask = padded_batch()
    traced(model_of(small("encoder_only")), tokens, torch.zeros_like(tokens), mask)


def test_the_masked_lm_and_tagger_read_at_chosen_positions_in_one_graph():
    """Their training forward reads the chosen positions (a boolean index: a shape the data decides,
    which dynamo captures when told it may)."""
    torch.manual_seed(0)
    tokens, mask = padded_batch()
    chosen = torch.zeros_like(mask)
    chosen[0, 1] = chosen[1, 2] = True
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        traced(MaskedLM(small("encoder_only")), tokens, None, mask, chosen)
        traced(BertTagger(small("encoder_only"), 5), tokens, mask, chosen)


def test_the_cached_decoding_steps_are_one_graph():
    """One step of the cached decoder of each model (after the prompt or source was read)."""
    torch.manual_seed(0)
    tokens, mask = padded_batch()
    gpt = GPT(small("decoder_only")).eval()
    cache = gpt.new_cache()
    gpt(tokens.flip(1), attention_mask=mask.flip(1), cache=cache)
    step_mask = torch.cat([mask.flip(1), torch.ones(2, 1, dtype=torch.bool)], dim=1)
    step = torch.compile(gpt, backend="eager", fullgraph=True, dynamic=False)
    out = step(torch.tensor([[2], [3]]), attention_mask=step_mask, cache=cache, last_only=True)
    assert out.shape == (2, 1, VOCAB)
    transformer = Transformer(small("encoder_decoder")).eval()
    source = transformer.start_decoding(tokens)
    transformer.decode(torch.tensor([[1], [1]]), source)
    decode = torch.compile(transformer.decode, backend="eager", fullgraph=True, dynamic=False)
    logits, _ = decode(torch.tensor([[5], [6]]), source, last_only=True)
    assert logits.shape == (2, 1, VOCAB)


def test_the_lm_step_function_over_a_traced_gpt_gives_the_eager_logits():
    torch.manual_seed(0)
    tokens, mask = padded_batch()
    gpt = GPT(small("decoder_only")).eval()
    eager = lm_next_logits(gpt, mask.flip(1), use_cache=False)(tokens.flip(1))
    compiled = torch.compile(gpt, backend="eager", fullgraph=True, dynamic=False)
    torch.testing.assert_close(lm_next_logits(compiled, mask.flip(1), use_cache=False)(tokens.flip(1)), eager)


@needs_cuda
def test_the_forward_pass_does_not_wait_for_the_gpu():
    """CUDA's sync debug mode raises on any operation that waits for the device."""
    torch.manual_seed(0)
    tokens, mask = (t.cuda() for t in padded_batch())
    models = [GPT(small("decoder_only")), Transformer(small("encoder_decoder"))]
    models += [BertClassifier(small("encoder_only"), 3, "mean")]
    models = [m.cuda().eval() for m in models]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        models[0](tokens.flip(1), attention_mask=mask.flip(1))
        models[1](tokens, tokens[:, :3])
        models[2](tokens, torch.zeros_like(tokens), mask)
    finally:
        torch.cuda.set_sync_debug_mode("default")
