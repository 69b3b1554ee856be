"""The batch's pace (issue 45): --jobs notebooks execute at once; meanwhile other lanes, each on cores of its
own, start the next notebook's worker and kernel or check the one before, and no two notebooks alive at once
share a core.

The schedule is tested with a stand-in for the grading of one notebook (no kernel: sleeps that say when
its kernel would be up, its cells done, its checks done), forked by the real batch; one class of tiny
notebooks then goes through the real command at --jobs 1."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import grade
from helpers.grading import batch
from helpers.grading.kernel import warm_up
from helpers.grading.worker import Pace, graded_apart
from tests.grading_support import HEAD, NO_SANDBOX, RIGHT_LOOKUP, RIGHT_ONE_HOT, passed, write_notebook

START, EXECUTE, CHECKS = 0.2, 1.5, 0.8  # seconds the stand-in takes for each part (the margins: EXECUTE - START)
warm_up()  # the grader's, once per process: here before the batch, whose second worker would wait for it


async def stand_in(
    path: str | Path, *, name: str, chapters: Any, exercises: Any, found: Any, pace: Pace, cpus: Any = None, **_: Any
):
    """What grade_notebook_async does with its pace, timed; a notebook named `dies` ends its worker while
    executing, one named `slow` executes for 30 s."""
    forked = time.time()
    await asyncio.sleep(START)  # its kernel's start
    await pace.turn()
    went = time.time()
    if Path(path).stem == "dies":
        os._exit(1)
    await asyncio.sleep(30 if Path(path).stem == "slow" else EXECUTE)
    executed = time.time()
    pace.executed()
    await asyncio.sleep(CHECKS)
    report = batch.not_graded(
        Path(path), "Paced", "a stand-in", name=name, chapters=chapters, exercises=exercises, found=found, started=0
    )
    report["timings"] = {"forked": forked, "went": went, "executed": executed, "done": time.time()}
    report["cpus"] = cpus
    return report


def grade_class(tmp_path: Path, names: list[str], jobs: int, seconds: float = 60) -> list[dict[str, Any]]:
    """The batch's reports, each notebook graded by the stand-in in a worker with a deadline of `seconds`."""
    folder = tmp_path / "class"
    folder.mkdir()
    found = [grade.read_submission(write_notebook(folder / f"{name}.ipynb", [RIGHT_LOOKUP])) for name in names]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch, "grade_notebook_async", stand_in)  # the workers are forked: they inherit it
        patch.setattr(batch, "deadline", lambda notebook_timeout: seconds)
        return asyncio.run(batch.grade_many(found, tmp_path / "out", jobs=jobs, chapters={1}, progress=False))


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    alive = most = 0
    for _, step in events:
        alive += step
        most = max(most, alive)
    return most


def alone_on_their_cores(reports: list[dict[str, Any]]) -> bool:
    """No two notebooks alive at once shared a core."""
    spans = [(r["timings"]["forked"], r["timings"]["done"], set(r["cpus"] or CORES)) for r in reports]
    return all(not (a[2] & b[2]) for i, a in enumerate(spans) for b in spans[i + 1 :] if a[0] < b[1] and b[0] < a[1])


CORES = sorted(os.sched_getaffinity(0))
OVERLAPS = pytest.mark.skipif(len(CORES) < 2, reason="one core: notebooks are graded one after another")


@OVERLAPS
def test_at_jobs_1_one_notebook_executes_at_a_time_and_the_next_starts_meanwhile(tmp_path):
    names = [f"student{i}" for i in range(4)]
    reports = grade_class(tmp_path, names, jobs=1)
    assert [Path(r["submission"]).stem for r in reports] == names  # in the order given
    times = [r["timings"] for r in reports]
    assert most_at_once([(t["went"], t["executed"]) for t in times]) == 1
    assert times[1]["forked"] < times[0]["executed"]  # its kernel starts while the first executes
    for before, after in zip(times, times[1:]):
        assert after["went"] < before["done"]  # it executes while the one before is checked
    assert alone_on_their_cores(reports)


def test_at_jobs_2_two_notebooks_execute_at_once_at_most(tmp_path):
    reports = grade_class(tmp_path, [f"student{i}" for i in range(5)], jobs=2)
    assert most_at_once([(r["timings"]["went"], r["timings"]["executed"]) for r in reports]) == 2
    assert alone_on_their_cores(reports) or len(CORES) < 2


def test_a_machine_has_as_many_lanes_as_cores_allow():
    assert batch.lane_count(1) == min(2, len(CORES)) and batch.lane_count(len(CORES) + 1) == len(CORES) + 1
    assert all(batch.lane_count(jobs) <= max(jobs, len(CORES)) for jobs in range(1, 9))


def test_a_worker_that_dies_while_executing_costs_its_notebook_only(tmp_path):
    reports = grade_class(tmp_path, ["a", "dies", "c"], jobs=1)
    assert reports[1]["errors"][0]["type"] == "GraderLimit" and "stopped" in reports[1]["errors"][0]["message"]
    assert [r["errors"][0]["type"] for r in (reports[0], reports[2])] == ["Paced", "Paced"]


def test_a_worker_past_its_deadline_frees_its_turn(tmp_path):
    """Past its deadline while executing: that notebook scores nothing, the next one executes."""
    reports = grade_class(tmp_path, ["slow", "b"], jobs=1, seconds=4)
    assert reports[0]["errors"][0]["type"] == "GraderLimit" and "limit" in reports[0]["errors"][0]["message"]
    assert reports[1]["errors"][0]["type"] == "Paced"


def test_the_wait_for_its_turn_counts_against_no_deadline(tmp_path):
    """A worker whose kernel is up waits for its turn as long as the batch says; its own time has a deadline."""
    path = write_notebook(tmp_path / "student.ipynb", [RIGHT_LOOKUP])
    found = grade.read_submission(path)
    late = lambda: asyncio.sleep(2 * (START + EXECUTE + CHECKS))
    options = dict(path=path, name="student", chapters={1}, exercises=grade.exercise_table(), found=found)
    report, why = asyncio.run(graded_apart(START + EXECUTE + CHECKS + 2, stand_in, turn=late, **options))
    assert report is not None and why == "", why
    report, why = asyncio.run(graded_apart(START + EXECUTE, stand_in, **options))
    assert report is None and "ran past" in why


def test_a_class_at_jobs_1_is_graded_in_turn_with_full_marks(tmp_path):
    """The real command: each notebook's cells run after the one before's are done (each says when, in an error),
    both exercises it does pass, and no report counts the wait for its turn as its own time."""
    folder, out = tmp_path / "class", tmp_path / "out"
    folder.mkdir()
    timed = "import time\n\nraise RuntimeError(f'executed {BEGAN!r} {time.time()!r}')"
    for i in range(3):
        cells = [HEAD, "import time\n\nBEGAN = time.time()", RIGHT_LOOKUP, RIGHT_ONE_HOT, timed]
        write_notebook(folder / f"student{i}.ipynb", cells)
    assert grade.main([str(folder), "--out", str(out), "--jobs", "1", "--quiet", *NO_SANDBOX]) == 0
    reports = [json.loads((out / f"student{i}.json").read_text()) for i in range(3)]
    spans = []
    for report in reports:
        assert passed(report) == {"lookup", "one_hot_lookup"} and report["score"] == 4, report
        [error] = report["errors"]
        spans.append(tuple(float(x) for x in error["message"].split("executed ")[1].split()))
        timings = report["timings"]
        assert timings["waited"] >= 0 and report["seconds"] >= timings["start"] + timings["execute"]
    assert most_at_once(spans) == 1, spans
