"""`python3 course.py gpu` (tests/gpu/run_on_gpu.py): what it can be tested for without a GPU."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
from run_on_gpu import notebook_failed, run_notebook, transcript  # noqa: E402


def test_a_training_chapter_that_trained_on_the_cpu_fails_the_gpu_run():
    assert notebook_failed("", ["15 models trained on cpu in 17 s"], "cuda")
    assert notebook_failed("CellExecutionError: boom", [], "cuda")
    assert notebook_failed("", ["15 copies fine-tuned on 128 tokens, on cpu, in 2 s"], "cuda")
    assert not notebook_failed("", ["15 models trained on cuda in 8 s", "device: cuda"], "cuda")
    # a sentence about a model's training length names no device
    assert not notebook_failed("", ["Llama-2-7B (base 10,000, trained on L = 4096): 18 of 64 pairs"], "cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the command runs for real there")
def test_without_a_gpu_it_says_so_and_runs_nothing():
    done = subprocess.run(
        [sys.executable, "tests/gpu/run_on_gpu.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "COURSE_DEVICE": "cuda",
        },  # an override is ignored: the command tests the real device
    )
    assert done.returncode == 2 and "No GPU: check_device() answered cpu" in done.stdout, done.stdout + done.stderr


def test_the_transcript_keeps_what_each_cell_printed_and_leaves_pictures_out():
    cells = [
        {"cell_type": "markdown", "source": "# A title"},
        {"cell_type": "code", "source": "x = 1", "outputs": []},
        {
            "cell_type": "code",
            "source": "if gpu:\n    print(table)",
            "outputs": [
                {"output_type": "stream", "name": "stdout", "text": "plain RoPE  9.1  40.2\n"},
                {"output_type": "display_data", "data": {"image/png": "iVBORw0", "text/plain": "<Figure>"}},
            ],
        },
    ]
    text = transcript("07_long_context.ipynb", cells)
    assert text.startswith("## 07_long_context.ipynb")
    assert "### `if gpu:`\n```\nplain RoPE  9.1  40.2\n<Figure>\n```" in text
    assert "x = 1" not in text and "iVBORw0" not in text and "A title" not in text


def test_a_failing_cell_is_reported_and_the_cells_after_it_still_run(tmp_path):
    """One run on a lent machine must show every failure: nbclient goes on past a cell that raised."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code) for code in ("1 / 0", "raise KeyError('x')", "print('after')")]
    nbformat.write(notebook, tmp_path / "99_errors.ipynb")
    _, error, _, text = run_notebook(tmp_path / "99_errors.ipynb", timeout=60)
    assert error == "2 cells raised; the first, `1 / 0`: ZeroDivisionError: division by zero", error
    assert "### `print('after')`\n```\nafter\n```" in text
    assert "ZeroDivisionError: division by zero\n```" in text and "\x1b[" not in text  # the traceback's end, plain
