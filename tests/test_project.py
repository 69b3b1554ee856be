"""The project's own consistency: single source, pairs, environments, lint."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from helpers import release

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.md"))


def requirement_name(line: str) -> str:
    return re.split(r"[<>=!~ ;\[]", line.strip(), maxsplit=1)[0].lower()


def test_environment_yml_has_the_same_packages_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {requirement_name(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]}
    conda = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_lines = next(d["pip"] for d in conda["dependencies"] if isinstance(d, dict))
    pip_lines = [line for line in pip_lines if not line.startswith("-")]  # options and `-e .`
    listed = {requirement_name(line) for line in pip_lines}
    assert listed == wanted
    pinned = {requirement_name(r): r for r in pip_lines}
    assert pinned["torch"] == "torch==2.13.0", "environment.yml must pin the same torch as course.py"
    library = next(r for r in project["dependencies"] if requirement_name(r) == "transformers")
    assert pinned["transformers"] == library, "environment.yml must pin the transformers range pyproject.toml does"
    assert ">=" in library and "<" in library.replace("<=", ""), (
        "a tested range, lower bound and upper bound, not one version"
    )


def test_course_py_pins_the_cpu_torch():
    assert 'TORCH = "torch==2.13.0"' in (ROOT / "course.py").read_text()


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[s.stem for s in SOLUTIONS])
def test_chapter_is_what_the_release_makes_of_its_solution(solution):
    assert release.stale(solution) == []


@pytest.mark.parametrize("folder", ["chapters", "solutions"])
def test_every_notebook_is_a_pair(folder):
    markdown = {p.stem for p in (ROOT / folder).glob("*.md")}
    notebooks = {p.stem for p in (ROOT / folder).glob("*.ipynb")}
    assert markdown == notebooks and markdown == {s.stem for s in SOLUTIONS}


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[s.stem for s in SOLUTIONS])
def test_every_check_cell_matches_an_exercise(solution):
    from helpers.exercises import all_exercises

    checked = re.findall(r'check\("(\w+)"', solution.read_text())
    assert checked and set(checked) <= set(all_exercises())


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[s.stem for s in SOLUTIONS])
def test_each_exercise_shows_its_registry_line_once(solution):
    """Difficulty, importance, time and points come from the registry: the chapter shows them as they are."""
    from helpers.exercises import all_exercises

    text = solution.read_text()
    for exercise_id in dict.fromkeys(re.findall(r'check\("(\w+)"', text)):
        badge = all_exercises()[exercise_id].badge
        assert text.count(badge) == 1, f"{solution.name} should show, once, above {exercise_id}:\n{badge}"


def test_every_exercise_is_checked_in_some_chapter():
    from helpers.exercises import all_exercises

    checked = {i for s in SOLUTIONS for i in re.findall(r'check\("(\w+)"', s.read_text())}
    assert set(all_exercises()) <= checked


def test_student_chapters_hold_no_solution_code():
    for chapter in (ROOT / "chapters").glob("*.md"):
        assert "BEGIN SOLUTION" not in chapter.read_text()


def test_unfilled_chapters_have_no_outputs():
    import nbformat

    for notebook in (ROOT / "chapters").glob("*.ipynb"):
        cells = nbformat.read(notebook, as_version=4).cells
        assert not any(c.get("outputs") for c in cells if c.cell_type == "code"), notebook.name


def test_ruff_is_clean():
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."],  # the notebooks too (pyproject's extend-include)
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout
    style = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "helpers", "tests", "course.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert style.returncode == 0, style.stdout


def test_readme_gives_the_two_commands_first():
    commands = re.findall(r"^\s*(python3 course\.py \w+)", (ROOT / "README.md").read_text(), re.MULTILINE)
    assert commands[:2] == ["python3 course.py lab", "python3 course.py test"]
    assert "python3 course.py test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("root, display", [(True, ""), (False, ":0")])
def test_course_py_lab_opens_chapter_01_as_root_and_headless(monkeypatch, root, display):
    """`python3 course.py lab` must start where students (and containers, which run as root) are."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    started = []
    monkeypatch.setattr(course, "run", lambda *cmd, **kwargs: started.append([str(c) for c in cmd]) or 0)
    monkeypatch.setattr(course.os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.setenv("DISPLAY", display)
    assert course.lab() == 0
    (command,) = started
    assert command[1:4] == ["-m", "jupyter", "lab"] and "chapters/01_lookup_tables.ipynb" in command
    assert ("--allow-root" in command) == root  # Jupyter refuses root without it
    assert ("--no-browser" in command) == (not display and sys.platform.startswith("linux"))  # headless: print the URL


@pytest.mark.parametrize("master", [m for m in SOLUTIONS if "def train(" in m.read_text()], ids=lambda m: m.name)
def test_a_chapter_that_trains_does_so_on_the_checks_device(master):
    """Its device is check_device() (CUDA when there is one, COURSE_DEVICE overrides), said as it is, never as a
    fixed string. That its model makes no tensor on the CPU is run on the meta device: chapters 02 and 06 in a
    cell of their own (nbval runs it), chapter 07 in tests/test_long_context.py (its model and data cells)."""
    source = master.read_text()
    assert "check_device()" in source, "train on check_device(), as the checks do"
    assert not re.search(r"on the CPU in \{", source), "say the device it trained on, not a fixed string"
    if "07_" not in master.name:
        assert re.search(r'\.to\("meta"\)\(.*device="meta"', source), "run the model once on the meta device"
