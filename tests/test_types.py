"""The type checker over all of helpers/: strict on the grading package and on the seam into student code
(helpers.calls), typed elsewhere; the records of the protocol (helpers.grading.wire) and of the results
(helpers.grading.records) are checked where they are made and read. Its settings, and the files it reads,
are pyproject.toml's [tool.mypy]; torch and the other large libraries are not analysed, so a run takes
seconds."""

from __future__ import annotations

import subprocess
import sys

import tomllib

from tests.grading_support import ROOT


def test_mypy_reads_all_of_helpers():
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert settings["files"] == ["helpers"]
    # `strict` in an override would reach every module: the strict modules get its flags one by one
    assert all("strict" not in override for override in settings["overrides"])


def test_mypy_finds_no_error():
    said = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert said.returncode == 0, said.stdout + said.stderr
