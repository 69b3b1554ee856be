"""The catalogue of exercises, one module per chapter.

    ch01_lookup_tables.py ... ch07_long_context.py   each chapter's known mistakes,
        its probes and `EXERCISES = [Exercise(...), ...]`, pairing 1:1 with
        tests/submissions/chNN.py
    common.py   the probes and mistakes several chapters share

The chapter modules are found by their file names (`chNN_*.py`, in chapter order)
and imported on first use (`all_exercises()`, `get()`), not by `import helpers`,
so that importing the package stays light. A new chapter is a new file: nothing
here lists them. Each exercise's `chapter` must be its module's NN.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import re
from pathlib import Path

from helpers import contracts
from helpers.registry import Exercise

AVAILABLE = True  # a graded kernel gets a stand-in of this package that says False (helpers/grading/stand_ins)

CHAPTER = re.compile(r"ch(\d\d)_\w+")


def chapter_modules() -> list[str]:
    """The chapter modules' names, in chapter order: every ch[0-9][0-9]_*.py beside this file."""
    return sorted(path.stem for path in Path(__file__).parent.glob("ch[0-9][0-9]_*.py") if CHAPTER.fullmatch(path.stem))


@functools.cache
def _catalogue() -> dict[str, Exercise]:
    catalogue: dict[str, Exercise] = {}
    for name in chapter_modules():
        number = int(name[2:4])  # chapter_modules() keeps only names CHAPTER matches: ch + two digits
        for exercise in importlib.import_module(f"{__name__}.{name}").EXERCISES:
            if exercise.id in catalogue:
                raise ValueError(f"exercise {exercise.id!r} is declared twice ({name})")
            if exercise.chapter != number:
                raise ValueError(f"exercise {exercise.id!r} says chapter {exercise.chapter}, but lives in {name}")
            # A contract's axes run after the exercise's own probes, whose diagnoses are more specific.
            walk = exercise.contract is not None
            catalogue[exercise.id] = (
                dataclasses.replace(exercise, check=contracts.walked(exercise.check)) if walk else exercise
            )
    return catalogue


def all_exercises() -> dict[str, Exercise]:
    """Every exercise, by id, in chapter order."""
    return dict(_catalogue())


def get(exercise_id: str) -> Exercise:
    """The exercise `exercise_id`; an unknown id raises KeyError naming the close matches."""
    catalogue = _catalogue()
    if exercise_id not in catalogue:
        close = difflib.get_close_matches(str(exercise_id), catalogue, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise KeyError(f"There is no exercise {exercise_id!r}.{hint} Known: {', '.join(catalogue)}")
    return catalogue[exercise_id]
