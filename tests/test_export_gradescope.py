"""`course.py gradescope`: an autograder zip whose run_autograder writes Gradescope's results.json.

Run against a simulated /autograder tree (AUTOGRADER_ROOT), one per submission as
Gradescope does, with the course's python instead of the one setup.sh installs.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile

import nbformat

from helpers import export, release
from helpers.exercises import all_exercises
from tests.export_support import exercises_only

POINTS = {e.id: e.points for e in all_exercises().values() if e.chapter == 1}


def autograde(tmp_path, archive, name: str, notebook) -> dict:
    """Unpack the zip as Gradescope does, put `notebook` in the submission, run run_autograder."""
    root = tmp_path / name
    with zipfile.ZipFile(archive) as unpacked:
        unpacked.extractall(root / "source")
        for info in unpacked.infolist():  # zipfile drops the permissions; Gradescope's unzip keeps them
            os.chmod(root / "source" / info.filename, info.external_attr >> 16 & 0o777)
    (root / "submission").mkdir()
    nbformat.write(notebook, root / "submission" / "01_lookup_tables.ipynb")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "COURSE_PYTHON": sys.executable, "COURSE_PROGRESS_FILE": ""}
    done = subprocess.run(
        [str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_gradescope_autograder_scores_a_solution_and_a_broken_notebook(tmp_path):
    archive = export.build_gradescope_zip(tmp_path / "autograder.zip", ["01"])
    with zipfile.ZipFile(archive) as listing:
        names = set(listing.namelist())
        assert {
            "setup.sh",
            "run_autograder",
            "requirements.txt",
            "course/helpers/grade.py",
            "course/helpers/exercises/ch01_lookup_tables.py",
        } <= names
        assert all(
            listing.getinfo(script).external_attr >> 16 & stat.S_IXUSR for script in ("setup.sh", "run_autograder")
        )
        assert "torch==2.13.0\n" in listing.read("requirements.txt").decode()

    solved_chapter = nbformat.read(release.SOLUTIONS / "01_lookup_tables.ipynb", as_version=4)
    solved = autograde(tmp_path, archive, "solved", exercises_only(solved_chapter))
    broken = exercises_only(nbformat.read(release.CHAPTERS / "01_lookup_tables.ipynb", as_version=4))  # unfilled
    broken.cells.insert(
        1, nbformat.v4.new_code_cell('raise RuntimeError("I broke this cell")')
    )  # and a cell that raises
    failed = autograde(tmp_path, archive, "broken", broken)

    for results in (solved, failed):  # Gradescope's schema, one test per exercise of chapter 01
        assert results["visibility"] == "visible" and isinstance(results["output"], str)
        assert [t["name"] for t in results["tests"]] == list(POINTS)
        for test in results["tests"]:
            assert (
                set(test) >= {"name", "score", "max_score", "output", "visibility"}
                and test["max_score"] == POINTS[test["name"]]
            )
    assert solved["score"] == sum(POINTS.values()) and all(t["score"] == t["max_score"] for t in solved["tests"])
    assert failed["score"] == 0 and all(t["score"] == 0 and "not_implemented" in t["output"] for t in failed["tests"])
    assert "I broke this cell" in failed["output"]


def test_an_empty_submission_gets_a_message_not_a_crash(tmp_path):
    (tmp_path / "submission").mkdir()
    results = export.run_autograder(tmp_path, ["01"])
    assert results["score"] == 0 and "No notebook" in results["output"]
    assert json.loads((tmp_path / "results" / "results.json").read_text()) == results
