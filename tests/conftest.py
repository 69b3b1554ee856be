import importlib
import pkgutil

import pytest

from tests import submissions


def submission_modules():
    return [importlib.import_module(f"tests.submissions.{m.name}") for m in pkgutil.iter_modules(submissions.__path__)]


@pytest.fixture(autouse=True)
def short_check_timeout(request, monkeypatch):
    """Endless-loop submissions stop after 2 s instead of the students' 10 s; one whose expected
    code is "timeout" after half a second (only its endless loop waits for the limit)."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "0.5" if params.get("code") == "timeout" else "2")
    monkeypatch.setenv(
        "COURSE_PROGRESS_FILE", ""
    )  # no progress file written by the test suite (tests of it choose their own)
