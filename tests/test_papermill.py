"""papermill, as instructors run it: a chapter executes to completion, and the parameters it
declares (its `parameters` cell: the training's seeds and steps) take effect. nbconvert --execute
is what nbgrader autograde runs: tests/test_export_nbgrader.py."""

from __future__ import annotations

import ast

import nbformat
import pytest

from helpers import release

papermill = pytest.importorskip("papermill")

NOTEBOOKS = sorted([*release.CHAPTERS.glob("[0-9][0-9]_*.ipynb"), *release.SOLUTIONS.glob("[0-9][0-9]_*.ipynb")])


def assigned(source: str) -> set[str]:
    """The names a cell binds at its top level (what would overwrite an injected parameter)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_a_parameter_injected_by_papermill_is_never_set_again(path):
    """papermill injects its values just after the cell tagged `parameters`: a later cell that sets the
    same name again would silently undo `papermill -p`."""
    code = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    tagged = [i for i, cell in enumerate(code) if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) <= 1, "papermill reads only the first parameters cell"
    if not tagged:
        return
    parameters = assigned(code[tagged[0]].source)
    assert parameters, "a parameters cell that sets nothing"
    for cell in code[tagged[0] + 1 :]:
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        assert not parameters & assigned(source), f"set again after the parameters cell: {cell.source[:200]}"


def test_chapters_with_training_declare_their_seeds_and_steps():
    for stem in ("06_comparing", "07_long_context"):
        for folder in (release.CHAPTERS, release.SOLUTIONS):
            cells = nbformat.read(folder / f"{stem}.ipynb", as_version=4).cells
            tagged = [cell for cell in cells if "parameters" in cell.metadata.get("tags", [])]
            assert tagged and {"SEEDS", "STEPS"} <= assigned(tagged[0].source), f"{folder.name}/{stem}"


def test_papermill_runs_chapter_06_with_its_parameters(tmp_path, monkeypatch):
    """The unfilled chapter 06 runs to the end (its exercises fall back to the reference), with one seed and three
    steps instead of three seeds and 120 steps. (Chapter 07 declares the same names, checked above; the browser
    suite runs it unfilled to the end with fewer seeds and steps too.)"""
    monkeypatch.setenv("PYTHONPATH", str(release.ROOT))  # the kernel imports this checkout's helpers
    monkeypatch.setenv("COURSE_PROGRESS_FILE", "")
    out = tmp_path / "06.ipynb"
    papermill.execute_notebook(
        str(release.CHAPTERS / "06_comparing.ipynb"),
        str(out),
        parameters={"SEEDS": [4], "STEPS": 3},
        cwd=str(tmp_path),
        kernel_name="python3",
        progress_bar=False,
        execution_timeout=120,
    )
    notebook = nbformat.read(out, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), "a cell did not run"
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    printed = "".join(o.get("text", "") for cell in code for o in cell.outputs if o.output_type == "stream")
    assert "6 models trained on" in printed, printed[:2000]  # six methods, one seed
