import importlib
import pkgutil

import pytest

from tests import submissions


def submission_modules():
    return [importlib.import_module(f"tests.submissions.{m.name}") for m in pkgutil.iter_modules(submissions.__path__)]


@pytest.fixture(autouse=True)
def short_check_timeout(monkeypatch):
    """Endless-loop submissions stop after 2 s instead of the students' 10 s."""
    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "2")
    monkeypatch.setenv(
        "COURSE_PROGRESS_FILE", ""
    )  # no progress file written by the test suite (tests of it choose their own)
