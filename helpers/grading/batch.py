"""Grading one notebook, and a class of them, N at a time."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from helpers.grading.collect import (
    NOT_GRADED,
    Found,
    class_chapters,
    detect_chapters,
    read_cells,
    read_submission,
    report_names,
    suspicious,
)
from helpers.grading.escape import path_text, plain
from helpers.grading.kernel import warm_up
from helpers.grading.limits import CELL_TIMEOUT, NOTEBOOK_TIMEOUT
from helpers.grading.records import Note, Report, Skipped, Verdict
from helpers.grading.reports import RENDER, for_students, summarize, summary_csv, summary_markdown
from helpers.grading.submission import ExerciseInfo, Submission, exercise_table
from helpers.grading.worker import Pace, deadline, graded_apart


def cpu_share(slot: int, jobs: int) -> list[int] | None:
    """The cores of the `slot`-th of `jobs` sandboxes: the machine's cores dealt out evenly
    (None: one job, or a machine that cannot say which cores this process may use)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if jobs <= 1 or len(cores) < 2:
        return None
    share = max(1, len(cores) // jobs)
    start = (slot * share) % len(cores)
    return cores[start : start + share]


def lane_count(jobs: int) -> int:
    """How many sandboxes the batch keeps alive at once, one per lane, each on cores no other has (`cpu_share`):
    `jobs` execute, and where the machine has the cores as many more start their kernel or are checked meanwhile;
    never fewer than `jobs` (with fewer cores than that, sandboxes share them, as they must)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return jobs
    return max(jobs, min(2 * jobs, cores))


class Paced(Submission):
    """A Submission that keeps its batch's pace: its first kernel starts before its turn to execute comes
    (a restart is part of its turn), and it says when its cells are done, before its checks."""

    def __init__(self, *args: Any, pace: Pace | None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.pace, self.waiting = pace, pace is not None

    async def new_kernel(self) -> None:
        await super().new_kernel()
        if self.pace is not None and self.waiting:
            self.waiting = False
            await self.pace.turn()

    async def grade(self) -> list[Verdict]:
        if self.pace is not None:
            self.pace.executed()
        return await super().grade()


async def grade_notebook_async(
    path: str | Path,
    *,
    name: str | None = None,
    chapters: set[int] | None = None,
    cell_timeout: float = CELL_TIMEOUT,
    notebook_timeout: float = NOTEBOOK_TIMEOUT,
    memory_mb: int = 0,
    exercises: list[ExerciseInfo] | None = None,
    sandbox: bool = True,
    found: Found | None = None,
    cpus: list[int] | None = None,
    pace: Pace | None = None,
) -> Report:
    """Execute and grade one notebook; the report as a dict (see `report_json`).
    `found` is the submission as `collect` read it; without it, `path` is read here.
    `pace`: its worker's (helpers.grading.worker), whose turn it waits for once its kernel is up."""
    path = Path(path)
    found = found or read_submission(path)
    exercises = exercises if exercises is not None else exercise_table()
    started = time.monotonic()
    cells: list[tuple[int, str]] = []
    sources: list[str] = []
    problem = found.problem
    if problem is None:
        try:
            cells, sources = read_cells(found.data or b"")
        except Exception as error:  # not a notebook: graded as empty
            problem = (
                "NotebookFormatError",
                plain(f"the submission could not be read as a notebook: {type(error).__name__}: {error}", 500),
            )
    wanted = chapters or detect_chapters(sources, path.name, exercises)
    selected = [e for e in exercises if e.chapter in wanted]
    if problem is not None:  # nothing to run
        return not_graded(path, *problem, name=name, chapters=wanted, exercises=exercises, found=found, started=started)
    copy = (re.sub(r"[^A-Za-z0-9._-]+", "_", path.name).lstrip(".")[-100:] or "submission") + (
        "" if path.name.endswith(".ipynb") else ".ipynb"
    )
    submission = Paced(
        cells,
        selected,
        cell_timeout=cell_timeout,
        notebook_timeout=notebook_timeout,
        memory_mb=memory_mb,
        sandboxed=sandbox,
        notebook_name=copy,
        data=found.data or b"",
        cpus=cpus,
        pace=pace,
    )
    graded = True
    try:
        results = await submission.run()
    except Exception as error:  # no sandbox, the kernel did not start, ...: not the student's fault
        graded = False
        submission.error(None, "GraderError", f"{type(error).__name__}: {error}"[:500])
        results = [
            Submission.verdict(e, False, "raised", "Not graded: the grader failed (see the errors).") for e in selected
        ]
    waited = pace.waited if pace is not None else 0.0  # for its turn, its kernel up: not its own time
    if "start" in submission.timings:
        submission.timings["start"] -= waited
    return {
        "submission": name or path_text(path),
        "score": sum(r["score"] for r in results),
        "max_score": sum(r["max_score"] for r in results),
        "exercises": results,
        "errors": submission.errors,
        "warnings": [Note(cell=None, message=note) for note in found.notes] + suspicious(cells),
        "flag": None,
        "chapters": sorted(wanted),
        "graded": graded,
        "seconds": round(time.monotonic() - started - waited, 2),
        "timings": {k: round(v, 2) for k, v in submission.timings.items()} | {"waited": round(waited, 2)},
    }


def not_graded(
    path: Path,
    kind: str,
    message: str,
    *,
    name: str | None,
    chapters: set[int] | None,
    exercises: list[ExerciseInfo],
    found: Found,
    started: float,
) -> Report:
    """The report of a submission that was not run, or whose grading was stopped: every exercise 0,
    `kind` and `message` its error (a flag when `kind` says it is not anyone's work)."""
    wanted = chapters or {e.chapter for e in exercises}
    selected = [e for e in exercises if e.chapter in wanted]
    results = [Submission.verdict(e, False, "not_implemented", f"Not graded: {message}.") for e in selected]
    return {
        "submission": name or path_text(path),
        "score": 0,
        "max_score": sum(r["max_score"] for r in results),
        "exercises": results,
        "errors": [{"cell": None, "type": kind, "message": message}],
        "warnings": [{"cell": None, "message": note} for note in found.notes],
        "flag": kind if kind in NOT_GRADED else None,
        "chapters": sorted(wanted),
        "graded": True,
        "seconds": round(time.monotonic() - started, 2),
        "timings": {},
    }


def grade_notebook(path: str | Path, **kwargs: Any) -> Report:
    """Synchronous `grade_notebook_async`."""
    return asyncio.run(grade_notebook_async(path, **kwargs))


async def grade_many(
    submissions: list[Found],
    out: Path,
    *,
    fmt: str = "json",
    feedback: str = "hint",
    jobs: int = 1,
    chapters: set[int] | None = None,
    cell_timeout: float = CELL_TIMEOUT,
    notebook_timeout: float = NOTEBOOK_TIMEOUT,
    memory_mb: int = 0,
    sandbox: bool = True,
    skipped: list[Skipped] | None = None,
    progress: bool = True,
) -> list[Report]:
    """Grade `submissions` (as `collect` found them), each in its own kernel, `jobs` executing at once; write each
    report as soon as its sandbox is gone, and the class summary at the end. Notebooks overlap in lanes
    (`lane_count`): a lane grades one notebook at a time, on cores of its own, so that while a notebook
    executes, other lanes start the next one's kernel or check the one before it, and no two sandboxes alive at
    once share a core: a busy loop slows only its own notebook."""
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    exercises = exercise_table()
    if chapters is None and len(submissions) > 1:  # one assignment: what most of the class shows
        chapters = class_chapters(submissions, exercises)
    names = report_names([s.path for s in submissions])
    suffix, render = RENDER[fmt]
    single_gradescope = fmt == "gradescope" and len(submissions) == 1  # what a Gradescope autograder expects
    jobs = max(1, jobs)
    lanes, executing = lane_count(jobs), asyncio.Semaphore(jobs)
    queue = collections.deque(enumerate(zip(submissions, names)))
    reports: dict[int, Report] = {}
    cwd = Path.cwd()
    # The first wave of workers is forked cold (each warms up while its kernel boots); the grader warms up as soon
    # as they are, and every later worker is forked from it warm: its seconds of CPU no longer come before any kernel.
    first_wave, warmed, forks = min(len(submissions), jobs), asyncio.Event(), [0]

    def warm() -> None:
        warm_up()
        warmed.set()

    def forked() -> None:
        forks[0] += 1
        if forks[0] == first_wave < len(submissions):  # later workers to come
            asyncio.get_running_loop().call_soon(warm)

    def shown(path: Path) -> str:
        absolute = Path(os.path.abspath(path))
        return path_text(absolute.relative_to(cwd) if absolute.is_relative_to(cwd) else path)

    async def lane(cpus: list[int] | None) -> None:
        while queue:
            index, (found, name) = queue.popleft()
            reports[index] = await one(found, name, cpus)

    async def one(found: Found, name: str, cpus: list[int] | None) -> Report:
        holding = False

        async def take() -> None:  # its kernel is up: it executes once fewer than `jobs` do
            nonlocal holding
            await executing.acquire()
            holding = True

        def give() -> None:
            nonlocal holding
            if holding:
                holding = False
                executing.release()

        seconds = deadline(notebook_timeout)
        try:
            name_shown = shown(found.path)
            if forks[0] >= first_wave:
                await warmed.wait()
            report, why = await graded_apart(
                seconds,
                grade_notebook_async,
                forked=forked,
                turn=take,
                executed=give,
                path=found.path,
                name=name_shown,
                chapters=chapters,
                exercises=exercises,
                found=found,
                sandbox=sandbox,
                cpus=cpus,
                cell_timeout=cell_timeout,
                notebook_timeout=notebook_timeout,
                memory_mb=memory_mb,
            )
        finally:
            give()
        if report is None:  # the worker was stopped: the submission scores nothing, the batch goes on
            started = time.monotonic() - seconds
            report = not_graded(
                found.path,
                "GraderLimit",
                why,
                name=name_shown,
                chapters=chapters,
                exercises=exercises,
                found=found,
                started=started,
            )
        target = out / "results.json" if single_gradescope else out / f"{name}{suffix}"
        try:
            target.write_text(render(for_students(report, feedback)), encoding="utf-8")
        except (OSError, ValueError) as error:  # one report that cannot be written costs that report only
            report["errors"].append(
                {"cell": None, "type": "ReportNotWritten", "message": plain(f"{target.name}: {error}", 500)}
            )
        bar.set_postfix_str(
            f"{plain(Path(report['submission']).name, 40)}: {report['score']:g}/{report['max_score']:g}"
        )
        bar.update()
        return report

    with tqdm(total=len(submissions), desc="grading", unit="notebook", disable=not progress, file=sys.stderr) as bar:
        await asyncio.gather(*(lane(cpu_share(slot, lanes)) for slot in range(lanes)))
    ordered = [reports[index] for index in range(len(submissions))]  # in the order given
    summary = summarize(ordered, skipped)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(summary_markdown(summary), encoding="utf-8")
    (out / "summary.csv").write_text(summary_csv(summary), encoding="utf-8")
    return ordered
