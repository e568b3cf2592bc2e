"""Training on several processes (gloo on the CPU, 2 processes): ``--nproc 2`` trains the weights
that one process trains on the whole batches, with and without gradient accumulation, under DDP
and FSDP2; a killed 2-process run resumes bit-identical on 2 processes and within the tolerance of
another reduction order on 1; checkpoints move between process counts; ``torchrun`` runs the same;
only the main process writes files.

The tolerance, 1e-6 on every weight after a few steps (fp32, ``--deterministic``), is that of summing
the gradients of each half batch instead of the whole batch at once. The runs use Adam's ε = 1e-6:
some gradients are zero in exact arithmetic (a key bias: softmax ignores a constant added to every
score of a query) and hold only rounding noise, which depends on the order of the sums; with ε 1e-9
Adam turns that noise into steps of the full learning rate, in either direction.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.helpers import log_rows, write_reverse_task
from vaswani.training.checkpoint import list_checkpoints

pytestmark = pytest.mark.slow

TOLERANCE = 1e-6
SMALL = [
    "--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--dropout", "0",
    "--deterministic", "--lr", "1e-4", "--min-lr", "0", "--eps", "1e-6", "--warmup", "2",
    "--eval-every", "1000", "--quiet", "--no-bf16",
]  # fmt: skip
# A process other than the main one reports each file it opens for writing, creates, renames or
# removes under the watched folder (Python's audit hooks, loaded through sitecustomize).
WATCH = """
import os, sys
if os.environ.get("RANK", "0") != "0" and "VASWANI_WATCH" in os.environ:
    root = os.environ["VASWANI_WATCH"]
    def hook(event, args):
        if event == "open":
            mode, flags = args[1] or "", args[2] or 0
            if not (any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
                return
        elif event not in ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree"):
            return
        if isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(root):
                sys.stderr.write(f"NOT-MAIN-WROTE {event} {path}\\n")
    sys.addaudithook(hook)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """The environment of every run: the audit hook on, watching the tests' folder."""
    hooks = tmp_path_factory.mktemp("hooks")
    (hooks / "sitecustomize.py").write_text(WATCH, encoding="utf-8")
    root = Path(__file__).resolve().parent.parent / "src"
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hooks), str(root)]),
        "VASWANI_WATCH": str(tmp_path_factory.getbasetemp()),
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, list[str]]:
    """Data arguments of a tiny translation and language-modelling job."""
    folder = tmp_path_factory.mktemp("data")
    src, tgt = write_reverse_task(folder, n=300)
    text = folder / "text.txt"
    text.write_text(" ".join(tgt.read_text(encoding="utf-8").split()) * 2, encoding="utf-8")
    return {
        "translation": ["--src", str(src), "--tgt", str(tgt), "--vocab-size", "60", "--batch-tokens", "400",
                        "--eval-sentences", "5"],
        "lm": ["--text", str(text), "--tokenizer", "char", "--max-len", "32", "--batch-tokens", "512"],
    }  # fmt: skip


def vaswani(env: dict[str, str], *args: str, status: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "vaswani", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert "NOT-MAIN-WROTE" not in done.stderr, done.stderr
    return done


def train(env, data, task: str, out: Path, *extra: str, status: int = 0) -> subprocess.CompletedProcess[str]:
    return vaswani(env, "train", task, *data[task], "--out", str(out), *SMALL, *extra, status=status)


def weights(run: Path) -> dict:
    return load_file(str(run / "model.safetensors"))


def farthest(a: Path, b: Path) -> float:
    """The largest difference between the weights of two runs."""
    x, y = weights(a), weights(b)
    assert x.keys() == y.keys()
    return max(float((x[k] - y[k]).abs().max()) for k in x)


def rewound(run: Path, to: Path) -> Path:
    """A copy of ``run`` as it stood at its last checkpoint but one (before its last steps)."""
    shutil.copytree(run, to)
    shutil.rmtree(list_checkpoints(to)[-1])
    (to / "model.safetensors").unlink()
    return to


def processes(run: Path) -> int:
    return json.loads((run / "metrics.json").read_text(encoding="utf-8"))["processes"]


@pytest.mark.parametrize("accumulate", ["1", "2"])
@pytest.mark.parametrize("task", ["translation", "lm"])
def test_two_processes_train_the_weights_of_one(env, data, tmp_path, task, accumulate):
    steps = ["--max-steps", "4", "--accumulate", accumulate, "--log-every", "2"]
    train(env, data, task, tmp_path / "one", *steps)
    done = train(env, data, task, tmp_path / "two", *steps, "--nproc", "2")
    assert processes(tmp_path / "one") == 1 and processes(tmp_path / "two") == 2
    assert done.stdout.count("run directory:") == 1  # only the main process prints
    # Logged once, by the main process, with the loss of every process's rows: one process's log.
    one, two = log_rows(tmp_path / "one"), log_rows(tmp_path / "two")
    assert [(r["step"], r["kind"]) for r in two] == [("2", "train"), ("4", "train"), ("4", "eval")]
    assert [(r["step"], r["kind"]) for r in one] == [(r["step"], r["kind"]) for r in two]
    for a, b in zip(one, two, strict=True):
        for name in ("train_loss", "grad_norm", "valid_loss"):
            assert float(a[name] or 0) == pytest.approx(float(b[name] or 0), rel=1e-3), name
    assert 0 < farthest(tmp_path / "one", tmp_path / "two") <= TOLERANCE  # not the same process: not 0


def test_fsdp_trains_the_weights_of_one_and_resumes_on_two_and_on_one(env, data, tmp_path):
    train(env, data, "translation", tmp_path / "one", "--max-steps", "6")
    sharded = tmp_path / "sharded"
    train(
        env,
        data,
        "translation",
        sharded,
        "--max-steps",
        "4",
        "--nproc",
        "2",
        "--fsdp",
        "--checkpoint-every",
        "2",
    )
    assert processes(sharded) == 2
    again = rewound(sharded, tmp_path / "again")  # at step 2, resumed on 2 processes, sharded again
    vaswani(env, "train", "translation", "--resume", str(again), "--quiet", "--nproc", "2")
    assert (again / "model.safetensors").read_bytes() == (sharded / "model.safetensors").read_bytes()
    vaswani(env, "train", "translation", "--resume", str(sharded), "--max-steps", "6", "--quiet")
    assert processes(sharded) == 1
    assert farthest(tmp_path / "one", sharded) <= TOLERANCE


def test_a_one_process_checkpoint_resumes_on_two(env, data, tmp_path):
    one = tmp_path / "one"
    train(env, data, "lm", one, "--max-steps", "6", "--checkpoint-every", "3")
    grown = rewound(one, tmp_path / "grown")  # at step 3 (the cosine schedule ends at 6)
    vaswani(env, "train", "lm", "--resume", str(grown), "--quiet", "--nproc", "2")
    assert processes(grown) == 2
    assert 0 < farthest(one, grown) <= TOLERANCE


def test_killed_two_process_run_resumes_bit_identical_on_two_and_close_on_one(env, data, tmp_path):
    steps = ["--max-steps", "40", "--checkpoint-every", "5"]
    train(env, data, "lm", tmp_path / "whole", *steps, "--nproc", "2")
    run = tmp_path / "run"
    args = [sys.executable, "-m", "vaswani", "train", "lm", *data["lm"], "--out", str(run), *SMALL, *steps]
    proc = subprocess.Popen([*args, "--nproc", "2"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not [c for c in list_checkpoints(run) if (c / "manifest.json").exists()]:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both training processes
    proc.communicate(timeout=30)
    assert not (run / "model.safetensors").exists()
    once = tmp_path / "once"
    shutil.copytree(run, once)
    vaswani(env, "train", "lm", "--resume", str(run), "--quiet", "--nproc", "2")
    assert weights(run).keys() == weights(tmp_path / "whole").keys()
    assert farthest(run, tmp_path / "whole") == 0.0
    assert (run / "model.safetensors").read_bytes() == (tmp_path / "whole" / "model.safetensors").read_bytes()
    vaswani(env, "train", "lm", "--resume", str(once), "--quiet")
    assert 0 < farthest(once, tmp_path / "whole") <= TOLERANCE


def test_each_process_resumes_its_own_random_numbers(env, data, tmp_path):
    """With dropout each process draws its own masks, and a resumed 2-process run draws the same ones
    again: each process restores its own random-number states (with the main process's, the
    second process would draw other masks after the resume)."""
    run = tmp_path / "run"
    train(
        env,
        data,
        "lm",
        run,
        "--max-steps",
        "4",
        "--checkpoint-every",
        "2",
        "--dropout",
        "0.1",
        "--nproc",
        "2",
    )
    again = rewound(run, tmp_path / "again")
    vaswani(env, "train", "lm", "--resume", str(again), "--quiet", "--nproc", "2")
    assert (again / "model.safetensors").read_bytes() == (run / "model.safetensors").read_bytes()


def test_torchrun_trains_what_nproc_trains(env, data, tmp_path):
    train(env, data, "lm", tmp_path / "nproc", "--max-steps", "3", "--nproc", "2")
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "vaswani", "train", "lm", *data["lm"], "--out", str(tmp_path / "torchrun"), *SMALL,
         "--max-steps", "3"],
        env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert "NOT-MAIN-WROTE" not in launched.stderr
    assert processes(tmp_path / "torchrun") == 2
    nproc, torchrun = tmp_path / "nproc" / "model.safetensors", tmp_path / "torchrun" / "model.safetensors"
    assert nproc.read_bytes() == torchrun.read_bytes()


def test_bad_process_settings_get_one_line(env, data, tmp_path):
    for extra, words in (
        (["--nproc", "0"], "--nproc: must be in [1, "),
        (["--fsdp"], "--fsdp shards a model across processes"),
    ):
        done = train(env, data, "lm", tmp_path / "bad", "--max-steps", "2", *extra, status=2)
        assert words in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "bad" / "model.safetensors").exists()
