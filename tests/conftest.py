import importlib
import os
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


# The modules whose few tests take longest (CPU-seconds, each file run alone, 2026-11-27, load 2-5): a batch of
# graded notebooks, a model, a chapter or a notebook tool run end to end. The grader's three batches count as one:
# each grades with two jobs, so that two of them at once would crowd the other worker's timed tests. Not here:
# test_widget_stall.py, whose busy loops load every core on purpose, and stays at the end, away from the batches.
SLOWEST = {
    ("test_forgery.py", "test_grade.py", "test_sandbox.py", "test_hostile_round.py"): 330,
    ("test_grade_overlap.py",): 10,  # mostly sleeps: a worker it waits on does the rest
    ("test_decoder.py",): 52,
    ("test_export_nbgrader.py", "test_export_gradescope.py"): 50,
    ("test_papermill.py",): 25,
    ("test_types.py",): 20,  # mypy over helpers/, without its cache on a fresh clone
    ("test_positions_in_practice.py",): 11,
    ("test_progress.py",): 9,
}


def pytest_collection_modifyitems(config, items):
    """With pytest-xdist's worksteal, each of n workers first gets a contiguous nth of the tests, and an idle
    worker then takes over the end of the longest queue. So each share starts with its part of the slowest
    modules (the least loaded share takes the next) and ends on short tests, so that no long test is left to
    one worker at the end while the other waits. A module's tests stay together, in their order."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        return
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.path.name, []).append(item)
    shares: list[list] = [[] for _ in range(workers)]
    loads = [0] * workers
    for names, seconds in sorted(SLOWEST.items(), key=lambda entry: -entry[1]):
        least = loads.index(min(loads))
        loads[least] += seconds
        shares[least] += [item for name in names for item in modules.pop(name, [])]
    rest = [item for group in modules.values() for item in group]
    ordered: list = []
    for index, share in enumerate(shares):  # xdist's first shares: len(pending) // workers left, in turn
        size = max(len(share), (len(items) - len(ordered)) // (workers - index))
        ordered += share + rest[: size - len(share)]
        del rest[: size - len(share)]
    items[:] = ordered + rest
