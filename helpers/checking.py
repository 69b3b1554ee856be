"""The checker framework: `check(exercise_id, submission) -> CheckResult`.

A check is a short list of named probes (shape -> dtype -> device -> values ->
properties -> module hygiene) written per exercise in its chapter's module
under `helpers.exercises`. This module gives those probes their tools and
their safety net:

* every call into student code goes through `Probe.call`, which times it out,
  caps its memory, catches what it raises, and notices if it changed its
  inputs in place;
* `check()` snapshots torch's global state (default dtype, grad mode, RNG...)
  and puts it back afterwards, whatever the student's code did;
* when the output is wrong, `Probe.expect` runs the exercise's catalogue of
  known-wrong variants (declared with the exercise) on the same inputs: the one that
  reproduces the student's output names the mistake. We diagnose by running
  code, never by reading the student's source.

Nothing in here raises because of a submission: every failure becomes a
`CheckResult` with a diagnosis code from `helpers.registry.DIAGNOSES`.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import html
import inspect
import math
import os
import re
import resource
import signal
import sys
import threading
import traceback
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from helpers import exercises, registry, tracking

TIMEOUT_ENV = "COURSE_CHECK_TIMEOUT"  # seconds per call into student code
MEMORY_ENV = "COURSE_CHECK_MEMORY_MB"  # extra memory student code may take
DEVICE_ENV = "COURSE_DEVICE"  # force "cpu", "cuda", "cuda:1", "mps", ...
# Set by the grader (helpers.grading): the student's code runs in another process, which this session
# (a helpers.grading.remote.Session) calls; the checks run here, on the data it sends back.
REMOTE: contextvars.ContextVar[Any] = contextvars.ContextVar("course_remote", default=None)
# Set by the grader: mixed into every probe's seed, so that a submission cannot know its inputs in advance.
SEED_SALT: contextvars.ContextVar[int] = contextvars.ContextVar("course_seed_salt", default=0)


# --------------------------------------------------------------------------
# Where checks run
# --------------------------------------------------------------------------


def check_device() -> torch.device:
    """CUDA when present, else Apple's MPS, else the CPU; COURSE_DEVICE overrides."""
    forced = os.environ.get(DEVICE_ENV, "").strip()
    if forced:
        return torch.device(forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


# --------------------------------------------------------------------------
# The result a student sees
# --------------------------------------------------------------------------


@dataclass
class CheckResult:
    """What a check found. The message says what is wrong, on which input, in the
    student's names; the hint gives the idea that leads to the fix; the fix is
    the concrete change. In Jupyter the hint and the fix are folded (HTML
    <details>, no JavaScript), so a student asks for help one step at a time."""

    exercise: str
    passed: bool
    diagnosis: str | None
    message: str
    score: float
    max_score: float
    submission_name: str = ""
    hint: str = ""
    fix: str = ""
    also: list[str] = field(default_factory=list)  # further independent mistakes found

    def __bool__(self) -> bool:
        return self.passed

    @property
    def started(self) -> bool:
        return self.diagnosis != "not_implemented"

    def _headline(self) -> str:
        who = f" ({self.submission_name})" if self.submission_name not in ("", self.exercise) else ""
        points = f"{self.score:g}/{self.max_score:g} points"
        if self.passed:
            return f"✔ {self.exercise}{who}: passed, {points}"
        if not self.started:
            return f"○ {self.exercise}{who}: not started yet, {points}"
        return f"✘ {self.exercise}{who}: {self.diagnosis}, {points}"

    def __str__(self) -> str:
        lines = [self._headline(), f"  {self.message}"]
        lines += [f"  Also: {finding}" for finding in self.also]
        lines += [f"  {label}: {text}" for label, text in (("Hint", self.hint), ("Fix", self.fix)) if text and not self.passed]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        css_class, colour, background = ("check-pass", "#1a7f37", "#dafbe1") if self.passed else ("check-todo", "#57606a", "#eef1f4") if not self.started else ("check-fail", "#cf222e", "#ffebe9")
        # The texts are written with markdown's `code`: escaped first, so a student's name or value stays text, then shown as code.
        text = lambda words: re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(words))
        also = "".join(f"<li>{text(finding)}</li>" for finding in self.also)
        help_ = ""
        if self.hint and not self.passed:  # the fix is folded inside the hint: a second click away
            fix = f'<details class="check-fix" style="margin:4px 0 0 12px"><summary>Show the fix</summary>{text(self.fix)}</details>' if self.fix else ""
            help_ = f'<details class="check-hint" style="margin-top:6px"><summary>Hint</summary>{text(self.hint)}{fix}</details>'
        return (
            f'<div class="course-check {css_class}" data-diagnosis="{self.diagnosis or ""}" '
            f'style="border-left:6px solid {colour};background:{background};'
            f'padding:8px 12px;margin:4px 0;color:#1f2328;font-family:sans-serif">'
            f"<b>{html.escape(self._headline())}</b><br>{text(self.message)}" + (f'<ul class="check-also" style="margin:4px 0">Also wrong: {also}</ul>' if also else "") + f"{help_}</div>"
        )

    def as_dict(self) -> dict[str, Any]:
        keys = ("exercise", "passed", "score", "max_score", "diagnosis", "message", "hint", "fix", "also")
        return {key: getattr(self, key) for key in keys}


class Failure(Exception):
    """Raised by a probe: the first one that fails writes the message. `hint` and
    `fix` left empty are filled in from the exercise's catalogue or the generic advice."""

    def __init__(self, code: str, message: str, hint: str = "", fix: str = ""):
        if code not in registry.DIAGNOSES:
            raise ValueError(f"unknown diagnosis code {code!r}")
        super().__init__(message)
        self.code, self.message, self.hint, self.fix = code, message, hint, fix


class CheckTimeout(BaseException):
    """BaseException, so a student's `except Exception:` cannot swallow it."""


class ForbiddenCall(BaseException):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


# --------------------------------------------------------------------------
# The safety net around student code
# --------------------------------------------------------------------------


@dataclass
class TorchState:
    """The global torch settings a student's code could change behind our back."""

    default_dtype: torch.dtype
    default_device: torch.device
    grad_enabled: bool
    deterministic: bool
    num_threads: int
    cpu_rng: torch.Tensor
    cuda_rng: list[torch.Tensor] | None

    @classmethod
    def capture(cls) -> TorchState:
        try:
            cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        except Exception:  # a GPU broken by an earlier device-side assert: check() says so when it is used
            cuda = None
        return cls(
            torch.get_default_dtype(),
            torch.get_default_device(),
            torch.is_grad_enabled(),
            torch.are_deterministic_algorithms_enabled(),
            torch.get_num_threads(),
            torch.get_rng_state(),
            cuda,
        )

    def changes_since(self, other: TorchState) -> list[str]:
        """Settings that differ. RNG draws are not listed: dropout legitimately uses them."""
        names = ("default_dtype", "default_device", "grad_enabled", "deterministic")
        return [f"{n} {getattr(other, n)} -> {getattr(self, n)}" for n in names if getattr(self, n) != getattr(other, n)]

    def restore(self) -> None:
        now = TorchState.capture()  # set only what differs: some setters are slow (inductor imports)
        if now.default_dtype != self.default_dtype:
            torch.set_default_dtype(self.default_dtype)
        if now.default_device != self.default_device:
            torch.set_default_device(self.default_device)
        if now.deterministic != self.deterministic:
            torch.use_deterministic_algorithms(self.deterministic)
        if now.num_threads != self.num_threads:
            torch.set_num_threads(self.num_threads)
        torch.set_grad_enabled(self.grad_enabled)
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            with contextlib.suppress(Exception):  # the GPU broke meanwhile: the check's result says so
                torch.cuda.set_rng_state_all(self.cuda_rng)


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block with CheckTimeout after `seconds`.

    In the main thread (a Jupyter kernel, the grader, pytest) a POSIX timer
    signal does it; elsewhere a watchdog thread injects the exception. Either
    way a pure-Python endless loop stops; a single giant C call finishes first
    (the memory cap keeps those small). A student's bare `except:` may swallow
    one CheckTimeout, so it is raised again every RETRY seconds until the block
    is left, and only ever inside the student's own code: never in the
    middle of torch's or this module's bookkeeping."""
    if seconds <= 0:
        yield
        return
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        expired = False

        def keep_stopping(frame, event, arg):
            """After the deadline, raise again at the next line of student code:
            a CheckTimeout caught by `except:` is raised anew in the handler's
            body, which no `except` of the same `try` covers. (CPython drops
            a tracer that raises; the next alarm installs it again.)"""
            if expired and _student_code(frame):
                raise CheckTimeout
            return keep_stopping

        def on_alarm(signum, frame):
            nonlocal expired
            if not active:  # a signal that came just before the finally below, handled just after it began
                return  # re-armed now, it would fire after SIGALRM's previous action (the default: exit) is back
            signal.setitimer(signal.ITIMER_REAL, RETRY)  # until the finally below disarms it
            if _importing(frame) or not _student_code(frame):  # never cut an import or our own code in half
                return
            expired = True
            sys.settrace(keep_stopping)
            while frame is not None:  # the frames already running, too
                frame.f_trace = keep_stopping
                frame = frame.f_back
            raise CheckTimeout

        active = True
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            active = False  # first: from here on, no alarm re-arms the timer
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if expired:
                sys.settrace(None)
    else:
        target = threading.get_ident()
        done, lock = threading.Event(), threading.Lock()

        def watchdog():
            if done.wait(seconds):
                return
            while not done.wait(RETRY):  # again and again: a bare `except:` may swallow one
                with lock:  # never after the block is left
                    frame = sys._current_frames().get(target)
                    if not done.is_set() and not _importing(frame) and _student_code(frame):
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), ctypes.py_object(CheckTimeout))

        threading.Thread(target=watchdog, daemon=True).start()
        try:
            yield
        finally:
            with lock:
                done.set()
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), None)  # one still pending must not fire later


RETRY = 0.02  # seconds between two CheckTimeouts once the limit has passed
_NOT_STUDENT_CODE = (
    os.path.dirname(torch.__file__),
    os.path.dirname(contextlib.__file__) + os.sep + "contextlib",
    __file__,
)


class ReferenceReached(BaseException):
    """Raised by a tripwired reference function: BaseException, so `except Exception:` cannot hide it."""


def _reference_functions() -> dict[Any, str]:
    """Every function of helpers.reference, module-level and methods: function -> its name."""
    from helpers import reference

    found = {}
    for name, value in vars(reference).items():
        if inspect.isfunction(value) and value.__module__ == reference.__name__:
            found[value] = f"helpers.reference.{name}"
        elif inspect.isclass(value) and value.__module__ == reference.__name__:
            found.update({f: f"helpers.reference.{name}.{attr}" for attr, f in vars(value).items() if inspect.isfunction(f)})
    return {f: name for f, name in found.items() if not f.__code__.co_freevars}  # a tripwire has no closure to match (super()'s)


_REACHED: list[str] = []  # the reference functions a tripwire caught, in order


def _tripwire(*args: Any, **kwargs: Any) -> None:
    """Stands in for a reference function while student code runs. It runs with the
    reference module's globals, so it reaches this module by import, not by name."""
    checking = __import__("helpers.checking", fromlist=["_REACHED"])
    checking._REACHED.append(__import__("sys")._getframe().f_code.co_qualname)
    raise checking.ReferenceReached


class _ReferenceWatch:
    """Fails the block with `uses_reference` if it called any function of helpers.reference:
    the submission is, wraps or calls the course's reference (however it got hold of it: an
    import, importlib, `solution_or_reference`, a subclass). For the block's duration every
    reference function's code is a tripwire that records the call and raises; the checker's
    own calls to the reference happen outside the block. The call itself is detected, not the
    source text, and it costs nothing per call."""

    def __init__(self, what: str):
        self.what, self.saved = what, {}

    def __enter__(self) -> None:
        _REACHED.clear()
        for function, name in _reference_functions().items():
            self.saved[function] = (function.__code__, function.__defaults__, function.__kwdefaults__)
            function.__defaults__, function.__kwdefaults__ = None, None
            function.__code__ = _tripwire.__code__.replace(co_name=function.__name__, co_qualname=name)

    def __exit__(self, *exc: Any) -> bool:
        for function, (code, defaults, kwdefaults) in self.saved.items():
            function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
        if _REACHED:  # whatever the block raised or returned: the result is not the student's
            reached = _REACHED[0]
            _REACHED.clear()
            raise Failure("uses_reference", ran_reference(self.what, reached))
        return False


def ran_reference(what: str, reached: str) -> str:
    return f"{what} ran the course's own reference `{reached}`: the reference and solution_or_reference are for the cells after an exercise, not for the exercise itself."


def _student_code(frame) -> bool:
    """Is the innermost frame the student's (not torch's, contextlib's or ours)?"""
    return frame is not None and not frame.f_code.co_filename.startswith(_NOT_STUDENT_CODE)


def _importing(frame) -> bool:
    """Is this stack in the middle of an import? (torch imports sympy lazily, for one.)"""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _data_segment_bytes() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@contextmanager
def memory_cap(extra_mb: int, device: torch.device) -> Iterator[None]:
    """Let the block allocate at most `extra_mb` more on the CPU, so that
    `torch.zeros(10**6, 10**6)` fails fast instead of swapping the machine to
    death. Linux only (RLIMIT_DATA); elsewhere, and around CUDA (whose driver
    maps memory of its own), the allocator's own errors are our only guard."""
    used = _data_segment_bytes()
    if used is None or extra_mb <= 0 or device.type == "cuda":
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    cap = used + extra_mb * 2**20
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


class _Watch(TorchFunctionMode):
    """Sees every torch function the student's code calls: refuses the
    forbidden ones and remembers the rest (e.g. "was there a matmul?")."""

    def __init__(self, forbidden: tuple[Callable, ...]):
        super().__init__()
        self.forbidden, self.seen = forbidden, set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.forbidden:
            raise ForbiddenCall(_qualified_name(func))
        self.seen.add(func)
        return func(*args, **(kwargs or {}))


def _torch_path(func: Callable) -> str:
    """Where a torch function lives, as a graded kernel finds it again (`from_torch_path`)."""
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.{func}"
    module = getattr(func, "__module__", None) or "torch"
    paths = [f"{module}.{name}" for name in (func.__name__, getattr(func, "__qualname__", func.__name__))]
    return next((path for path in paths if from_torch_path(path) is func), paths[0])


def from_torch_path(path: str) -> Any:
    """A torch function by its dotted path ("torch.nn.functional.embedding", "torch._tensor.Tensor.backward")."""
    found: Any = torch
    for part in str(path).split(".")[1:]:
        found = getattr(found, part, None)
    return found if str(path).startswith("torch.") else None


def _qualified_name(func: Callable) -> str:
    module = getattr(func, "__module__", None) or "torch"
    return f"{module.replace('torch.nn.functional', 'F')}.{getattr(func, '__name__', func)}"


def _is_out_of_memory(error: BaseException) -> bool:
    if hasattr(error, "out_of_memory"):  # raised in a graded kernel: it said so (helpers.grading.remote)
        return bool(error.out_of_memory)
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("not enough memory" in text or "can't allocate memory" in text)


def _stub_that_raised(error: NotImplementedError) -> str | None:
    """The name of the student's function whose stub raised (PositionalEncoding's
    __init__ may call a sinusoidal_encoding still unfilled), or None when torch
    raised it ("this op has no meta kernel")."""
    if hasattr(error, "stub"):  # raised in a graded kernel, which looked (helpers.grading.remote)
        return error.stub
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or frames[-1].filename.startswith(_NOT_STUDENT_CODE[0]):
        return None
    return frames[-1].name


def _last_line(error: BaseException) -> str:
    if hasattr(error, "last_line"):  # raised in a graded kernel: its own last line
        return error.last_line
    return "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()[-1]


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors_in(item)]
    return []


# --------------------------------------------------------------------------
# The probe: what an exercise's check uses
# --------------------------------------------------------------------------

TOLERANCES = {  # (rtol, atol) per dtype of the expected result
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def _broadcasts(shape: torch.Size, to: torch.Size) -> bool:
    try:
        return torch.broadcast_shapes(shape, to) == to
    except RuntimeError:
        return False


def close(out: torch.Tensor, expected: torch.Tensor, rtol: float | None = None, atol: float | torch.Tensor | None = None) -> bool:
    """Same shape and values within the expected dtype's tolerance (any dtype, any device).
    `atol` may be a tensor that broadcasts to the result: a tolerance entry by entry."""
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape or out.is_meta or expected.is_meta:
        return False
    default_rtol, default_atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    a = out.detach().to("cpu", torch.float64)
    b = expected.detach().to("cpu", torch.float64)
    if isinstance(atol, torch.Tensor) and not _broadcasts(atol.shape, b.shape):
        atol = float(atol.max())  # entry-by-entry tolerances of the reference, compared with a mistake of another shape: the loosest
    if isinstance(atol, torch.Tensor):
        bound = atol.detach().to("cpu", torch.float64) + (default_rtol if rtol is None else rtol) * b.abs()
        return bool(((a == b) | ((a - b).abs() <= bound) | (a.isnan() & b.isnan())).all())  # a == b: equal infinities
    return bool(
        torch.allclose(
            a,
            b,
            rtol=default_rtol if rtol is None else rtol,
            atol=default_atol if atol is None else atol,
            equal_nan=True,
        )
    )


class Length(int):
    """A length passed to student code as an int (Probe.length): Probe.call records it among
    the edges (T = 1 and T = max_len) and hands the student a plain int."""

    max_len: int | None = None


# Probe.independent: after these nothing more is run; later ones of these are no new finding.
STOPS_EVERYTHING = frozenset({"timeout", "out_of_memory", "not_implemented", "uses_reference", "changed_global_state", "mutated_input"})
CRASHES = STOPS_EVERYTHING | {"raised", "wrong_type", "forbidden_api", "nan_or_inf"}


class Probe:
    """Handed to an exercise's `run`; every probe method raises `Failure`."""

    def __init__(self, exercise: registry.Exercise, submission_name: str, device: torch.device | None = None):
        self.exercise = exercise
        self.name = submission_name
        self.device = check_device() if device is None else device
        # The accelerator's pass comes after a passed CPU pass (see check): it compares values on
        # the GPU and nothing else. No mistake is replayed there (a transposed table indexed past
        # its end is a device-side assert on CUDA that breaks the process), no meta device pass.
        self.accelerator_pass = self.device.type not in ("cpu", "meta")
        self.timeout = float(os.environ.get(TIMEOUT_ENV, 10))
        self.memory_mb = int(os.environ.get(MEMORY_ENV, 4096))
        # Inputs the student did not choose, yet the same on every run.
        self.generator = torch.Generator().manual_seed(zlib.crc32(exercise.id.encode()) ^ SEED_SALT.get())
        self.calls_seen: set[Callable] = set()
        self.factories_on_meta = False  # set during device_pass's second run
        self.copies_off_meta = False  # set during its first run
        self.also: list[str] = []  # further independent mistakes, found after the first
        self.notes: list[str] = []  # one line each, added to a pass message (a cross-check that was skipped)
        # What the probes reached, for the framework's own tests (tests/test_checks.py):
        self.edges_reached: dict[str, set[str]] = {}  # kind -> the edges ("first", "last") some call received
        self.edges_lost: list[str] = []  # tagged inputs that reached student code without one of their edges
        self.built: list[torch.nn.Module] = []  # every module Probe.build made
        self.gradients: list[tuple[torch.Tensor, torch.Tensor]] = []  # (a trained table, the rows its gradient probe used)

    # ---- failing -------------------------------------------------------
    def fail(self, code: str, message: str, hint: str = "", fix: str = "") -> None:
        raise Failure(code, message, hint, fix)

    def independent(self, *probes: Callable[[], Any]) -> None:
        """Run probes that look at independent aspects (layout, scale, dropout,
        hygiene...) all, so a student meets every mistake in one run: the first
        failure is the diagnosis, the others are listed in `also`, each code once.
        After a failure that says nothing more can be learned (a stub, a time-out,
        the reference used) nothing else runs; a later crash, the same broken
        code met again, adds nothing."""
        first, named = None, set()
        for run in probes:
            if first is not None and first.code in STOPS_EVERYTHING:
                break
            try:
                run()
            except Failure as failure:
                if first is None:
                    first = failure
                elif failure.code not in named | {first.code} | CRASHES:
                    self.also.append(f"{failure.code}: {failure.message}")
                named.add(failure.code)
        if first is not None:
            raise first

    # ---- inputs --------------------------------------------------------
    def randn(self, *shape: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, dtype=dtype).to(device or self.device)

    def randint(self, high: int, *shape: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Plain random integers: for inputs that must avoid an edge on purpose; else `ids`."""
        return torch.randint(high, shape, generator=self.generator).to(device or self.device)

    def ids(self, high: int, *shape: int, device: torch.device | str | None = None, kind: str = "ids", every: bool = False) -> torch.Tensor:
        """Random integers below `high` that hold both edges, 0 and high - 1, on purpose and at
        random places (one element holds high - 1): a frozen first or last row, or an off-by-one
        at either end, shows on every seed, not on the lucky ones. `kind` is what they are
        (registry.EDGE_KINDS: ids, positions, segments). With `every`, each value below high
        appears at least once, so a gradient probe reaches every row of a table."""
        count = math.prod(shape)
        if every and count < high:
            raise ValueError(f"{count} ids cannot hold each of {high} values")
        values = torch.randint(high, (count,), generator=self.generator)
        if every:
            values[:high] = torch.arange(high)
        else:
            values[:2] = torch.tensor([high - 1, 0])[:count]
        values = values[torch.randperm(count, generator=self.generator)].view(shape)
        return self.tag(values.to(device or self.device), kind, high)

    def positions(self, max_len: int, *shape: int, device: torch.device | str | None = None, every: bool = False) -> torch.Tensor:
        """Position ids below max_len, with 0 and max_len - 1 among them."""
        return self.ids(max_len, *shape, device=device, kind="positions", every=every)

    def segments(self, count: int, *shape: int, device: torch.device | str | None = None, every: bool = False) -> torch.Tensor:
        """Segment (token type) ids below count, with 0 and count - 1 among them."""
        return self.ids(count, *shape, device=device, kind="segments", every=every)

    def sequence(self, tensor: torch.Tensor, max_len: int | None = None, dim: int = 1) -> torch.Tensor:
        """`tensor` with its length (its size along `dim`) marked: T = 1 and T = max_len are the
        edges (only T = 1 where no max_len bounds it)."""
        return self.tag(tensor, "lengths", max_len, dim)

    def length(self, length: int, max_len: int | None = None) -> int:
        """An int argument that is a length (sinusoidal_encoding's max_len, alibi_bias's seq_len):
        Probe.call records it with the edges and hands the student a plain int."""
        marked = Length(length)
        marked.max_len = max_len
        return marked

    @staticmethod
    def tag(tensor: torch.Tensor, kind: str, bound: int | None, dim: int | None = None) -> torch.Tensor:
        """Mark an input with the edges it must reach (see `ids`, `sequence`); Probe.call records them."""
        tensor._course_edges = (*getattr(tensor, "_course_edges", ()), (kind, bound, dim))
        return tensor

    def _record_edges(self, args: tuple, kwargs: dict) -> None:
        """Which edges the tagged inputs of one call into student code hold."""

        def reached(kind: str, first: bool, last: bool) -> None:
            self.edges_reached.setdefault(kind, set()).update(edge for edge, hit in (("first", first), ("last", last)) if hit)

        for value in (*args, *kwargs.values()):
            if isinstance(value, Length):
                reached("lengths", value == 1, value.max_len in (None, value))
        for tensor in _tensors_in([args, kwargs]):
            for kind, bound, dim in getattr(tensor, "_course_edges", ()):
                if kind == "lengths":
                    size = tensor.shape[dim]
                    reached(kind, size == 1, bound in (None, size))
                elif not tensor.is_meta:
                    first, last = bool((tensor == 0).any()), bool((tensor == bound - 1).any())
                    reached(kind, first, last)
                    if tensor.numel() >= 2 and not (first and last):
                        self.edges_lost.append(f"{kind} below {bound}, shape {tuple(tensor.shape)}, without {0 if not first else bound - 1}")

    def record_gradient(self, table: torch.Tensor, rows_used: torch.Tensor) -> None:
        """A gradient probe compared `table`'s gradient; `rows_used` (bool, one per row) says
        which rows its inputs used. The framework's tests ask that every trained table was."""
        self.gradients.append((table, rows_used.detach().to("cpu", torch.bool)))

    # ---- calling student code -----------------------------------------
    def call(self, fn: Callable, *args: Any, what: str | None = None, **kwargs: Any) -> Any:
        """Call student code safely. The student's code gets clones of the
        tensors; if it changes them in place we say which argument."""
        what = what or f"`{self.name}`"
        self._record_edges(args, kwargs)
        args = tuple(int(a) if isinstance(a, Length) else a for a in args)  # the student gets plain ints
        kwargs = {k: int(a) if isinstance(a, Length) else a for k, a in kwargs.items()}
        names = _argument_names(fn, len(args))
        originals = [(name, t) for name, arg in zip(names, args) for t in _tensors_in(arg)]
        originals += [(name, t) for name, arg in kwargs.items() for t in _tensors_in(arg)]
        saved = [t.detach().clone() for _, t in originals]
        watch = _Watch(self.exercise.forbidden)
        state = TorchState.capture()
        session = REMOTE.get()
        try:
            with self._remote_settings(session) if session is not None else self._safety_net(watch, what):
                result = fn(*args, **kwargs)
        except Failure:
            raise
        except CheckTimeout:
            self.fail(
                "timeout",
                f"{what} ran for more than {self.timeout:g} s and was stopped.",
            )
        except ForbiddenCall as call:
            self.fail(
                "forbidden_api",
                f"{what} called {call.name} (directly, or through a module such as nn.Embedding that uses it), which this exercise asks you to do without.",
            )
        except ReferenceReached as reached:  # in a graded kernel (locally, _ReferenceWatch says it)
            self.fail("uses_reference", ran_reference(what, str(reached)))
        except NotImplementedError as error:
            stub = _stub_that_raised(error)
            if stub is not None:
                where = "" if stub in what else f" It calls `{stub}`, which is the one not implemented yet: that is the cell to fill in first."
                self.fail("not_implemented", f"{what} is not implemented yet.{where}")
            self.fail("raised", f"{what} raised {_last_line(error)}")
        except SystemExit as error:
            self.fail("raised", f"{what} called exit() ({_last_line(error)}), which would end the whole program.", fix="Return the result instead of calling exit() or sys.exit().")
        except Exception as error:
            if _is_out_of_memory(error):
                self.fail(
                    "out_of_memory",
                    f"{what} tried to allocate more than {self.memory_mb} MB ({_last_line(error)}), far more than the task needs.",
                )
            self.fail("raised", f"{what} raised {_last_line(error)}")
        finally:
            changed = TorchState.capture().changes_since(state) + (session.take_changed() if session is not None else [])
            state.restore()
        if changed:
            self.fail(
                "changed_global_state",
                f"{what} changed torch's global settings ({'; '.join(changed)}). We put them back.",
            )
        if session is not None:
            watch.seen |= session.take_seen()
        self.calls_seen |= watch.seen
        for (name, live), snapshot in zip(originals, saved):
            if not live.is_meta and (live.shape != snapshot.shape or not torch.equal(live, snapshot)):
                self.fail(
                    "mutated_input",
                    f"{what} changed its input `{name}` in place (an `+=`, a `.mul_()`, an assignment into it...).",
                )
        return result

    def _safety_net(self, watch: _Watch, what: str) -> contextlib.ExitStack:
        """Around student code in this process: a time limit, a memory cap, the torch functions
        it calls watched, the course's reference tripwired."""
        stack = contextlib.ExitStack()
        stack.enter_context(time_limit(self.timeout))
        stack.enter_context(memory_cap(self.memory_mb, self.device))
        stack.enter_context(watch)
        if self.factories_on_meta:
            stack.enter_context(_FactoriesOnMeta())
        elif self.copies_off_meta:
            stack.enter_context(_CopiesOffMeta())
        stack.enter_context(_ReferenceWatch(what))  # innermost: only the student's own call is watched
        return stack

    @contextmanager
    def _remote_settings(self, session: Any) -> Iterator[None]:
        """Student code runs in a graded kernel: the same net is put up there, for every call
        into it that this block makes (helpers.grading.serve.run_student_code)."""
        forbidden = [_torch_path(f) for f in self.exercise.forbidden]
        with session.settings_for(self.timeout, self.memory_mb, str(self.device), forbidden, self.factories_on_meta, self.copies_off_meta):
            yield

    def build(self, cls: Any, *args: Any, **kwargs: Any) -> torch.nn.Module:
        """Instantiate a student's nn.Module class and move it to the check device."""
        if isinstance(cls, torch.nn.Module):
            self.fail("wrong_type", f"pass the class `{type(cls).__name__}` to check(), not an instance of it.")
        if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
            self.fail("wrong_type", f"`{self.name}` should be a subclass of torch.nn.Module, got {type(cls).__name__}.")
        module = self.call(cls, *args, what=f"`{self.name}(...)`", **kwargs)
        module = self.call(module.to, self.device, what=f"`{self.name}.to(device)`")
        self.built.append(module)
        return module

    # ---- comparing -----------------------------------------------------
    def expect(
        self,
        out: Any,
        expected: torch.Tensor,
        *,
        what: str = "the output",
        mistakes: Callable[[], dict[str, Any]] | None = None,
        rtol: float | None = None,
        atol: float | None = None,
        hint: str = "",
        fix: str = "",
    ) -> None:
        """Compare with the reference; on a mismatch, name the known mistake that
        reproduces `out`, else the first generic probe that fails."""
        if not isinstance(out, torch.Tensor):
            forgot = " Did the function forget to `return` its result?" if out is None else ""
            self.fail("wrong_type", f"{what} should be a torch.Tensor, got {type(out).__name__}.{forgot}")
        values_ok = close(out, expected, rtol, atol)
        if values_ok and out.dtype == expected.dtype and out.device == expected.device:
            return
        self._no_nan(out, expected, what)  # first: a NaN is the finding, whatever else differs (an expected -inf hides none)
        if not values_ok and mistakes is not None:
            for code, wrong in mistakes().items():  # a mistake may have several faces
                candidates = wrong if isinstance(wrong, (list, tuple)) else [wrong]
                if any(isinstance(c, torch.Tensor) and close(out, c, rtol, atol) for c in candidates):
                    self.fail(code, self.explain(code))
        if out.shape != expected.shape:
            self.fail("wrong_shape", f"{what} has shape {tuple(out.shape)}; expected {tuple(expected.shape)}.", hint=hint, fix=fix)
        if out.dtype != expected.dtype:
            self.fail("wrong_dtype", f"{what} has dtype {out.dtype}; expected {expected.dtype}.")
        if out.device != expected.device:
            self.fail(
                "wrong_device",
                f"{what} is on {out.device}, but the inputs were on {expected.device}.",
            )
        # inf where the reference is finite (an expected -inf, a mask, hides none); after the catalogue: a mask on the wrong side is a known mistake.
        got, want = out.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
        bad = got.isinf() & want.isfinite()
        if bad.any():
            where = [int(i) for i in bad.nonzero()[0]]
            self.fail("nan_or_inf", f"{what} holds inf at index {where} (and {int(bad.sum()) - 1} more entries), where the reference has a finite number.")
        self.fail("wrong_values", describe_difference(out, expected, what, rtol, atol), hint=hint, fix=fix)

    def _no_nan(self, out: torch.Tensor, expected: torch.Tensor, what: str) -> None:
        """NaN wherever the reference has none is nan_or_inf, before anything else: a NaN
        beside an expected -inf (a mask made as 0 * -inf) or in a result of the wrong shape too."""
        if out.is_meta or expected.is_meta or not (out.is_floating_point() or out.is_complex()):
            return
        got, want = out.detach().cpu(), expected.detach().cpu()
        bad = got.isnan() & ~want.isnan() if got.shape == want.shape else got.isnan() if not want.isnan().any() else torch.zeros(())
        if bad.any():
            where = [int(i) for i in bad.nonzero()[0]]
            nearby = f", where the reference has {want[tuple(where)].item():.4g}" if got.shape == want.shape else ""
            self.fail("nan_or_inf", f"{what} holds NaN at index {where} (and {int(bad.sum()) - 1} more entries){nearby}.")

    def known_mistakes(self, *args: Any, index: int | None = None, **kwargs: Any) -> Callable[[], dict[str, list[Any]]]:
        """The exercise's catalogue of mistakes, run on these inputs when `expect` asks
        (only for a wrong output). Each mistake gives one result or a list of them
        (its faces); `index` picks one tensor of each (q_rot of (q_rot, k_rot))."""

        def run() -> dict[str, list[Any]]:
            if self.accelerator_pass:
                return {}
            found = {}
            for code, mistake in self.exercise.mistakes.items():
                result = _quietly(mistake, *args, **kwargs)
                faces = result if isinstance(result, list) else [result]
                found[code] = [face if index is None else face[index] for face in faces if face is not None]
            return found

        return run

    def against_reference(self, out: Any, *args: Any, what: str = "the output", hint: str = "", **kwargs: Any) -> None:
        """The usual probe for a function exercise: reference and mistakes see the same inputs."""
        expected = self.exercise.reference(*args, **kwargs)
        self.expect(out, expected, what=what, mistakes=self.known_mistakes(*args, **kwargs), hint=hint)

    def explain(self, code: str) -> str:
        """The catalogue entry's docstring is the message a student reads: its first part."""
        return advice(self.exercise, code)[0]

    def device_pass(self, run: Callable[[torch.device], Any], code: str = "wrong_device", message: str = "") -> None:
        """Catch, on a CPU-only machine, the code that breaks on a GPU: a tensor
        made without `device=` (torch.arange(T), torch.zeros(...)) lands on the
        CPU whatever the input's device. Two runs of `run(device)`:

        1. every input on the meta device: CPU-made tensors mix devices and
           fail, or come back as a CPU result;
        2. inputs on the CPU, while factories called without `device=` make
           meta tensors (`_FactoriesOnMeta`): the output, or a device clash,
           betrays them even where run 1 could not copy out of meta.
        Correct code that meta cannot run (.item(), .tolist()) gets no verdict."""
        if self.accelerator_pass:
            return  # the CPU pass ran it; this pass runs on the real device
        _warm_up_meta()
        message = message or f"`{self.name}` makes or moves a tensor to the CPU whatever its input's device (a torch.arange or torch.zeros without device=, or a .cpu()); on a GPU this fails."
        for inputs_on, suspect in ((torch.device("meta"), "cpu"), (torch.device("cpu"), "meta")):
            self.factories_on_meta = suspect == "meta"  # read by call(): only student code is affected
            self.copies_off_meta = suspect == "cpu"
            try:
                out = run(inputs_on)
            except Failure as failure:
                clash = "device" in failure.message.lower() and "copy out of meta" not in failure.message
                if failure.code == "raised" and clash:
                    self.fail(code, message)
                continue  # no meta kernel for some correct code: no verdict from this run
            finally:
                self.factories_on_meta = self.copies_off_meta = False
            outs = out if isinstance(out, (tuple, list)) else [out]
            if any(isinstance(t, torch.Tensor) and t.device.type == suspect for t in outs):
                self.fail(code, message)


@functools.cache
def _warm_up_meta() -> None:
    """The first meta-device ops in a process (a meta tensor times a Python
    float, a layer_norm) import torch._dynamo: seconds. Paid once, here, outside
    the student's time limit, so that it never counts against their code."""
    x = torch.zeros(2, 3, device="meta")
    torch.nn.functional.layer_norm(x * 1.0 + x, (3,))


class _FactoriesOnMeta(TorchFunctionMode):
    """Tensors made without `device=` (outside a module's __init__, whose
    buffers .to() moves later) come out on the meta device, standing for "the
    CPU" while the inputs on the CPU stand for "the GPU". As on a real GPU, a
    CPU scalar mixes with anything (0-dim results stay put) and a CPU index
    tensor may index a GPU tensor (`table[torch.arange(T)]` is fine there, so
    it is fine here: the index gets its real values back)."""

    FACTORIES = {
        "zeros",
        "ones",
        "empty",
        "full",
        "arange",
        "eye",
        "linspace",
        "logspace",
        "rand",
        "randn",
        "randint",
        "randperm",
        "tensor",
        "as_tensor",
    }

    def __init__(self):
        super().__init__()
        self.real: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(meta) -> (meta, the real tensor)

    MAY_MIX = {"to", "copy_", "__get__", "__set__"}  # moving data between devices is allowed, as on a GPU

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("__getitem__", "__setitem__") and len(args) > 1 and isinstance(args[0], torch.Tensor) and not args[0].is_meta:
            args = (args[0], self._real_index(args[1]), *args[2:])
        elif name not in self.MAY_MIX:
            tensors = [t for t in _tensors_in([args, kwargs]) if t.dim() > 0]
            if any(t.is_meta for t in tensors) and not all(t.is_meta for t in tensors):
                raise RuntimeError(f"Expected all tensors to be on the same device, but {name} got a tensor made on the CPU without device= and one on the input's device")
        result = func(*args, **kwargs)
        if name in self.FACTORIES and kwargs.get("device") is None and isinstance(result, torch.Tensor) and result.dim() > 0 and not _in_module_init():
            meta = result.to("meta")
            self.real[id(meta)] = (meta, result)
            return meta
        return result

    def _real_index(self, index: Any) -> Any:
        if isinstance(index, tuple):
            return tuple(self._real_index(i) for i in index)
        if isinstance(index, torch.Tensor) and index.is_meta and self.real.get(id(index), (None,))[0] is index:
            return self.real[id(index)][1]
        return index


class _CopiesOffMeta(TorchFunctionMode):
    """While the inputs stand on the meta device for "the GPU", `.cpu()` or `.to("cpu")` in student code
    moves a tensor to the CPU, as it would from a GPU: it gets zeros of its shape there (meta holds no
    data to copy), so a result left on the CPU shows, and one moved back with .to(x.device) does not."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if source is not None and source.is_meta:
            target = kwargs.get("device", args[1] if len(args) > 1 and isinstance(args[1], (str, torch.device)) else None)
            if name == "cpu" or (name == "to" and target is not None and torch.device(target).type == "cpu"):
                return torch.zeros(source.shape, dtype=kwargs.get("dtype", source.dtype), device="cpu").requires_grad_(source.requires_grad and source.is_floating_point())
        return func(*args, **kwargs)


def _in_module_init() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), torch.nn.Module):
            return True
        frame = frame.f_back
    return False


def _quietly(mistake: Callable, *args: Any, **kwargs: Any) -> Any:
    """A known mistake run on inputs it cannot handle (a transposed table indexed
    past its end) simply is not the student's mistake: None."""
    try:
        return mistake(*args, **kwargs)
    except Exception:
        return None


def describe_difference(out: torch.Tensor, expected: torch.Tensor, what: str, rtol: float | None = None, atol: float | torch.Tensor | None = None) -> str:
    a = out.detach().to("cpu", torch.float64)
    b = expected.detach().to("cpu", torch.float64)
    error = torch.where(a == b, 0.0, (a - b).abs()).nan_to_num(nan=float("inf"))  # equal infinities (a mask) are no error
    default_rtol, default_atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    rtol, atol = default_rtol if rtol is None else rtol, default_atol if atol is None else atol
    bound = (atol.detach().to("cpu", torch.float64) if isinstance(atol, torch.Tensor) else atol) + rtol * b.abs()
    excess = error - bound  # the worst entry is the one furthest past its own tolerance
    worst = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
    wrong = int((error > bound).sum())
    return f"{what} differs from the reference in {wrong} of {error.numel()} entries; the worst is at index {list(worst)}: you have {a[worst].item():.6g}, expected {b[worst].item():.6g}."


def _argument_names(fn: Callable, count: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return (params + [f"argument {i}" for i in range(len(params), count)])[:count]


def advice(exercise: registry.Exercise, code: str) -> tuple[str, str, str]:
    """(message, hint, fix) for a code: from the exercise's own mistake, whose
    docstring is the message, then a "Hint:" and a "Fix:" paragraph; else the
    code's one-line meaning and its generic advice."""
    doc = inspect.getdoc(exercise.mistakes[code]) if code in exercise.mistakes else None
    hint, fix = registry.GENERIC_ADVICE.get(code, ("", ""))
    if not doc:
        return registry.DIAGNOSES[code], hint, fix
    parts = dict(re.findall(r"(?ms)^(Hint|Fix):\s*(.*?)(?=^(?:Hint|Fix):|\Z)", doc))
    message = re.split(r"(?m)^(?:Hint|Fix):", doc)[0]
    flat = lambda text: (lambda words: words[:1].upper() + words[1:])(" ".join(text.split()))
    return flat(message), flat(parts.get("Hint", hint)), flat(parts.get("Fix", fix))


# --------------------------------------------------------------------------
# The public entry points
# --------------------------------------------------------------------------


GRADED_OUTSIDE = "This notebook is being graded: the grader checks `{}` itself, outside this kernel, once every cell has run."


def check(exercise_id: str, submission: Any) -> CheckResult:
    """Check a student's function or nn.Module class against exercise `exercise_id`.

    Never raises because of the submission; an unknown exercise id is the
    caller's mistake and raises KeyError with the close matches."""
    name = getattr(submission, "__name__", type(submission).__name__)
    if not exercises.AVAILABLE:  # a kernel being graded: the grader checks, outside it
        return CheckResult(exercise_id, False, "not_implemented", GRADED_OUTSIDE.format(exercise_id), 0, 0, name)
    exercise = exercises.get(exercise_id)
    device = check_device()
    probe = Probe(exercise, name, torch.device("cpu"))  # first on the CPU: the same diagnosis on every machine
    before = TorchState.capture()
    try:
        what = "a function" if exercise.kind == "function" else "an nn.Module class"
        if submission is None or not callable(submission):
            raise Failure("wrong_type", f"check() needs {what} for {exercise_id!r}, got {type(submission).__name__}.")
        if exercise.kind == "function" and inspect.isclass(submission):
            raise Failure("wrong_type", f"check() needs {what} for {exercise_id!r}, got the class {name}: pass your own function.")
        built_on = [c for c in getattr(submission, "__mro__", ()) if c.__module__ == "helpers.reference"]
        if submission in _reference_functions() or built_on:  # the reference itself (solution_or_reference's), or a subclass
            reference = f"helpers.reference.{built_on[0].__name__}" if built_on else _reference_functions()[submission]
            raise Failure("uses_reference", f"`{name}` is, or is built on, the course's own reference `{reference}`, not code of your own.")
        exercise.check(submission, probe)
        if device.type != "cpu":
            on_device(exercise, submission, name, device)
        code, message, hint, fix = None, "All probes passed: shapes, dtypes, devices, values and properties.", "", ""
    except Failure as failure:
        code, message, hint, fix = failure.code, failure.message, failure.hint, failure.fix
    except CheckTimeout:  # fired just after the student's call returned
        code, message, hint, fix = "timeout", f"`{name}` ran past the {probe.timeout:g} s limit.", "", ""
    except KeyboardInterrupt:
        before.restore()
        raise
    except BaseException as error:  # a submission that broke the check itself
        said = f"{type(error).__name__}: {error}"
        code, message, hint, fix = "raised", broken_gpu(said) if gpu_is_broken(said) else f"checking `{name}` failed with {_last_line(error)}", "", ""
    before.restore()  # e.g. the RNG draws of a module's dropout: the notebook's seeds stay reproducible
    if code is None:
        result = CheckResult(exercise_id, True, None, " ".join([message, *probe.notes]), exercise.points, exercise.points, name)
    else:
        _, default_hint, default_fix = advice(exercise, code)
        result = CheckResult(exercise_id, False, code, message, 0, exercise.points, name, hint or default_hint, fix or default_fix, probe.also)
    if REMOTE.get() is None:  # the grader's checks are no student's progress
        tracking.record(result)
    return result


def on_device(exercise: registry.Exercise, submission: Any, name: str, device: torch.device) -> None:
    """The check again, its values compared on `device` (a GPU), after it passed on the CPU.
    Whatever fails here fails only on this device: said so, a device clash as wrong_device."""
    try:
        exercise.check(submission, Probe(exercise, name, device))
    except Failure as failure:
        if failure.code == "raised" and gpu_is_broken(failure.message):
            raise Failure("raised", broken_gpu(failure.message)) from None
        clash = failure.code == "raised" and "device" in failure.message.lower()
        code = "wrong_device" if clash else failure.code
        said = f"Your code passes every probe on the CPU, but not on {device} (this machine's GPU): {failure.message}"
        raise Failure(code, said, "" if clash else failure.hint, "" if clash else failure.fix) from None


def gpu_is_broken(said: str) -> bool:
    return any(sign in said for sign in ("AcceleratorError", "device-side assert", "CUDA error"))


def broken_gpu(said: str) -> str:
    return (
        f"The GPU reported an error ({said.strip().splitlines()[-1][:300]}). After a device-side assert (usually an index out of range, "
        "in this cell or an earlier one) CUDA refuses all further work in this process: restart the kernel "
        "(Kernel → Restart), run the cells again, and look for the index that is out of range."
    )


def solution_or_reference(exercise_id: str, submission: Any) -> Any:
    """For the cells that *use* an exercise: the student's version once it
    passes, else the reference, clearly labelled, so the chapter still runs."""
    if not exercises.AVAILABLE:  # a kernel being graded: the student's own, else the reference's stand-in, which raises
        from helpers import reference

        return submission if callable(submission) else getattr(reference, exercise_id)
    exercise = exercises.get(exercise_id)
    if check(exercise_id, submission).passed:
        return submission
    print(f"(using the course's reference `{exercise_id}`: yours does not pass its check yet)")
    return exercise.reference
