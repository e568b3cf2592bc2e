"""The house's shape, read from the code: imports run one way, down the layers of
``docs/architecture.md``, and no source file grows past 400 lines.

Every ``import vaswani…`` of every module counts, the ones inside functions too (the command line
imports lazily): a lazy import that runs against the layers is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "vaswani"

# Bottom to top; a unit may import units of its own layer or below, never above (docs/architecture.md).
LAYERS = [
    ["errors"],
    ["aliases", "config", "io", "runtime", "schema"],
    ["data", "tokenizer", "metrics", "rundir", "recipes"],
    ["layers"],
    ["models"],
    ["generation", "training"],
    ["tasks"],
    ["interop", "plots", "serve"],
    ["cli", "__main__"],
]
LAYER_OF = {unit: i for i, units in enumerate(LAYERS) for unit in units}
MAX_LINES = 400


def unit_of(module: str) -> str:
    """``vaswani.tasks.lm`` → ``tasks``; ``vaswani.io`` → ``io``."""
    return module.split(".")[1]


def module_of(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported vaswani module, line) of every import in src/vaswani."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module = module_of(path)
        if module == "vaswani":  # the package's lazy table of public names
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                if node.module == "vaswani":
                    names = [f"vaswani.{alias.name}" for alias in node.names]
            else:
                continue
            found += [(module, name, node.lineno) for name in names if name.startswith("vaswani.")]
    return found


def test_every_unit_has_a_layer():
    units = {unit_of(module_of(p)) for p in SRC.rglob("*.py") if module_of(p) != "vaswani"}
    assert units <= set(LAYER_OF), (
        f"give these a layer in LAYERS and docs/architecture.md: {units - set(LAYER_OF)}"
    )


def test_imports_run_down_the_layers():
    upward = [
        f"{module}:{line} imports {target} ({unit_of(module)} is below {unit_of(target)})"
        for module, target, line in imports()
        if LAYER_OF[unit_of(target)] > LAYER_OF[unit_of(module)]
    ]
    assert not upward, "\n".join(upward)


def test_no_cycle_between_units():
    """Units of one layer may use each other, but not both ways round (no cycle at any length)."""
    edges: dict[str, set[str]] = {}
    for module, target, _ in imports():
        if unit_of(module) != unit_of(target):
            edges.setdefault(unit_of(module), set()).add(unit_of(target))
    done: set[str] = set()

    def visit(unit: str, path: list[str]) -> None:
        if unit in path:
            raise AssertionError("cycle: " + " -> ".join([*path[path.index(unit) :], unit]))
        if unit not in done:
            for nxt in sorted(edges.get(unit, ())):
                visit(nxt, [*path, unit])
            done.add(unit)

    for unit in sorted(edges):
        visit(unit, [])


def test_the_layer_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The check itself can fail: a layer module importing the task registry is reported."""
    fake = tmp_path / "vaswani"
    (fake / "layers").mkdir(parents=True)
    (fake / "layers" / "bad.py").write_text("def f():\n    from vaswani.tasks import registry\n")
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    (offender,) = imports()
    assert offender == ("vaswani.layers.bad", "vaswani.tasks", 2)
    with pytest.raises(AssertionError, match="layers is below tasks"):
        test_imports_run_down_the_layers()


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_source_files_stay_small(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(SRC)} has {lines} lines; split it by concept"
