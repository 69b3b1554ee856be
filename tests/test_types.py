"""The type checker over the grading package (strict) and the checker framework: the records of the
protocol (helpers.grading.wire) are checked where they are made and read. Its settings, and the
files it reads, are pyproject.toml's [tool.mypy]; torch and the other large libraries are not
analysed, so a run takes seconds."""

from __future__ import annotations

import subprocess
import sys

from tests.grading_support import ROOT


def test_mypy_finds_no_error():
    said = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert said.returncode == 0, said.stdout + said.stderr
