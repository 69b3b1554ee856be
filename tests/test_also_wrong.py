"""Every independent mistake is named, by its own code (issue 22, item 4).

For each exercise whose catalogue holds two or more mistakes, its chapter's tests/submissions/chNN.py
declares in INDEPENDENT which pairs are
independent aspects of the code (the layout and the frequencies of a table, the turn's direction
and the positions it reads...), and ONE_ASPECT why an exercise has none: there every catalogue
mistake is another value of one and the same choice, so two of them cannot be made at once.
Each declared pair has a submission in some `ALSO` list of tests/submissions that makes both
mistakes; tests/test_checks.py runs them all and asserts that the first is the diagnosis and the
other is listed under "Also wrong" by its own code, never as wrong_values."""

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
