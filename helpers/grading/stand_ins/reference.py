"""Stands in for helpers/reference.py inside a graded kernel's sandbox.

The grader compares a submission with the course's reference in its own
process; in the sandbox there is no reference to copy or to call. A notebook
cell that uses it (a figure drawn from the reference, solution_or_reference)
raises ReferenceUnavailable, which costs no points: only the exercises count.
"""


class ReferenceUnavailable(RuntimeError):
    def __init__(self, name: str):
        super().__init__(f"`{name}` is not available while a notebook is graded (the grader keeps the course's reference to itself)")
        self.name = name


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def unavailable(*args, **kwargs):
        raise ReferenceUnavailable(f"helpers.reference.{name}")

    unavailable.__name__ = unavailable.__qualname__ = name
    return unavailable
