"""Every file one layer: no import in `helpers` runs in a circle, and no module grows past a size
a maintainer reads in one sitting.

The graph is read from the source with `ast`, every import counted (a function's lazy one too), and
every module of `helpers.exercises` is folded into that package: the catalogue imports its chapter
modules by discovery (importlib), which a graph of plain import statements would not see.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "helpers"
MAX_LINES = 900  # every module, chapter modules included: a chapter's mistake catalogue lives beside it when it grows


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def fold(name: str) -> str:
    """helpers.exercises.ch05_rope -> helpers.exercises: the catalogue and its chapters are one node."""
    return "helpers.exercises" if name.startswith("helpers.exercises.") else name


def imports(path: Path, modules: set[str]) -> set[str]:
    """The helpers modules `path` imports, wherever the import statement stands."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import
                base = ".".join([package.rsplit(".", node.level - 1)[0], *([base] if base else [])])
            # `from helpers import checking` imports the module helpers.checking; `from helpers.x import f`, helpers.x
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names}
    return {name for name in found if name in modules}


def graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges.setdefault(fold(name), set()).update(fold(target) for target in imports(path, set(paths)))
    return {
        name: targets - {name, "helpers"} for name, targets in edges.items()
    }  # importing a submodule runs helpers/__init__ first anyway


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the list of its modules, or None."""
    state: dict[str, str] = {}  # name -> "open" while on the path, "done" after

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = "open"
        for target in sorted(edges.get(name, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target, [*path, target])):
                return found
        state[name] = "done"
        return None

    for name in sorted(edges):
        if name not in state and (found := visit(name, [name])):
            return found
    return None


def test_no_import_cycle_in_helpers():
    assert cycle(graph()) is None, " -> ".join(cycle(graph()) or [])


def test_the_cycle_finder_finds_one():
    """The test above can fail: the old checking <-> exercises loop is found."""
    edges = graph()
    assert cycle(edges) is None
    edges["helpers.probe"] = edges["helpers.probe"] | {"helpers.checking"}
    assert cycle(edges) is not None
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_framework_is_layered():
    """safety below calls below probe below the catalogue below checking: no import runs up."""
    edges = graph()
    assert "helpers.checking" not in edges["helpers.exercises"]
    assert edges["helpers.safety"] <= {"helpers.registry", "helpers.reference"}
    assert edges["helpers.calls"] <= {"helpers.registry", "helpers.safety"}
    assert edges["helpers.probe"] <= {"helpers.registry", "helpers.safety", "helpers.calls"}
    assert "helpers.exercises" in edges["helpers.checking"]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda path: str(path.relative_to(PACKAGE.parent)))
def test_no_module_over_900_lines(path: Path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines"


def test_the_catalogue_finds_its_chapters_by_file_name():
    from helpers import exercises

    files = sorted(path.stem for path in (PACKAGE / "exercises").glob("ch*.py"))
    assert exercises.chapter_modules() == files
    assert [int(name[2:4]) for name in files] == sorted({e.chapter for e in exercises.all_exercises().values()})


def test_an_exercise_in_the_wrong_chapter_module_is_refused(monkeypatch):
    import dataclasses

    from helpers import exercises
    from helpers.exercises import ch01_lookup_tables

    moved = dataclasses.replace(ch01_lookup_tables.EXERCISES[0], chapter=2)
    monkeypatch.setattr(ch01_lookup_tables, "EXERCISES", [moved, *ch01_lookup_tables.EXERCISES[1:]])
    exercises._catalogue.cache_clear()
    try:
        with pytest.raises(ValueError, match="says chapter 2, but lives in ch01_lookup_tables"):
            exercises.all_exercises()
    finally:
        monkeypatch.undo()
        exercises._catalogue.cache_clear()
    assert exercises.get(moved.id).chapter == 1


def test_advice_is_resolved_in_one_order():
    """The mistake's docstring, then exercise.advice, then GENERIC_ADVICE, each of hint and fix on its own
    (a failure's own hint and fix come before all three: check() keeps them)."""
    import dataclasses

    from helpers.exercises import get
    from helpers.probe import advice
    from helpers.registry import GENERIC_ADVICE

    rope_cache = get("rope_cache")
    assert "wrong_exponent" in rope_cache.mistakes and "wrong_shape" not in rope_cache.mistakes
    assert advice(rope_cache, "wrong_shape")[1:] == rope_cache.advice["wrong_shape"] != GENERIC_ADVICE["wrong_shape"]
    assert advice(dataclasses.replace(rope_cache, advice={}), "wrong_shape")[1:] == GENERIC_ADVICE["wrong_shape"]
    told = dataclasses.replace(rope_cache, advice={"wrong_exponent": ("the exercise's hint", "the exercise's fix")})
    _, hint, fix = advice(told, "wrong_exponent")
    assert hint.startswith("Check the two ends by hand") and fix.startswith("`theta = base **")  # the docstring's
    hint_only = dataclasses.replace(told, mistakes={"wrong_exponent": lambda: None})
    hint_only.mistakes["wrong_exponent"].__doc__ = "Wrong exponent.\n\nHint: the docstring's hint."
    assert advice(hint_only, "wrong_exponent") == ("Wrong exponent.", "The docstring's hint.", "The exercise's fix")
