"""What training logs: ``train_log.csv``'s columns as rows of new kinds arrive (and an older log
resumed), and the TensorBoard event files of ``--tensorboard``, the same numbers as the log."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.helpers import log_rows, tiny_lm_args, write_lm_text
from vaswani.cli import main
from vaswani.plots import read_train_log
from vaswani.rundir import RunDir
from vaswani.training.checkpoint import list_checkpoints


def test_the_log_header_grows_with_new_columns_and_keeps_earlier_rows(tmp_path):
    files = RunDir(tmp_path)
    files.append_log({"step": 10, "kind": "train", "seconds": 1.0, "train_loss": 2.5})
    files.append_log({"step": 10, "kind": "eval", "seconds": 1.0, "valid_loss": 2.25})
    files.append_log({"step": 20, "kind": "train", "seconds": 2.0, "train_loss": 2.0})
    lines = (tmp_path / "train_log.csv").read_text().splitlines()
    assert lines == [
        "step,kind,seconds,train_loss,valid_loss",
        "10,train,1.0,2.5,",
        "10,eval,1.0,,2.25",
        "20,train,2.0,2.0,",
    ]
    files.truncate_log(10)  # a resume from step 10 drops what came after
    assert (tmp_path / "train_log.csv").read_text().splitlines() == lines[:3]


def test_an_older_log_continued_keeps_its_rows_and_reads_as_evaluations(tmp_path):
    """A log written before log rows had a kind (one row per evaluation, the train loss a moving
    average), continued by a resumed run: its rows stay as they were, under the wider header."""
    old = "step,seconds,lr,train_loss,valid_loss\n100,5.0,0.001,3.0,3.5\n"
    (tmp_path / "train_log.csv").write_text(old, encoding="utf-8")
    files = RunDir(tmp_path)
    files.append_log(
        {"step": 110, "kind": "train", "seconds": 5.5, "lr": 0.001, "train_loss": 2.9, "grad_norm": 1}
    )
    rows = log_rows(tmp_path)
    assert rows[0] == {
        **dict(zip(old.split()[0].split(","), old.split()[1].split(","), strict=True)),
        "kind": "",
        "grad_norm": "",
    }
    assert rows[1]["kind"] == "train" and rows[1]["valid_loss"] == ""
    log = read_train_log(tmp_path / "train_log.csv")
    assert log["step"] == [100, 110] and log["train_loss"] == [3.0, 2.9] and "kind" not in log


def test_tensorboard_events_hold_the_logs_numbers_once_each_after_a_resume(tmp_path):
    """A run killed after its checkpoint at step 10, having logged to step 15, resumes: its event
    files, read as TensorBoard reads them, hold every logged step once, with the log's values."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    text, run = write_lm_text(tmp_path / "train.txt"), tmp_path / "run"
    flags = ("--max-steps", "15", "--log-every", "3", "--eval-every", "5", "--checkpoint-every", "5")
    assert main(tiny_lm_args(text, run, *flags, "--tensorboard")) == 0
    shutil.rmtree(list_checkpoints(run)[-1])
    assert main(["train", "lm", "--resume", str(run), "--quiet"]) == 0
    assert len(list((run / "tensorboard").iterdir())) == 2  # one event file per process start

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    for kind, names in (
        ("train", ("train_loss", "lr", "grad_norm", "tokens_per_second")),
        ("eval", ("valid_loss",)),
    ):
        rows = log_rows(run, kind)
        for name in names:
            logged = [(int(row["step"]), float(row[name])) for row in rows]
            shown = [(e.step, e.value) for e in events.Scalars(name)]
            assert [step for step, _ in shown] == [step for step, _ in logged], name
            assert [value for _, value in shown] == pytest.approx([v for _, v in logged], rel=1e-6), name
    assert [int(row["step"]) for row in log_rows(run, "train")] == [3, 6, 9, 12, 15]


def test_tensorboard_without_the_package_is_one_line(tmp_path, monkeypatch, capsys):
    for name in [n for n in sys.modules if n.split(".")[0] == "tensorboard"] + ["tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing it fails
    text = write_lm_text(tmp_path / "train.txt")
    assert main(tiny_lm_args(text, tmp_path / "run", "--max-steps", "2", "--tensorboard")) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(
        "vaswani: error: --tensorboard needs the tensorboard"
    )
    assert "pip install tensorboard" in err


def test_mlflow_run_holds_the_logs_numbers_and_the_config_and_a_resume_continues_it(tmp_path):
    """``--mlflow FOLDER``: one MLflow run whose metric history is the log's values at the log's
    steps, whose parameters are the config's fields; a resumed run continues the same MLflow run."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    text, run, store = write_lm_text(tmp_path / "train.txt"), tmp_path / "run", tmp_path / "mlruns"
    flags = ("--max-steps", "9", "--log-every", "3", "--eval-every", "9", "--mlflow", str(store))
    assert main(tiny_lm_args(text, run, *flags)) == 0
    assert main(["train", "lm", "--resume", str(run), "--max-steps", "12", "--quiet"]) == 0
    client = MlflowClient(store.resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("vaswani").experiment_id])
    assert found.info.run_name == "run" and found.info.status == "FINISHED"
    assert found.data.params["model.d_model"] == "32" and found.data.params["train.log_every"] == "3"
    for kind, name in (("train", "train_loss"), ("train", "lr"), ("eval", "valid_loss")):
        logged = [(int(row["step"]), float(row[name])) for row in log_rows(run, kind)]
        history = sorted((m.step, m.value) for m in client.get_metric_history(found.info.run_id, name))
        assert [s for s, _ in history] == [s for s, _ in logged], name
        assert [v for _, v in history] == pytest.approx([v for _, v in logged], rel=1e-6), name
    assert [int(row["step"]) for row in log_rows(run, "train")] == [3, 6, 9, 12]


def test_mlflow_without_the_package_is_one_line(tmp_path, monkeypatch, capsys):
    for name in [n for n in sys.modules if n.split(".")[0] == "mlflow"] + ["mlflow"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing it fails
    text = write_lm_text(tmp_path / "train.txt")
    assert main(tiny_lm_args(text, tmp_path / "run", "--max-steps", "2", "--mlflow", "mlruns")) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("vaswani: error: --mlflow needs the mlflow")
