"""`course.py nbgrader`: the chapters as nbgrader source assignments, graded by the real nbgrader."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

from helpers import export, release
from helpers.exercises import all_exercises
from tests.export_support import exercises_only

ROOT = Path(__file__).resolve().parent.parent


def chapter_points(chapter: int) -> dict[str, int]:
    return {e.id: e.points for e in all_exercises().values() if e.chapter == chapter}


def test_every_check_cell_becomes_a_test_cell_worth_the_exercises_points():
    for solution in sorted(release.SOLUTIONS.glob("[0-9][0-9]_*.md")):
        notebook = export.nbgrader_source(solution)
        graded = {
            c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"]
            for c in notebook.cells
            if c.metadata.get("nbgrader", {}).get("grade")
        }
        assert graded == {f"check_{i}": p for i, p in chapter_points(int(solution.name[:2])).items()}, solution.name
        solutions = [c for c in notebook.cells if "# BEGIN SOLUTION" in c.source]
        assert solutions and all(
            c.metadata.nbgrader["solution"] and not c.metadata.nbgrader["locked"] for c in solutions
        )


@pytest.mark.skipif(
    shutil.which("nbgrader", path=os.path.dirname(sys.executable)) is None,
    reason="nbgrader is not installed (pip install -e .[test])",
)
def test_nbgrader_generates_and_autogrades_chapter_01(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
        "COURSE_PROGRESS_FILE": "",
    }

    def nbgrader(*args: str) -> None:
        done = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "nbgrader"), *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    export.main(["nbgrader", str(tmp_path), "--chapters", "01"])  # what `course.py nbgrader` runs
    name = "01_lookup_tables"
    source = tmp_path / "source" / name / f"{name}.ipynb"
    nbgrader("generate_assignment", name)
    released = tmp_path / "release" / name / f"{name}.ipynb"
    # What students get from nbgrader is the course's chapter, but for the graded check cells.
    chapter = jupytext.read(release.CHAPTERS / f"{name}.md")
    ungraded = lambda nb: [c.source.strip() for c in nb.cells if c.cell_type == "code" and "check(" not in c.source]
    assert ungraded(jupytext.read(released)) == ungraded(chapter)
    for student, notebook in (("solved", source), ("unfilled", released)):  # their graded cells, as nbgrader made them
        (tmp_path / "submitted" / student / name).mkdir(parents=True)
        nbformat.write(
            exercises_only(nbformat.read(notebook, as_version=4)),
            tmp_path / "submitted" / student / name / f"{name}.ipynb",
        )
    nbgrader("autograde", name)

    from nbgrader.api import Gradebook

    points = chapter_points(1)
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as book:
        for student, expected in (("solved", points), ("unfilled", dict.fromkeys(points, 0))):
            grades = book.find_submission_notebook(name, name, student).grades
            assert {g.name: g.score for g in grades} == {f"check_{i}": p for i, p in expected.items()}, student
            assert {g.name: g.max_score for g in grades} == {f"check_{i}": p for i, p in points.items()}
