"""Every independent mistake is named, by its own code (issue 22, item 4).

For each exercise whose catalogue holds two or more mistakes, its chapter's tests/submissions/chNN.py
declares in INDEPENDENT which pairs are
independent aspects of the code (the layout and the frequencies of a table, the turn's direction
and the positions it reads...), and ONE_ASPECT why an exercise has none: there every catalogue
mistake is another value of one and the same choice, so two of them cannot be made at once.
Each declared pair has a submission in some `ALSO` list of tests/submissions that makes both
mistakes; tests/test_checks.py runs them all and asserts that the first is the diagnosis and the
other is listed under "Also wrong" by its own code, never as wrong_values."""

import inspect

import pytest

from helpers import check, safety
from helpers.exercises import all_exercises
from tests.conftest import submission_modules

INDEPENDENT = {name: pairs for m in submission_modules() for name, pairs in getattr(m, "INDEPENDENT", {}).items()}
ONE_ASPECT = {name: why for m in submission_modules() for name, why in getattr(m, "ONE_ASPECT", {}).items()}

ALSO = [case for m in submission_modules() for case in getattr(m, "ALSO", [])]


def test_every_exercise_with_two_mistakes_says_which_are_independent():
    several = {e.id for e in all_exercises().values() if len(e.mistakes) >= 2}
    assert several - set(INDEPENDENT) - set(ONE_ASPECT) == set()
    assert not set(INDEPENDENT) & set(ONE_ASPECT)
    for exercise, pairs in INDEPENDENT.items():
        codes = set(all_exercises()[exercise].mistakes)
        assert pairs and all(set(pair) <= codes for pair in pairs), f"{exercise}: {pairs} are not all its catalogue's"


def test_every_independent_pair_has_a_submission_that_makes_both():
    made = {(exercise, frozenset((code, also))) for exercise, code, also, _ in ALSO}
    missing = [
        (exercise, pair)
        for exercise, pairs in INDEPENDENT.items()
        for pair in pairs
        if (exercise, frozenset(pair)) not in made
    ]
    assert missing == []


# ---------------------------------------------------------------------------
# No known mistake, made alone, gets an "also" entry (issue 32): searched over the whole catalogue
# ---------------------------------------------------------------------------


def catalogue_submission(exercise, code: str, face: int):
    """The catalogue's mistake `code` of a function exercise as a submission: on every input the checks
    choose, it returns that mistake's face `face` (the last one if it has fewer; the reference's output
    where the mistake has none, as code that makes this mistake alone does there). Code that makes one
    mistake and nothing else, in every form the catalogue knows."""
    mistake = exercise.mistakes[code]

    def submission(*args, **kwargs):
        found = mistake(*args, **kwargs)
        faces = [f for f in (found if isinstance(found, list) else [found]) if f is not None]
        return faces[min(face, len(faces) - 1)] if faces else exercise.reference(*args, **kwargs)

    submission.__name__ = f"{code}_face_{face}"
    submission.__signature__ = inspect.signature(exercise.reference)
    return submission


def takes_the_exercises_arguments(exercise, code: str) -> bool:
    """A function exercise's mistake that runs on the student's arguments (module exercises' mistakes
    replay an output from the student's own table: tests/submissions holds them as modules)."""
    names = [p.name for p in inspect.signature(exercise.reference).parameters.values()]
    params = list(inspect.signature(exercise.mistakes[code]).parameters.values())
    return [p.name for p in params] == names or any(p.kind is p.VAR_POSITIONAL for p in params)


SINGLE_MISTAKES = [
    (e.id, code, face)
    for e in all_exercises().values()
    if e.kind == "function"
    for code in e.mistakes
    if takes_the_exercises_arguments(e, code)
    for face in (0, -1)
]
# Found by the search and not yet fixed (outside issue 32's chapters 01-06); strict: a fix must remove the entry.
KNOWN_MISNAMED = {
    ("yarn_scaling", "yarn_edge_clamped_to_half", -1): "at (16, 1e4, 4, 100000) its output is yarn_not_truncated's",
}


@pytest.mark.parametrize(
    "exercise, code, face",
    [
        pytest.param(*case, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISNAMED[case]))
        if case in KNOWN_MISNAMED
        else case
        for case in SINGLE_MISTAKES
    ],
    ids=[f"{e}-{c}-{f}" for e, c, f in SINGLE_MISTAKES],
)
def test_a_catalogue_mistake_made_alone_is_named_and_nothing_else(monkeypatch, exercise, code, face):
    """Each face of each catalogue mistake, returned as a submission's output on every probe's inputs, is
    diagnosed as that mistake, with nothing under "Also wrong". An "also" entry comes from a probe that
    tells the second mistake from the first (at k = 0 every base gives the identity; a sin never read is
    the same negated: such probes must not report it); with test_checks' ALSO cases, which make both
    mistakes and must list the second, every reported "also" is one that a probe distinguishes."""
    monkeypatch.setattr(safety, "_reference_functions", lambda: {})  # the catalogue itself calls the reference
    ex = all_exercises()[exercise]
    result = check(exercise, catalogue_submission(ex, code, face))
    assert (result.diagnosis, result.also) == (code, []), str(result)


def test_the_catalogue_search_reaches_every_function_exercise():
    """The search above covers every function exercise of every chapter (a mistake that takes other
    arguments would drop out of it silently)."""
    functions = {e.id for e in all_exercises().values() if e.kind == "function" and e.mistakes}
    assert functions - {exercise for exercise, _, _ in SINGLE_MISTAKES} == set()
