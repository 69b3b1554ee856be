# Appended to helpers/reference.py without the graded exercises' references (sandbox.reference_stand_in):
# each of those names is a stub that raises, so that no answer is there to call, copy or read.

from collections.abc import Callable
from typing import NoReturn


class ReferenceUnavailable(RuntimeError):
    def __init__(self, name: str):
        super().__init__(
            f"`{name}` is not available while a notebook is graded (the grader keeps the reference of the exercises it grades to itself)"
        )
        self.name = name


def unavailable(name: str) -> Callable[..., NoReturn]:
    def stub(*args: object, **kwargs: object) -> NoReturn:
        raise ReferenceUnavailable(f"helpers.reference.{name}")

    stub.__name__ = stub.__qualname__ = name
    return stub
