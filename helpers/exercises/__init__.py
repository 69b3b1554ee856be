"""The catalogue of exercises, one module per chapter.

    ch01_lookup_tables.py ... ch07_long_context.py   each chapter's known mistakes,
        its probes and `EXERCISES = [Exercise(...), ...]`, pairing 1:1 with
        tests/submissions/chNN.py
    common.py   the probes and mistakes several chapters share

The chapter modules are imported on first use (`all_exercises()`, `get()`),
not by `import helpers`, so that importing the package stays light.
"""

from __future__ import annotations

import difflib
import functools
import importlib

from helpers.registry import Exercise

AVAILABLE = True  # a graded kernel gets a stand-in of this package that says False (helpers/grading/stand_ins)

CHAPTER_MODULES = (
    "ch01_lookup_tables",
    "ch02_scaling",
    "ch03_sinusoidal",
    "ch04_learned",
    "ch05_rope",
    "ch06_comparing",
    "ch07_long_context",
)


@functools.cache
def _catalogue() -> dict[str, Exercise]:
    catalogue: dict[str, Exercise] = {}
    for name in CHAPTER_MODULES:
        for exercise in importlib.import_module(f"{__name__}.{name}").EXERCISES:
            if exercise.id in catalogue:
                raise ValueError(f"exercise {exercise.id!r} is declared twice ({name})")
            catalogue[exercise.id] = exercise
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
