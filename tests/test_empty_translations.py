"""An empty translation (an undertrained model's) is shown to a person as ``(empty)``, with a
note on standard error once, while what a file or a pipe reads keeps one line per sentence, an
empty line for an empty translation."""

from __future__ import annotations

import io
import sys

import pytest

from tests.helpers import FIXTURES
from vaswani.cli import main
from vaswani.pipelines.translation import Translator
from vaswani.tasks.translation import EMPTY, UNDERTRAINED, EmptyTranslations


def test_an_empty_translation_is_displayed_as_such_with_one_note(capsys):
    shown = EmptyTranslations()
    assert [shown(t) for t in ["a b", "", "c", ""]] == ["a b", EMPTY, "c", EMPTY]
    assert capsys.readouterr().err == UNDERTRAINED + "\n"  # once, however many are empty


def test_for_a_file_or_a_pipe_an_empty_translation_stays_an_empty_line(capsys):
    shown = EmptyTranslations(display=False)
    assert [shown(t) for t in ["", "a"]] == ["", "a"]
    assert capsys.readouterr().err == UNDERTRAINED + "\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [False, True])
def test_translate_prints_empty_on_a_terminal_and_an_empty_line_into_a_pipe(monkeypatch, capsys, terminal):
    monkeypatch.setattr(Translator, "translate", lambda self, sentences, *a, **k: ["" for _ in sentences])
    if terminal:
        monkeypatch.setattr(sys, "stdout", _Terminal())
    assert main(["translate", str(FIXTURES / "translation"), "a b", "c d"]) == 0
    captured = capsys.readouterr()
    out = sys.stdout.getvalue() if terminal else captured.out
    assert out == (f"{EMPTY}\n{EMPTY}\n" if terminal else "\n\n")
    assert captured.err.count(UNDERTRAINED) == 1
