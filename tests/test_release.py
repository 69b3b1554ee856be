"""The release tool: solution markers become stubs, nothing else changes."""

import pytest

from helpers.release import student_source

SOLUTION = '''```{code-cell} ipython3
def lookup(weight, ids):
    """weight: (V, d); ids: (...)."""
    # BEGIN SOLUTION
    return weight[ids]
    # END SOLUTION
```

```{code-cell} ipython3
class Scaled(nn.Module):
    def __init__(self, d):
        super().__init__()
        # BEGIN SOLUTION
        self.d = d
        # END SOLUTION

    def forward(self, x):
        # BEGIN SOLUTION
        return x * self.d
        # END SOLUTION
```
'''


def test_solution_blocks_become_stubs_at_their_indentation():
    student = student_source(SOLUTION)
    assert "weight[ids]" not in student and "self.d = d" not in student and "x * self.d" not in student
    assert student.count('raise NotImplementedError("your code here")') == 3
    assert '    raise NotImplementedError("your code here")\n```' in student
    assert '        raise NotImplementedError("your code here")\n\n    def forward' in student
    assert '"""weight: (V, d); ids: (...)."""' in student and "super().__init__()" in student


def test_text_without_markers_is_unchanged():
    assert student_source("# Title\n\nprose only\n") == "# Title\n\nprose only\n"


def test_unbalanced_markers_are_refused():
    with pytest.raises(ValueError, match="unbalanced"):
        student_source("# BEGIN SOLUTION\nx = 1\n")


def test_the_release_renders_each_badge_line_from_the_registry():
    """An author writes `**Exercise `id`**`; the release fills in the rest, and puts a stale line right."""
    from helpers.exercises import get
    from helpers.release import with_badges

    badge = get("lookup").badge
    assert with_badges("Intro\n\n**Exercise `lookup`**\n\n" + SOLUTION) == f"Intro\n\n{badge}\n\n" + SOLUTION
    assert with_badges("**Exercise `lookup`** · difficulty ●●● · 99 points\n") == badge + "\n"
    assert with_badges(f"{badge}\n") == f"{badge}\n"
    with pytest.raises(KeyError, match="no exercise"):
        with_badges("**Exercise `lookup_typo`**\n")


def test_progress_lists_each_chapters_exercises_in_the_order_the_chapter_asks_for_them():
    """progress() and the grader list a chapter's exercises in the registry's order: the order of the
    badge lines in its master (an exercise moved within a chapter moves in its module's EXERCISES too)."""
    from pathlib import Path

    from helpers.exercises import all_exercises
    from helpers.release import BADGE

    for solution in sorted((Path(__file__).resolve().parents[1] / "solutions").glob("*.md")):
        chapter = int(solution.name[:2])
        asked = BADGE.findall(solution.read_text())
        listed = [e.id for e in all_exercises().values() if e.chapter == chapter]
        assert asked == listed, f"{solution.name}: the chapter asks {asked}, the registry lists {listed}"
