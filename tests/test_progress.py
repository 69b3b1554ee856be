"""Staged feedback and a student's progress: the panel's three levels, hint(),
progress(), and the progress file under corruption and concurrent kernels."""

import json
import subprocess
import sys
import textwrap

import pytest

from helpers import check, hint, progress, tracking


def transposed(weight, ids):
    return weight.T[ids]


def stub(weight, ids):
    raise NotImplementedError("your code here")


@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(path))
    monkeypatch.setattr(tracking, "_latest", {})
    monkeypatch.setattr(tracking, "_said", set())
    return path


def test_a_failure_folds_the_hint_and_inside_it_the_fix():
    result = check("lookup", transposed)
    page = result._repr_html_()
    assert (
        result.message in str(result) and f"Hint: {result.hint}" in str(result) and f"Fix: {result.fix}" in str(result)
    )
    hint_at, fix_at = page.index('<details class="check-hint"'), page.index('<details class="check-fix"')
    assert hint_at < fix_at < page.index("</details>", fix_at) < page.rindex("</details>")  # the fix inside the hint
    assert " open" not in page  # folded until clicked
    assert "<script" not in page  # nothing a notebook's trust state could block


def test_not_started_is_neutral_and_a_pass_has_no_help():
    todo, passed = check("lookup", stub), check("lookup", lambda weight, ids: weight[ids])
    assert "check-todo" in todo._repr_html_() and "check-fail" not in todo._repr_html_()
    assert str(todo).startswith("○ lookup (stub): not started yet")
    assert "details" not in passed._repr_html_() and "Hint" not in str(passed)


def test_not_implemented_names_the_function_that_raised():
    """PositionalEncoding built on an unfilled sinusoidal_encoding: look in that cell."""

    def sinusoidal_encoding(max_len, d_model, base=10000.0):
        raise NotImplementedError("your code here")

    import torch

    class PositionalEncoding(torch.nn.Module):
        def __init__(self, d_model, max_len=5000, dropout=0.1):
            super().__init__()
            self.register_buffer("pe", sinusoidal_encoding(max_len, d_model))

    result = check("PositionalEncoding", PositionalEncoding)
    assert result.diagnosis == "not_implemented" and "`sinusoidal_encoding`" in result.message


def test_progress_reflects_this_kernel_then_the_file(progress_file, capsys):
    check("lookup", transposed)
    check("one_hot_lookup", stub)
    table = progress()
    assert [r.status for r in table.rows][:2] == ["failing: transposed_weight", "not started"]
    assert "Chapter 01: 0/" in str(table) and "course-progress" in table._repr_html_()
    check("lookup", lambda weight, ids: weight[ids])
    tracking._latest.clear()  # a restarted kernel
    assert [r.status for r in progress(1).rows][:2] == ["passed", "not started"]
    assert len(progress("all").rows) > 2 and capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "content",
    [b"\x00\xffnot json", b'{"format": "someone else", "exercises": {}}', b"[1, 2, 3]"],
    ids=["garbage", "foreign", "a list"],
)
def test_an_unreadable_or_foreign_file_is_ignored_and_never_overwritten(progress_file, capsys, content):
    progress_file.write_bytes(content)
    check("lookup", transposed)
    assert progress(1) is not None and hint("lookup") is None
    said = capsys.readouterr().out
    assert said.count(str(progress_file)) == 1  # one line, once
    assert progress_file.read_bytes() == content


def test_two_kernels_writing_at_once_lose_nothing(progress_file):
    """Two processes record 40 results each, interleaved: all 80 survive, as valid JSON."""
    writer = textwrap.dedent(
        """
        import sys
        from types import SimpleNamespace
        from helpers import tracking
        for i in range(40):
            tracking.record(SimpleNamespace(exercise=f"{sys.argv[1]}-{i}", passed=i % 2 == 0, started=True, diagnosis=None))
        """
    )
    env = {"COURSE_PROGRESS_FILE": str(progress_file), "PATH": "/usr/bin:/bin"}
    kernels = [subprocess.Popen([sys.executable, "-c", writer, name], env=env) for name in ("a", "b")]
    assert [k.wait(timeout=60) for k in kernels] == [0, 0]
    records = json.loads(progress_file.read_text())["exercises"]
    assert len(records) == 80 and {r["status"] for r in records.values()} == {"passed", "failing"}


def test_hint_and_progress_never_raise_on_bad_input(progress_file, capsys):
    hint("lokup")
    assert "Did you mean 'lookup'" in capsys.readouterr().out
    hint("lookup")
    assert "not checked" in capsys.readouterr().out
    check("lookup", transposed)
    hint("lookup")
    out = capsys.readouterr().out
    assert "transposed_weight" in out and check("lookup", transposed).hint in out
    assert progress(42) is None and "no chapter" in capsys.readouterr().out
    assert progress("three") is None and "chapter number" in capsys.readouterr().out
