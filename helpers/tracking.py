"""A student's progress: `progress()` and `hint()`.

Every check() a kernel runs is recorded here, in memory and in a small JSON
file beside the notebooks (`.course-progress.json` in the working directory,
ignored by git; COURSE_PROGRESS_FILE moves it, an empty value turns it off).
The file is only a convenience across restarts: nothing needs it, a corrupt
or foreign one is left alone (and said so, once), and two kernels writing at
once merge their records under a lock instead of overwriting each other.
"""

from __future__ import annotations

import contextlib
import difflib
import html
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE_ENV = "COURSE_PROGRESS_FILE"
DEFAULT_FILE = ".course-progress.json"
FORMAT = "course-progress/1"  # a file without it is not ours: never overwritten

_latest: dict[str, Any] = {}  # exercise id -> the CheckResult of this kernel's last check
_said: set[str] = set()  # warnings about the file, said once per kernel


def _file() -> Path | None:
    chosen = os.environ.get(FILE_ENV)
    if chosen is None:
        return Path.cwd() / DEFAULT_FILE
    return Path(chosen) if chosen.strip() else None


def _say_once(line: str) -> None:
    if line not in _said:
        _said.add(line)
        print(line)


def _read(path: Path) -> dict[str, dict[str, Any]] | None:
    """The records in the file: {} when there is none, None when it is unreadable or not ours."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        _say_once(f"(progress: {path} is unreadable; it is ignored and left as it is)")
        return None
    if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("exercises"), dict)):
        _say_once(f"(progress: {path} is not a course progress file; it is ignored and left as it is)")
        return None
    return {k: v for k, v in data["exercises"].items() if isinstance(v, dict)}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time (two kernels of the course, say): an advisory lock beside the file."""
    try:
        import fcntl
    except ImportError:  # Windows: writes are atomic renames, so the worst case is a lost record
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record(result: Any) -> None:
    """Remember a check's result; add it to the progress file. Never raises."""
    _latest[result.exercise] = result
    entry = {
        "status": "passed" if result.passed else "failing" if result.started else "not started",
        "diagnosis": result.diagnosis,
        "time": time.time(),
    }
    path = _file()
    if path is None:
        return
    try:
        with _locked(path):
            records = _read(path)
            if records is None:
                return
            records[result.exercise] = entry  # read, merge, replace: what others wrote stays
            with tempfile.NamedTemporaryFile(
                "w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False, encoding="utf-8"
            ) as out:
                json.dump({"format": FORMAT, "exercises": records}, out, indent=1, sort_keys=True)
            os.replace(out.name, path)
    except OSError as error:  # a read-only folder, a full disk: progress is a convenience
        _say_once(f"(progress: could not write {path}: {error.strerror or error})")


def _known(exercise_id: Any) -> str | None:
    """None for a known id, else a line naming the known ones, close matches first."""
    from helpers.exercises import all_exercises

    known = list(all_exercises())
    if exercise_id in known:
        return None
    close = difflib.get_close_matches(str(exercise_id), known, n=3, cutoff=0.4)
    rest = [k for k in known if k not in close]
    return (
        f"There is no exercise {exercise_id!r}. "
        + (f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else "")
        + f"Known: {', '.join(close + rest)}."
    )


def hint(exercise_id: str) -> None:
    """Print the hint of this kernel's last failed check of `exercise_id` (and where the fix is)."""
    unknown = _known(exercise_id)
    if unknown:
        print(unknown)
        return
    result = _latest.get(exercise_id)
    if result is None:
        print(f"You have not checked {exercise_id!r} in this session yet: run its check cell first.")
    elif result.passed:
        print(f"{exercise_id} passes its check: no hint needed.")
    else:
        print(f"Hint for {exercise_id} ({result.diagnosis}): {result.hint}")
        print("Still stuck? Unfold 'Show the fix' under the check's panel, or print(check(...).fix).")


@dataclass
class Row:
    id: str
    chapter: int
    points: int
    difficulty: int
    minutes: int
    status: str  # "passed", "failing: <diagnosis>", "not started"


class Progress:
    """The table `progress()` returns: HTML in Jupyter, text in a terminal."""

    def __init__(self, rows: list[Row], title: str):
        self.rows, self.title = rows, title

    @property
    def points(self) -> tuple[int, int]:
        return sum(r.points for r in self.rows if r.status == "passed"), sum(r.points for r in self.rows)

    def __str__(self) -> str:
        got, total = self.points
        lines = [
            f"{self.title}: {got}/{total} points",
            f"  {'exercise':<28}{'points':>7}  {'difficulty':<11}{'time':>7}  status",
        ]
        lines += [
            f"  {r.id:<28}{r.points:>7}  {'●' * r.difficulty + '○' * (3 - r.difficulty):<11}{r.minutes:>4} min  {r.status}"
            for r in self.rows
        ]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colours = {"passed": "#1a7f37", "not started": "#57606a"}
        cells = "".join(
            f"<tr><td><code>{html.escape(r.id)}</code></td><td>{r.points}</td><td>{'●' * r.difficulty + '○' * (3 - r.difficulty)}</td>"
            f'<td>{r.minutes} min</td><td style="color:{colours.get(r.status, "#cf222e")}">{html.escape(r.status)}</td></tr>'
            for r in self.rows
        )
        got, total = self.points
        return (
            f'<div class="course-progress" style="font-family:sans-serif"><b>{html.escape(self.title)}: {got}/{total} points</b>'
            f"<table><tr><th>exercise</th><th>points</th><th>difficulty</th><th>time</th><th>status</th></tr>{cells}</table></div>"
        )


def progress(chapter: int | str | None = None) -> Progress | None:
    """The exercises of a chapter (default: the one this kernel checked last;
    "all" for the whole course) with their points, difficulty, time and status:
    this kernel's checks first, then what the progress file remembers."""
    from helpers.exercises import AVAILABLE, all_exercises

    if not AVAILABLE:  # a kernel being graded (helpers/grading/stand_ins)
        print("This notebook is being graded: the grader checks every exercise itself, outside this kernel.")
        return None
    exercises = list(all_exercises().values())
    if chapter is None and _latest:
        chapter = exercises[[e.id for e in exercises].index(list(_latest)[-1])].chapter
    if chapter not in (None, "all"):
        try:
            chapter = int(chapter)
        except (TypeError, ValueError):
            print(
                f"progress() takes a chapter number (1 to {max(e.chapter for e in exercises)}) or 'all', not {chapter!r}."
            )
            return None
    chosen = [e for e in exercises if chapter in (None, "all") or e.chapter == chapter]
    if not chosen:
        print(f"There is no chapter {chapter!r}: chapters run from 1 to {max(e.chapter for e in exercises)}.")
        return None
    path = _file()
    remembered = (_read(path) if path is not None else None) or {}
    rows = []
    for e in chosen:
        if e.id in _latest:
            result = _latest[e.id]
            status = (
                "passed" if result.passed else "not started" if not result.started else f"failing: {result.diagnosis}"
            )
        else:
            entry = remembered.get(e.id, {})
            status = {"passed": "passed", "failing": f"failing: {entry.get('diagnosis')}"}.get(
                str(entry.get("status")), "not started"
            )
        rows.append(Row(e.id, e.chapter, e.points, e.difficulty, e.minutes, status))
    title = "The whole course" if chapter in (None, "all") else f"Chapter {chapter:02d}"
    return Progress(rows, title)
