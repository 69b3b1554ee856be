"""papermill, as instructors run it, executes a chapter to completion (nbconvert --execute
is what nbgrader autograde runs: tests/test_export_nbgrader.py)."""

from __future__ import annotations

import nbformat
import pytest

from helpers import release

papermill = pytest.importorskip("papermill")


def test_papermill_executes_chapter_01(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(release.ROOT))  # the kernel imports this checkout's helpers
    out = tmp_path / "01.ipynb"
    papermill.execute_notebook(
        str(release.CHAPTERS / "01_lookup_tables.ipynb"),
        str(out),
        cwd=str(tmp_path),
        kernel_name="python3",
        progress_bar=False,
        execution_timeout=120,
    )
    notebook = nbformat.read(out, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), "a cell did not run"
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
