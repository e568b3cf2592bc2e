"""``BertForPreTraining`` both ways with its next-sentence head: the imported run's NSP and MLM
logits are ``transformers``' ``seq_relationship_logits`` and ``prediction_logits`` on the same
weights, and an exported ``mlm --nsp`` run loads in ``BertForPreTraining`` with the same logits
(the BertForMaskedLM and BertModel parity is test_interop_bert.py's)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from tests.helpers import perturb, write_run_dir
from tests.hf import hf_folder
from tests.test_interop_bert import HF_CONFIGS, SHAPES, hf_model, inputs, load_run, wordpiece
from vaswani.config import RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.errors import DataError
from vaswani.interop import export_hf, import_hf
from vaswani.interop.bert import config_from_hf
from vaswani.interop.bert_folder import state_from_hf, state_to_hf
from vaswani.models.bert import MaskedLM
from vaswani.pipelines.bert import MLM_TASK

transformers = pytest.importorskip("transformers")
__all__ = ["wordpiece"]  # the tokenizer fixture, shared with test_interop_bert.py


@torch.no_grad()
def assert_same_pretraining_logits(hf: Any, ours: MaskedLM, config: dict[str, Any]) -> None:
    """Our (MLM, NSP) logits agree with ``BertForPreTraining``'s to 1e-4 on padded rows."""
    tokens, segments, mask = inputs(config)
    out = hf(input_ids=tokens, token_type_ids=segments, attention_mask=mask)
    mlm, nsp = ours(tokens, segments, mask, next_sentence=True)
    assert nsp.shape == (3, 2)
    torch.testing.assert_close(nsp, out.seq_relationship_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(mlm, out.prediction_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("index", range(len(HF_CONFIGS)), ids=SHAPES)
def test_imported_pretraining_model_keeps_the_next_sentence_head(tmp_path, wordpiece, index):
    config = HF_CONFIGS[index]
    hf = hf_model("BertForPreTraining", index, **config)
    run, ours = load_run(import_hf(hf_folder(tmp_path / "hf", hf, wordpiece), tmp_path / "run"))
    assert run.task == MLM_TASK and run.model.pooler and run.data.nsp
    assert isinstance(ours, MaskedLM) and ours.nsp is not None
    assert_same_pretraining_logits(hf, ours, config)


@pytest.mark.parametrize("index", range(len(HF_CONFIGS)), ids=SHAPES)
def test_exported_nsp_run_loads_in_bert_for_pretraining(tmp_path, wordpiece, index):
    config = HF_CONFIGS[index]
    cfg = config_from_hf(config).replace(fused_qkv=index == 1)
    torch.manual_seed(index)
    ours = perturb(MaskedLM(cfg, nsp=True).eval(), 0.1)
    run = RunConfig(MLM_TASK, cfg, TrainConfig(), TextData(source="default", nsp=True))
    write_run_dir(tmp_path / "run", run, ours, {"tokenizer.json": wordpiece})
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    hf = transformers.BertForPreTraining.from_pretrained(out).eval()
    assert_same_pretraining_logits(hf, ours, config)
    _, again = load_run(import_hf(out, tmp_path / "again"))
    assert isinstance(again, MaskedLM) and again.nsp is not None
    assert_same_pretraining_logits(hf, again, config)


@pytest.mark.parametrize("index", range(len(HF_CONFIGS)), ids=SHAPES)
def test_pretraining_tensors_survive_a_round_trip(index):
    hf = hf_model("BertForPreTraining", index, **HF_CONFIGS[index])
    tensors = dict(hf.state_dict())
    cfg = config_from_hf(hf.config.to_dict())
    ours = state_from_hf(tensors, cfg, mlm_head=True, nsp=True)
    assert {"nsp.linear.weight", "nsp.linear.bias", "bert.pooler.dense.weight"} <= ours.keys()
    back = state_to_hf(ours, cfg, mlm_head=True, nsp=True)
    assert {"cls.seq_relationship.weight", "cls.seq_relationship.bias"} <= back.keys()
    aliases = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert set(back) == (set(tensors) - aliases if cfg.tie_embeddings != "none" else set(tensors))
    for name, tensor in back.items():
        if name != "cls.predictions.bias" or cfg.tie_embeddings != "none":
            assert torch.equal(tensor, tensors[name]), name


def test_a_next_sentence_head_without_the_pooler_is_refused(tmp_path, wordpiece):
    hf = hf_model("BertForPreTraining", 6, **HF_CONFIGS[0])
    src = hf_folder(tmp_path / "hf", hf, wordpiece)
    state = {k: v for k, v in hf.state_dict().items() if "pooler" not in k}
    (src / "model.safetensors").unlink()
    torch.save(state, src / "pytorch_model.bin")
    with pytest.raises(DataError, match=r"next-sentence head \(cls.seq_relationship\) without the pooler"):
        import_hf(src, tmp_path / "run")
