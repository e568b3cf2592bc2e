"""Training precision: bf16 and fp32 loss curves agree, fp16 is refused off CUDA and its gradient
scaler skips an overflowing step and lowers the scale, the old ``bf16`` spellings still mean
``precision``, ``auto`` follows native bf16, and ``tf32`` sets CUDA's switches."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import log_rows, tiny_lm_args, write, write_lm_text
from vaswani import runtime
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.models.gpt import GPT
from vaswani.tasks import registry
from vaswani.training import precision as precision_module
from vaswani.training.precision import Precision

VOCAB = 40


def _lm_args(text: Path, run: Path, *extra: str) -> list[str]:
    """:func:`tiny_lm_args` without its ``--no-bf16``, so that ``--precision`` may say any."""
    return [a for a in tiny_lm_args(text, run, *extra) if a != "--no-bf16"]


def _losses(run: Path) -> list[tuple[float, float]]:
    """(train_loss, valid loss) at each evaluation of ``run``: its train and eval rows of that step."""
    train = {row["step"]: float(row["train_loss"]) for row in log_rows(run, "train")}
    return [(train[row["step"]], float(row["valid_loss"])) for row in log_rows(run, "eval")]


def _precision(run: Path) -> str:
    return json.loads((run / "config.json").read_text(encoding="utf-8"))["train"]["precision"]


@pytest.mark.slow
def test_bf16_and_fp32_loss_curves_agree(tmp_path):
    """The lm job (its recipe: AdamW, warm-up, cosine decay) cut to 60 steps of a one-layer model,
    logged every 10 steps. bf16 autocast rounds each matmul's inputs to 8 mantissa bits (a relative
    error of about 0.4% per product), and the difference compounds through the updates; measured
    here, the curves differ by at most 4e-4 nats. The tolerance, 0.005 nats at every logged step
    (train and valid loss), leaves ten times that, and is a hundredth of how far the valid loss
    falls meanwhile (more than 0.5 nats): a bf16 path that trained differently would leave it."""
    text = write_lm_text(tmp_path / "train.txt")
    args = ("--max-steps", "60", "--eval-every", "10", "--max-minutes", "5")
    runs = {p: tmp_path / p for p in ("fp32", "bf16")}
    for name, run in runs.items():
        assert main(_lm_args(text, run, *args, "--precision", name)) == 0
        assert _precision(run) == name
    fp32, bf16 = _losses(runs["fp32"]), _losses(runs["bf16"])
    assert len(fp32) == len(bf16) == 6
    assert fp32[0][1] - fp32[-1][1] > 0.5  # it learns
    for (train32, valid32), (train16, valid16) in zip(fp32, bf16, strict=True):
        assert abs(train32 - train16) < 0.005 and abs(valid32 - valid16) < 0.005
    assert fp32 != bf16  # bf16 really ran


def test_fp16_is_refused_off_cuda_in_one_line(tmp_path, capsys):
    text = write_lm_text(tmp_path / "train.txt")
    assert main(_lm_args(text, tmp_path / "run", "--precision", "fp16")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "fp16 trains on CUDA only" in err and "'train.precision'" in err


def _gpt() -> GPT:
    torch.manual_seed(0)
    cfg = ModelConfig.preset(
        "gpt-mini", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32, n_heads=2, d_ff=64, n_layers=2,
        max_len=16,
    )  # fmt: skip
    return GPT(cfg)


def test_fp16_scaler_skips_an_overflowing_step_and_lowers_the_scale(monkeypatch):
    """On the CPU (fp16 autocast and ``GradScaler("cpu")`` exist there) with a first scale of 2^40:
    the scaled gradients overflow fp16, so the first steps are skipped (the weights unchanged) and
    the scale halves each time; once it fits, the steps apply and the losses stay finite."""
    monkeypatch.setattr(precision_module, "FP16_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(precision_module, "INIT_SCALE", 2.0**40)
    model = _gpt()
    precision = Precision("fp16", torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (4, 17), generator=torch.Generator().manual_seed(1))
    scales, applied, losses = [], [], []
    for _ in range(40):
        before = [p.detach().clone() for p in model.parameters()]
        with precision.autocast():
            logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        precision.backward(loss)
        precision.unscale(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if torch.isfinite(norm):
            precision.step(optimizer)
        else:
            assert precision.overflowed()
        optimizer.zero_grad(set_to_none=True)
        moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
        scales.append(precision.scaler.get_scale())
        applied.append(moved)
        losses.append(loss.item())
    skipped = applied.index(True)
    assert skipped >= 1 and not any(applied[:skipped]) and all(applied[skipped:])
    assert scales[:skipped] == [2.0**40 / 2 ** (i + 1) for i in range(skipped)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[skipped]
    assert precision.state_dict()["scale"] == scales[-1]


def test_vaswani_train_with_fp16_skips_overflows_and_trains_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(precision_module, "FP16_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(precision_module, "INIT_SCALE", 2.0**40)
    text = write_lm_text(tmp_path / "train.txt")
    args = ("--precision", "fp16", "--max-steps", "30", "--eval-every", "10", "--max-bad-steps", "3")
    assert main(_lm_args(text, tmp_path / "run", *args)) == 0
    losses = _losses(tmp_path / "run")
    assert len(losses) == 3 and all(math.isfinite(v) for row in losses for v in row)
    assert losses[-1][1] < losses[0][1]


def _configured(*flags: str, config: Path | None = None) -> str:
    """The precision ``vaswani train lm`` would train with, for these flags (parsed by the CLI)."""
    from vaswani.cli import build_parser
    from vaswani.cli.train import flags_of

    args = build_parser().parse_args(["train", "lm", "--text", "x.txt", *flags])
    args.argv_flags = list(flags)
    return registry.configure("lm", flags_of(args, registry.get(args.task)), config=config).train.precision


@pytest.mark.parametrize(
    ("flags", "expected"),
    [(("--bf16",), "bf16"), (("--no-bf16",), "fp32"), (("--bf16", "--precision", "bf16"), "bf16")],
)
def test_the_old_bf16_flags_mean_precision(flags, expected):
    assert _configured(*flags) == expected


@pytest.mark.parametrize(("old", "expected"), [("true", "bf16"), ("false", "fp32")])
def test_a_config_files_old_bf16_means_precision(tmp_path, old, expected):
    config = write(tmp_path / "old.yaml", f"train: {{bf16: {old}}}\n")
    assert _configured(config=config) == expected
    assert _configured("--precision", "bf16", config=config) == "bf16"  # a flag still wins


def test_bf16_with_a_contradicting_precision_is_refused_naming_both(tmp_path, capsys):
    text = write_lm_text(tmp_path / "train.txt")
    assert main(_lm_args(text, tmp_path / "run", "--bf16", "--precision", "fp32")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--precision" in err and "bf16" in err and "contradicts" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("native", [True, False])
def test_precision_auto_is_bf16_exactly_where_the_cpu_computes_bf16_natively(monkeypatch, native):
    monkeypatch.setattr(runtime, "native_bf16", lambda: native)
    assert _configured("--device", "cpu") == ("bf16" if native else "fp32")  # the lm recipe says auto


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("tf32", [True, False])
def test_tf32_sets_the_cuda_backend_switches(tf32):
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        Precision("fp32", torch.device("cuda"), tf32=tf32)
        assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


class _NanOnce:
    """A task of four batches whose second one has a non-finite loss."""

    def train_batches(self) -> list[torch.Tensor]:
        return [torch.full((2, 3), float("nan") if i == 1 else 1.0) for i in range(4)]

    def loss(self, model: torch.nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, int]:
        return model(batch).pow(2).sum(), batch.shape[0]

    def batch_tokens(self, batch: torch.Tensor) -> int:
        return batch.numel()

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        return {}


def test_fp16_skips_a_non_finite_loss_as_a_bad_step_and_trains_on(tmp_path, monkeypatch):
    """A non-finite loss is a bad step under fp16 too, and the scaler is updated for it, so that the
    next step may unscale again (without that update torch refuses the second ``unscale_``)."""
    from vaswani.config import TrainConfig
    from vaswani.training.trainer import Trainer

    monkeypatch.setattr(precision_module, "FP16_DEVICES", ("cuda", "cpu"))
    cfg = TrainConfig(precision="fp16", device="cpu", max_steps=3, eval_every=100, warmup_steps=0,
                      schedule="constant", lr=1e-3)  # fmt: skip
    trainer = Trainer(torch.nn.Linear(3, 3), _NanOnce(), cfg, tmp_path / "run")
    (tmp_path / "run").mkdir()
    result = trainer.fit(quiet=True)
    assert result["steps"] == 3 and result["skipped_steps"] >= 1
