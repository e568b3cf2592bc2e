"""Importing the core loads the core: ``import vaswani.layers`` and ``import vaswani.models`` load
neither the tasks' libraries (sacrebleu, tqdm, matplotlib) nor the grammar, and the package's
public names still import on first use."""

from __future__ import annotations

import json
import subprocess
import sys

import vaswani

HEAVY = ("sacrebleu", "tqdm", "matplotlib", "vaswani.data.grammar")

# torch imports tqdm itself (torch.hub) where it is installed: it is dropped from sys.modules
# after torch is loaded, so that an import of it by vaswani shows.
PROGRAM = f"""
import json, sys
import torch
for name in [m for m in sys.modules if m == "tqdm" or m.startswith("tqdm.")]:
    del sys.modules[name]
import vaswani.layers, vaswani.models
loaded = sorted(m for m in {HEAVY!r} if m in sys.modules)
from vaswani import Translator
print(json.dumps({{"loaded": loaded, "translator": Translator.__module__}}))
"""


def test_the_core_imports_without_the_tasks_libraries():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["loaded"] == []
    assert found["translator"] == "vaswani.pipelines.translation"


def test_every_public_name_comes_from_its_module():
    for name in vaswani.__all__:
        value = getattr(vaswani, name)
        assert value.__module__ == vaswani.HOMES[name], name
        assert name in dir(vaswani)
