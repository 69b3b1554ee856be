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


def checked_with(monkeypatch, exercise_id: str, submission, probe_class=None):
    """check(exercise_id, submission) with its probe made from `probe_class` (a Probe by default): (that probe, the
    result). helpers is imported here, not by every test process (the browser suite's never needs torch)."""
    from helpers import check, checking
    from helpers.probe import Probe

    probes = []

    class Kept(probe_class or Probe):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            probes.append(self)

    with monkeypatch.context() as patch:
        patch.setattr(checking, "Probe", Kept)
        result = check(exercise_id, submission)
    return probes[0], result
