"""The house's shape, read from the code: imports run one way, down the layers of
``docs/architecture.md``, and no source file grows past 400 lines of code (docstrings, comments
and blank lines not counted).

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
    ["aliases", "config", "io", "resources", "runtime", "schema"],
    ["data", "tokenizer", "metrics", "rundir", "recipes"],
    ["layers"],
    ["models"],
    ["generation", "training"],
    ["pipelines"],
    ["tasks"],
    ["interop", "inspect", "plots", "serve"],
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


def code_lines(source: str) -> int:
    """The lines of ``source`` that hold code: blank lines, comments and docstrings (of the module,
    its classes and functions) do not count."""
    tree = ast.parse(source)
    prose: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            if is_docstring and isinstance(first.value.value, str):
                prose.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(
        1
        for number, line in enumerate(source.splitlines(), start=1)
        if line.strip() and not line.strip().startswith("#") and number not in prose
    )


def test_code_lines_leave_out_prose():
    source = '"""Module.\n\nMore."""\n\n# a comment\ndef f():\n    """Doc."""\n    return 1\n'
    assert code_lines(source) == 2


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_source_files_stay_small(path):
    lines = code_lines(path.read_text(encoding="utf-8"))
    assert lines <= MAX_LINES, f"{path.relative_to(SRC)} has {lines} lines of code; split it by concept"


def test_fmt_skip_only_on_tables():
    """``# fmt: skip`` keeps the formatter off a table's hand-aligned rows, and nothing else: a
    statement packed onto few lines to stay under the size limit is formatted like the rest."""
    packed = []
    for path in sorted(SRC.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.stmt) or node.end_lineno is None:
                continue
            if not lines[node.end_lineno - 1].rstrip().endswith("# fmt: skip"):
                continue
            value = getattr(node, "value", None)
            if not isinstance(value, ast.Dict | ast.Tuple | ast.List | ast.Set | ast.DictComp):
                packed.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not packed, "# fmt: skip on statements that are not tables: " + ", ".join(packed)
