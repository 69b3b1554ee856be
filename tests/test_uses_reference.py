"""`uses_reference`: a submission that is, wraps or calls the course's own reference scores 0.

The check watches the calls, not the source: however the student's code got
hold of `helpers.reference` (an import, importlib, `solution_or_reference`, a
subclass), reaching it while the submission is checked fails, and the message
names the reference it reached. The checker's own calls to the reference (to
compute what is expected) are not the student's and never count.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import check, reference, solution_or_reference


def wraps_the_reference(weight, ids):
    return reference.lookup(weight, ids) + 0


def imports_the_reference(weight, ids):
    from helpers.reference import lookup

    return lookup(weight, ids)


def through_importlib(weight, ids):
    return importlib.import_module("helpers.reference").one_hot_lookup(weight, ids)


def hides_the_call(weight, ids):
    try:
        return reference.lookup(weight, ids)
    except BaseException:  # a student's except cannot hide the call
        return weight[ids]


class SubclassesTheReference(reference.PositionalEncoding):
    pass


class WrapsTheReference(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.inner = reference.PositionalEncoding(d_model, max_len, dropout)

    def forward(self, x):
        return self.inner(x)


def own_lookup(weight, ids):
    return weight[ids]


def own_one_hot_lookup(weight, ids):
    return F.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight


CASES = [  # exercise, submission, the reference the message names
    ("lookup", reference.lookup, "helpers.reference.lookup"),
    ("lookup", solution_or_reference("lookup", None), "helpers.reference.lookup"),
    ("lookup", wraps_the_reference, "helpers.reference.lookup"),
    ("lookup", imports_the_reference, "helpers.reference.lookup"),
    ("one_hot_lookup", through_importlib, "helpers.reference.one_hot_lookup"),
    ("lookup", hides_the_call, "helpers.reference.lookup"),
    ("PositionalEncoding", reference.PositionalEncoding, "helpers.reference.PositionalEncoding"),
    ("PositionalEncoding", SubclassesTheReference, "helpers.reference.PositionalEncoding"),
    ("PositionalEncoding", WrapsTheReference, "helpers.reference.sinusoidal_encoding"),  # what its __init__ calls
]


@pytest.mark.parametrize(
    "exercise, submission, reached", CASES, ids=[f"{e}-{getattr(s, '__name__', s)}" for e, s, _ in CASES]
)
def test_reaching_the_reference_scores_zero_and_names_it(exercise, submission, reached):
    result = check(exercise, submission)
    assert (result.passed, result.diagnosis, result.score) == (False, "uses_reference", 0), str(result)
    assert f"`{reached}`" in result.message


def test_the_reference_is_itself_again_after_the_check():
    check("lookup", wraps_the_reference)
    assert reference.lookup(torch.eye(3), torch.tensor([1])).tolist() == [[0.0, 1.0, 0.0]]


def test_own_code_passes_though_the_check_computes_the_reference():
    assert check("lookup", own_lookup).passed and check("one_hot_lookup", own_one_hot_lookup).passed


def test_solution_or_reference_is_for_the_cells_after_an_exercise(capsys):
    fallback = solution_or_reference("lookup", None)
    assert fallback(torch.eye(3), torch.tensor([2])).tolist() == [[0.0, 0.0, 1.0]]  # fine to use after the exercise
    assert "course's reference" in capsys.readouterr().out
    assert check("lookup", fallback).diagnosis == "uses_reference"  # not as the exercise itself
