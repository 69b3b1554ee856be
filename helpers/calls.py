"""Every call into student code, one seam: in a notebook, in a graded kernel, and from the grader.

A `Runner` makes the call and returns how it ended as a typed record (`Called`, its `Outcome`):

* `InProcess` puts the course's safety net (`helpers.safety`) around the call, composed here once:
  a time limit, a memory cap, the torch functions it calls watched, the reference tripwired, and
  torch's global settings captured and put back. A check in a notebook uses it, and so does the
  function server of a graded kernel (helpers.grading.serve), with `everything=True`;
* the grader's `helpers.grading.remote.Session` is the other Runner: the call's student code runs in the
  kernel, and a stand-in whose call there did not end well raises `Ended`, which carries that kernel's
  `Outcome` unopened through the grader's own code back to its Runner.

`ending_of` is the one place that says how a call ended from what it raised. `RUNNER` is the runner a
check's probe calls through (the grader sets its session there). This module imports `helpers.safety`
only (and `helpers.registry` through it).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

import torch

from helpers import safety


@dataclass
class Settings:
    """The safety net a probe asks for around its calls into student code; sent with each request
    to a graded kernel, whose server puts the same net up there."""

    timeout: float = 10.0
    memory_mb: int = 4096
    device: str = "cpu"
    forbidden: list[str] = field(default_factory=list)  # torch paths of the functions the exercise forbids
    factories_on_meta: bool = False
    copies_off_meta: bool = False
    grad: bool = True


class Ending(enum.Enum):
    """How a call into student code ended."""

    OK = "ok"
    TIMEOUT = "timeout"
    FORBIDDEN = "forbidden"  # a function the exercise forbids was called: `name`
    REFERENCE = "reference"  # the course's reference was reached: `name`
    NOT_IMPLEMENTED = "not_implemented"  # NotImplementedError; `stub`: the stub that raised it, if one did
    EXIT = "exit"
    RAISED = "raised"  # anything else: `line`, the traceback's last line; `oom`: out of memory


@dataclass(frozen=True)
class Outcome:
    """How one call into student code ended."""

    ending: Ending
    line: str = ""
    name: str = ""
    stub: str | None = None
    oom: bool = False

    def tree(self) -> dict[str, Any]:
        """As the protocol writes it (helpers.grading.wire.parse_reply reads it back)."""
        return {"kind": self.ending.value, "line": self.line, "name": self.name, "stub": self.stub, "oom": self.oom}


OK = Outcome(Ending.OK)


@dataclass
class Called:
    """A call's outcome, its value (None unless it ended OK), the names of the torch functions it ran
    and the torch settings it changed (put back already)."""

    outcome: Outcome
    value: Any = None
    seen: set[str] = field(default_factory=set)
    changed: list[str] = field(default_factory=list)


def ending_of(error: BaseException, everything: bool = False) -> Outcome | None:
    """How a call into student code ended that raised `error`; None where `error` is no ending of the
    student's code but its caller's to handle: a probe's `Failure` (a check's own code calls probes), a
    KeyboardInterrupt, the grader's KernelGone. With `everything` (in a graded kernel, where nothing may
    escape the server) an interrupt is the grader's time limit and any other error a raise."""
    if isinstance(error, safety.CheckTimeout) or (everything and isinstance(error, KeyboardInterrupt)):
        return Outcome(Ending.TIMEOUT)
    if isinstance(error, safety.ForbiddenCall):
        return Outcome(Ending.FORBIDDEN, name=error.name)
    if isinstance(error, safety.ReferenceReached):
        return Outcome(Ending.REFERENCE, name=error.name)
    if type(error).__name__ == "ReferenceUnavailable":  # a graded kernel's stand-in (grading/stand_ins/reference.py)
        return Outcome(Ending.REFERENCE, name=str(getattr(error, "name", "helpers.reference")))
    if isinstance(error, NotImplementedError):
        return Outcome(Ending.NOT_IMPLEMENTED, last_line(error), stub=stub_that_raised(error))
    if isinstance(error, SystemExit):
        return Outcome(Ending.EXIT, last_line(error))
    if isinstance(error, safety.Failure) and not everything:
        return None
    if everything or isinstance(error, Exception):
        return Outcome(Ending.RAISED, last_line(error), oom=is_out_of_memory(error))
    return None


def last_line(error: BaseException) -> str:
    """The last line of an exception's traceback: what a student reads of what their code raised."""
    return "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()[-1]


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("not enough memory" in text or "can't allocate memory" in text)


def stub_that_raised(error: NotImplementedError) -> str | None:
    """The name of the student's function whose stub raised (PositionalEncoding's __init__ may call a
    sinusoidal_encoding still unfilled), or None when torch raised it ("this op has no meta kernel")."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or frames[-1].filename.startswith(safety.TORCH_FILES):
        return None
    return frames[-1].name


class Ended(BaseException):
    """Carries the `Outcome` of a call that ended in a graded kernel through the grader's own code (a
    stand-in called inside a check's lambda, a backward through a kernel's result) to its Runner. Raise
    it with `end`: an ending that a notebook would see as an Exception (a raise, a stub) travels as one
    (`EndedWithError`), so that the check's own `except Exception:` treats both alike."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.ending.value)
        self.outcome = outcome

    def said(self) -> str:
        """The last line a student reads where this ending reaches check() itself, outside any probe's call."""
        carrier = {Ending.FORBIDDEN: safety.ForbiddenCall, Ending.REFERENCE: safety.ReferenceReached}.get(
            self.outcome.ending
        )
        if carrier is None:
            return self.outcome.line
        return f"{carrier.__module__}.{carrier.__qualname__}: {self.outcome.name}"


class EndedWithError(Ended, Exception):
    """An `Ended` whose student code raised an Exception."""


def end(outcome: Outcome) -> NoReturn:
    raise (EndedWithError if outcome.ending in (Ending.RAISED, Ending.NOT_IMPLEMENTED) else Ended)(outcome)


class Runner(Protocol):
    """What calls into student code for a check's probe."""

    records_progress: bool  # a check's result is the student's progress (not in the grader)

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], settings: Settings) -> Called:
        """Call `fn(*args, **kwargs)` under `settings`: a probe's Failure and the caller's own interrupts
        propagate, every other ending is the Called's outcome."""
        ...

    def claim(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """What the code that ran says `tensor` holds, where that is not what the caller holds (a graded
        kernel's word on a Parameter the grader owns), else None."""
        ...


class InProcess:
    """Student code in this process, inside the course's safety net."""

    records_progress = True

    def __init__(self, everything: bool = False):
        self.everything = everything  # a graded kernel's server: nothing escapes (ending_of)

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], settings: Settings) -> Called:
        forbidden = tuple(f for f in (safety.from_torch_path(path) for path in settings.forbidden) if f is not None)
        watch = safety.Watch(forbidden, (args, kwargs))
        called = Called(OK)
        with torch.set_grad_enabled(settings.grad):
            state = safety.TorchState.capture()
            try:
                with net(settings, watch):
                    called.value = fn(*args, **kwargs)
                watch.returned(called.value)
            except BaseException as error:
                outcome = ending_of(error, self.everything)
                if outcome is None:
                    raise
                called.outcome = outcome
            finally:
                called.changed = safety.TorchState.capture().changes_since(state)
                state.restore()
        called.seen = {getattr(f, "__name__", "") for f in watch.seen}
        return called

    def claim(self, tensor: torch.Tensor) -> torch.Tensor | None:
        return None  # the tensors here are the ones the code changed


def net(settings: Settings, watch: safety.Watch) -> contextlib.ExitStack[bool | None]:
    """The safety net around one call: a time limit, a memory cap, the torch functions it calls watched,
    the device check's meta modes, the course's reference tripwired (innermost: only the student's own
    call is watched)."""
    stack = contextlib.ExitStack()
    stack.enter_context(safety.time_limit(settings.timeout))
    stack.enter_context(safety.memory_cap(settings.memory_mb, torch.device(settings.device)))
    stack.enter_context(watch)
    if settings.factories_on_meta:
        stack.enter_context(safety.FactoriesOnMeta())
    elif settings.copies_off_meta:
        stack.enter_context(safety.CopiesOffMeta())
    stack.enter_context(safety.ReferenceWatch())
    return stack


IN_PROCESS = InProcess()  # holds no state: one for every check in this process
# The runner a check's probes call through: this process, unless the grader set its session (helpers.grading.remote).
RUNNER: contextvars.ContextVar[Runner] = contextvars.ContextVar("course_runner", default=IN_PROCESS)
