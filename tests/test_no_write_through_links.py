"""No write of vaswani follows a symbolic link or leaves the run (issue 34): for every file a real
tiny run holds, a link planted at its name, to a sentinel outside the run (the file moved out),
leaves the sentinel byte for byte as it was, whether the command (a resume, ``vaswani average``)
refuses in one line naming the link or succeeds without following it; pruning leaves a stray file and links in
``checkpoints/`` alone while training goes on; and a pipe (``<(…)``, ``/dev/fd/N``) is read as a
file is."""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import tiny_args, tiny_lm_args, write_lm_text, write_reverse_task
from vaswani.cli import main
from vaswani.data.readers import read_lines
from vaswani.errors import DataError, RunDirError, VaswaniError
from vaswani.io import absolute_path, append_text, atomic_write, write_file
from vaswani.training.checkpoint import list_checkpoints

SENTINEL = b"outside the run: never written\n"
EXTRA_NAMES = (".lock", "model.before-average.safetensors", "hypotheses.test")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny lm run and a tiny translation run, each with a few checkpoints."""
    folder = tmp_path_factory.mktemp("link_runs")
    lm = folder / "lm"
    args = tiny_lm_args(write_lm_text(folder / "lm.txt", lines=60), lm, "--checkpoint-every", "2")
    args[args.index("--max-steps") + 1] = "4"
    assert main(args) == 0
    src, tgt = write_reverse_task(folder, n=60)
    tr = folder / "translation"
    assert main(tiny_args(src, tgt, tr, "--max-steps", "4", "--checkpoint-every", "2")) == 0
    return {"lm": lm, "translation": tr}


def commands(kind: str, run: Path) -> list[list[str]]:
    """The commands that write into ``run``: a resume for two more steps, and ``average``."""
    return [
        ["train", kind, "--resume", str(run), "--max-steps", "6", "--quiet"],
        ["average", str(run), "--last", "1"],
    ]


def plant(link: Path, outside: Path) -> None:
    """A link at ``link`` to a sentinel in ``outside``: what was there, moved out (so that reading
    through the link works and the command goes on to write), else a file of :data:`SENTINEL`."""
    sentinel = outside / "sentinel"
    if os.path.lexists(link):
        shutil.move(link, sentinel)
    else:
        sentinel.write_bytes(SENTINEL)
    link.symlink_to(sentinel, target_is_directory=sentinel.is_dir())


def outside_files(outside: Path) -> dict[str, bytes]:
    return {str(p.relative_to(outside)): p.read_bytes() for p in sorted(outside.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["lm", "translation"])
def test_a_link_planted_at_any_file_of_a_run_is_never_followed(runs, kind, tmp_path, capsys):
    run = runs[kind]
    names = sorted({p.name for p in run.iterdir()} | set(EXTRA_NAMES))
    assert {"config.json", "model.safetensors", "train_log.csv", "checkpoints", "metrics.json"} <= set(names)
    for name in names:
        for argv_of in range(2):
            case = tmp_path / f"{name}-{argv_of}"
            copy, outside = case / "run", case / "outside"
            outside.mkdir(parents=True)
            shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".lock"))  # links are copied as files
            plant(copy / name, outside)
            before = outside_files(outside)
            capsys.readouterr()
            status = main(commands(kind, copy)[argv_of])
            err = capsys.readouterr().err
            assert outside_files(outside) == before, (name, argv_of)
            if status == 2:
                lines = err.strip().splitlines()
                assert len(lines) == 1 and str(copy / name) in lines[0] and "symbolic link" in lines[0], err
            else:
                assert status == 0 and (copy / name).is_symlink(), (name, argv_of, err)


def test_a_run_folder_that_is_a_link_is_refused(runs, tmp_path, capsys):
    shutil.copytree(runs["lm"], tmp_path / "real", ignore=shutil.ignore_patterns(".lock"))
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "real").rglob("*")}
    for argv in commands("lm", tmp_path / "link"):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith(f"vaswani: error: {tmp_path / 'link'}: a symbolic link") and err.count("\n") == 1
        )
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "real").rglob("*")} == before


def test_pruning_in_real_training_leaves_a_stray_file_and_links_and_goes_on(runs, tmp_path, capsys):
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(runs["lm"], run, ignore=shutil.ignore_patterns(".lock"))
    outside.mkdir()
    (outside / "keep.txt").write_bytes(SENTINEL)
    checkpoints = run / "checkpoints"
    (checkpoints / "notes.txt").write_text("mine")
    (checkpoints / "step_00000000").symlink_to(outside, target_is_directory=True)
    (checkpoints / ".tmp_step_00000005").symlink_to(outside, target_is_directory=True)
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002", "step_00000004"]
    assert (
        main(["train", "lm", "--resume", str(run), "--max-steps", "12", "--quiet"]) == 0
    )  # one every 2 steps
    assert [p.name for p in list_checkpoints(run)] == ["step_00000008", "step_00000010", "step_00000012"]
    assert outside_files(outside) == {"keep.txt": SENTINEL}
    assert (checkpoints / "notes.txt").read_text() == "mine" and (checkpoints / "step_00000000").is_symlink()
    err = capsys.readouterr().err
    assert "unlinked" in err
    for name, kind in (("notes.txt", "not a checkpoint"), ("step_00000000", "a link")):  # once each
        assert err.count(f"{checkpoints / name}: {kind}; pruning leaves it alone") == 1, err


@pytest.mark.parametrize(
    "write",
    [
        lambda path: write_file(path, b"new"),
        lambda path: atomic_write(path, b"new"),
        lambda path: append_text(path, "new"),
    ],
    ids=["write_file", "atomic_write", "append_text"],
)
def test_every_writer_refuses_a_link_in_one_line_and_leaves_its_target(write, tmp_path):
    (tmp_path / "target").write_bytes(SENTINEL)
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(RunDirError) as info:
        write(tmp_path / "link")
    link = tmp_path / "link"
    assert (
        str(info.value)
        == f"{link}: a symbolic link; vaswani writes no file of a run through a link (remove it)"
    )
    assert (tmp_path / "target").read_bytes() == SENTINEL and link.is_symlink()


def test_a_fifo_where_a_file_is_written_is_refused_not_waited_on(tmp_path):
    """A FIFO without a reader (opening it to write would block): write_file's ``OSError`` (for its
    callers' one line), append_text's one line."""
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="No such device or address"):
        write_file(tmp_path / "fifo", b"new")
    with pytest.raises(VaswaniError, match=r"fifo: cannot write: no such device or address"):
        append_text(tmp_path / "fifo", "new")


def test_atomic_write_never_replaces_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    for name in ("fifo", "folder"):
        with pytest.raises(RunDirError, match=f"{name}: not a regular file"):
            atomic_write(tmp_path / name, b"new")
    assert (tmp_path / "fifo").is_fifo() and (tmp_path / "folder").is_dir()


def test_atomic_write_unlinks_a_link_at_its_temporary_name_without_following_it(tmp_path):
    (tmp_path / "target").write_bytes(SENTINEL)
    (tmp_path / ".a.txt.tmp").symlink_to(tmp_path / "target")
    atomic_write(tmp_path / "a.txt", b"new")
    assert (tmp_path / "a.txt").read_bytes() == b"new" and (tmp_path / "target").read_bytes() == SENTINEL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "target"]


def test_append_text_appends(tmp_path):
    append_text(tmp_path / "log.csv", "a\n")
    append_text(tmp_path / "log.csv", "b\n")
    assert (tmp_path / "log.csv").read_text() == "a\nb\n"


def test_a_pipe_given_as_dev_fd_is_read_once_and_not_resolved():
    read, write = os.pipe()
    path = f"/dev/fd/{read}"
    text = "".join(f"line {i}\n" for i in range(20_000))  # more than a pipe's buffer
    writer = threading.Thread(target=lambda: (os.write(write, text.encode()), os.close(write)))
    writer.start()
    try:
        assert absolute_path(path) == path
        assert read_lines(path) == text.splitlines()
    finally:
        writer.join()
        os.close(read)


def unread(fd: int) -> int:
    """Bytes written to the pipe ``fd`` and not read yet."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, bytes(4)))[0]


def test_a_named_fifo_with_a_writer_is_read_and_one_without_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="without a writer"):
        read_lines(fifo)
    fd = os.open(fifo, os.O_RDWR)  # a writer (on Linux, opening a FIFO for both never blocks)
    os.write(fd, b"a b\nc d\n")
    found: dict[str, list[str]] = {}
    reader = threading.Thread(target=lambda: found.update(lines=read_lines(fifo)))
    reader.start()
    while unread(fd):  # until the reader has the text; then end it
        time.sleep(0.01)
    os.close(fd)
    reader.join(timeout=30)
    assert found == {"lines": ["a b", "c d"]}


def test_process_substitution_reads_like_a_file(runs, tmp_path):
    """``--src <(cat …)`` in a real shell: the /dev/fd path is read, never resolved to pipe:[N]."""
    data = runs["translation"].parent
    out = tmp_path / "hyp.txt"
    script = (
        f"{sys.executable} -m vaswani evaluate {runs['translation']} --src <(cat {data / 'train.src'}) "
        f"--ref <(cat {data / 'train.tgt'}) --out {out}"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == len((data / "train.src").read_text().splitlines())
