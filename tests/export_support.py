"""What the exporters' end-to-end tests share."""

from __future__ import annotations

import copy
from typing import Any

EXERCISE_MARKS = ("# BEGIN SOLUTION", 'raise NotImplementedError("your code here")', "check(")


def exercises_only(notebook: Any) -> Any:
    """A copy of a chapter's notebook with its first code cell (the imports) and its exercise and check cells
    alone: what a grader scores, without the minutes of plots and tables it need not run to prove it scores."""
    trimmed = copy.deepcopy(notebook)
    code = [cell for cell in trimmed.cells if cell.cell_type == "code"]
    trimmed.cells = [code[0], *(cell for cell in code[1:] if any(mark in cell.source for mark in EXERCISE_MARKS))]
    return trimmed
