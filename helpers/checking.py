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
import ctypes
import functools
import html
import inspect
import os
import resource
import signal
import sys
import threading
import traceback
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from helpers import exercises, registry

TIMEOUT_ENV = "COURSE_CHECK_TIMEOUT"  # seconds per call into student code
MEMORY_ENV = "COURSE_CHECK_MEMORY_MB"  # extra memory student code may take
DEVICE_ENV = "COURSE_DEVICE"  # force "cpu", "cuda", "cuda:1", "mps", ...


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
    exercise: str
    passed: bool
    diagnosis: str | None
    message: str
    score: float
    max_score: float
    submission_name: str = ""

    def __bool__(self) -> bool:
        return self.passed

    def _headline(self) -> str:
        who = f" ({self.submission_name})" if self.submission_name not in ("", self.exercise) else ""
        if self.passed:
            return f"✔ {self.exercise}{who}: passed, {self.score:g}/{self.max_score:g} points"
        return f"✘ {self.exercise}{who}: {self.diagnosis}, {self.score:g}/{self.max_score:g} points"

    def __str__(self) -> str:
        return f"{self._headline()}\n  {self.message}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour, background = ("#1a7f37", "#dafbe1") if self.passed else ("#cf222e", "#ffebe9")
        css_class = "check-pass" if self.passed else "check-fail"
        return (
            f'<div class="course-check {css_class}" data-diagnosis="{self.diagnosis or ""}" '
            f'style="border-left:6px solid {colour};background:{background};'
            f'padding:8px 12px;margin:4px 0;color:#1f2328;font-family:sans-serif">'
            f"<b>{html.escape(self._headline())}</b><br>{html.escape(self.message)}</div>"
        )

    def as_dict(self) -> dict[str, Any]:
        keys = ("exercise", "passed", "score", "max_score", "diagnosis", "message")
        return {key: getattr(self, key) for key in keys}


class Failure(Exception):
    """Raised by a probe: the first one that fails writes the message."""

    def __init__(self, code: str, message: str):
        if code not in registry.DIAGNOSES:
            raise ValueError(f"unknown diagnosis code {code!r}")
        super().__init__(message)
        self.code, self.message = code, message


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
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
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
            signal.setitimer(signal.ITIMER_REAL, RETRY)  # until the finally below disarms it
            if _importing(frame) or not _student_code(frame):  # never cut an import or our own code in half
                return
            expired = True
            sys.settrace(keep_stopping)
            while frame is not None:  # the frames already running, too
                frame.f_trace = keep_stopping
                frame = frame.f_back
            raise CheckTimeout

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
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


def _qualified_name(func: Callable) -> str:
    module = getattr(func, "__module__", None) or "torch"
    return f"{module.replace('torch.nn.functional', 'F')}.{getattr(func, '__name__', func)}"


def _is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("not enough memory" in text or "can't allocate memory" in text)


def _raised_by_stub(error: NotImplementedError) -> bool:
    """A student's stub, not torch saying "this op has no meta kernel"."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and not frames[-1].filename.startswith(_NOT_STUDENT_CODE[0])


def _last_line(error: BaseException) -> str:
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


def close(out: torch.Tensor, expected: torch.Tensor, rtol: float | None = None, atol: float | None = None) -> bool:
    """Same shape and values within the expected dtype's tolerance (any dtype, any device)."""
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape or out.is_meta or expected.is_meta:
        return False
    default_rtol, default_atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    a = out.detach().to("cpu", torch.float64)
    b = expected.detach().to("cpu", torch.float64)
    return bool(
        torch.allclose(
            a,
            b,
            rtol=default_rtol if rtol is None else rtol,
            atol=default_atol if atol is None else atol,
            equal_nan=True,
        )
    )


class Probe:
    """Handed to an exercise's `run`; every probe method raises `Failure`."""

    def __init__(self, exercise: registry.Exercise, submission_name: str):
        self.exercise = exercise
        self.name = submission_name
        self.device = check_device()
        self.timeout = float(os.environ.get(TIMEOUT_ENV, 10))
        self.memory_mb = int(os.environ.get(MEMORY_ENV, 4096))
        # Inputs the student did not choose, yet the same on every run.
        self.generator = torch.Generator().manual_seed(zlib.crc32(exercise.id.encode()))
        self.calls_seen: set[Callable] = set()
        self.factories_on_meta = False  # set during device_pass's second run

    # ---- failing -------------------------------------------------------
    def fail(self, code: str, message: str) -> None:
        raise Failure(code, message)

    # ---- inputs --------------------------------------------------------
    def randn(self, *shape: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, dtype=dtype).to(device or self.device)

    def randint(self, high: int, *shape: int, device: torch.device | str | None = None) -> torch.Tensor:
        return torch.randint(high, shape, generator=self.generator).to(device or self.device)

    # ---- calling student code -----------------------------------------
    def call(self, fn: Callable, *args: Any, what: str | None = None, **kwargs: Any) -> Any:
        """Call student code safely. The student's code gets clones of the
        tensors; if it changes them in place we say which argument."""
        what = what or f"`{self.name}`"
        names = _argument_names(fn, len(args))
        originals = [(name, t) for name, arg in zip(names, args) for t in _tensors_in(arg)]
        originals += [(name, t) for name, arg in kwargs.items() for t in _tensors_in(arg)]
        saved = [t.detach().clone() for _, t in originals]
        watch = _Watch(self.exercise.forbidden)
        state = TorchState.capture()
        try:
            with (
                time_limit(self.timeout),
                memory_cap(self.memory_mb, self.device),
                watch,
                _FactoriesOnMeta() if self.factories_on_meta else contextlib.nullcontext(),
            ):
                result = fn(*args, **kwargs)
        except Failure:
            raise
        except CheckTimeout:
            self.fail(
                "timeout",
                f"{what} ran for more than {self.timeout:g} s and was stopped. Look for a loop that never ends (a `while` whose condition never changes?).",
            )
        except ForbiddenCall as call:
            self.fail(
                "forbidden_api",
                f"{what} called {call.name} (directly, or through a module such as nn.Embedding that uses it), which this exercise asks you to do without: build the result yourself with indexing and tensor operations.",
            )
        except NotImplementedError as error:
            if _raised_by_stub(error):
                self.fail(
                    "not_implemented",
                    f"{what} is not implemented yet: replace `raise NotImplementedError` with your code, run that cell, then run this check again.",
                )
            self.fail("raised", f"{what} raised {_last_line(error)}")
        except SystemExit as error:
            self.fail("raised", f"{what} called exit() ({_last_line(error)}): return a result instead of ending the program.")
        except Exception as error:
            if _is_out_of_memory(error):
                self.fail(
                    "out_of_memory",
                    f"{what} tried to allocate more than {self.memory_mb} MB ({_last_line(error)}). The task needs far less: build only the tensors you need (a one-hot of the whole batch at most).",
                )
            self.fail("raised", f"{what} raised {_last_line(error)}")
        finally:
            changed = TorchState.capture().changes_since(state)
            state.restore()
        if changed:
            self.fail(
                "changed_global_state",
                f"{what} changed torch's global settings ({'; '.join(changed)}). We put them back; change them locally (e.g. `with torch.no_grad():`) or not at all.",
            )
        self.calls_seen |= watch.seen
        for (name, live), snapshot in zip(originals, saved):
            if not live.is_meta and (live.shape != snapshot.shape or not torch.equal(live, snapshot)):
                self.fail(
                    "mutated_input",
                    f"{what} changed its input `{name}` in place (an `+=`, a `.mul_()`, an assignment into it...). Leave inputs untouched and return a new tensor.",
                )
        return result

    def build(self, cls: Any, *args: Any, **kwargs: Any) -> torch.nn.Module:
        """Instantiate a student's nn.Module class and move it to the check device."""
        if isinstance(cls, torch.nn.Module):
            self.fail("wrong_type", f"pass the class `{type(cls).__name__}` to check(), not an instance of it.")
        if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
            self.fail("wrong_type", f"`{self.name}` should be a subclass of torch.nn.Module, got {type(cls).__name__}.")
        module = self.call(cls, *args, what=f"`{self.name}(...)`", **kwargs)
        return self.call(module.to, self.device, what=f"`{self.name}.to(device)`")

    def find_tensor(self, module: torch.nn.Module, shape: tuple[int, ...], what: str) -> tuple[str, torch.Tensor]:
        """A student's parameter or buffer of the given shape, found by shape, not
        by name (students name things as they like). Fails if there is none."""
        tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
        for name, tensor in tensors.items():
            if tuple(tensor.shape) == tuple(shape):
                return name, tensor
        found = ", ".join(f"{n} {tuple(t.shape)}" for n, t in tensors.items()) or "none"
        self.fail(
            "wrong_shape",
            f"`{self.name}` has no parameter or buffer of shape {tuple(shape)} for {what} (it has: {found}).",
        )

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
    ) -> None:
        """Compare with the reference; on a mismatch, name the known mistake that
        reproduces `out`, else the first generic probe that fails."""
        if not isinstance(out, torch.Tensor):
            forgot = " Did the function forget to `return` its result?" if out is None else ""
            self.fail("wrong_type", f"{what} should be a torch.Tensor, got {type(out).__name__}.{forgot}")
        values_ok = close(out, expected, rtol, atol)
        if values_ok and out.dtype == expected.dtype and out.device == expected.device:
            return
        if not values_ok and mistakes is not None:
            for code, wrong in mistakes().items():  # a mistake may have several faces
                candidates = wrong if isinstance(wrong, (list, tuple)) else [wrong]
                if any(isinstance(c, torch.Tensor) and close(out, c, rtol, atol) for c in candidates):
                    self.fail(code, self.explain(code))
        if out.shape != expected.shape:
            self.fail("wrong_shape", f"{what} has shape {tuple(out.shape)}; expected {tuple(expected.shape)}. {hint}".strip())
        if out.dtype != expected.dtype:
            self.fail("wrong_dtype", f"{what} has dtype {out.dtype}; expected {expected.dtype}.")
        if out.device != expected.device:
            self.fail(
                "wrong_device",
                f"{what} is on {out.device}, but the inputs were on {expected.device}: create new tensors with `device=` taken from an input.",
            )
        finite = torch.isfinite(out.detach().to("cpu", torch.float64))
        if not finite.all() and torch.isfinite(expected.detach().to("cpu", torch.float64)).all():
            where = tuple(int(i) for i in (~finite).nonzero()[0])
            self.fail(
                "nan_or_inf",
                f"{what} holds NaN or inf (first at index {list(where)}). Look for a division by zero, a log/pow of a negative number, or entries never filled (torch.empty).",
            )
        self.fail("wrong_values", f"{describe_difference(out, expected, what)} {hint}".strip())

    def known_mistakes(self, *args: Any, index: int | None = None, **kwargs: Any) -> Callable[[], dict[str, list[Any]]]:
        """The exercise's catalogue of mistakes, run on these inputs when `expect` asks
        (only for a wrong output). Each mistake gives one result or a list of them
        (its faces); `index` picks one tensor of each (q_rot of (q_rot, k_rot))."""

        def run() -> dict[str, list[Any]]:
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
        """The catalogue entry's docstring is the message a student reads."""
        doc = inspect.getdoc(self.exercise.mistakes.get(code)) if code in self.exercise.mistakes else None
        return " ".join((doc or registry.DIAGNOSES[code]).split())

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
        _warm_up_meta()
        message = (
            message
            or f"`{self.name}` creates a tensor on the CPU whatever its input's device (e.g. `torch.arange(T)` or `torch.zeros(...)` without `device=x.device`); on a GPU this fails. Make new tensors on the input's device."
        )
        for inputs_on, suspect in ((torch.device("meta"), "cpu"), (torch.device("cpu"), "meta")):
            self.factories_on_meta = suspect == "meta"  # read by call(): only student code is affected
            try:
                out = run(inputs_on)
            except Failure as failure:
                clash = "device" in failure.message.lower() and "copy out of meta" not in failure.message
                if failure.code == "raised" and clash:
                    self.fail(code, message)
                continue  # no meta kernel for some correct code: no verdict from this run
            finally:
                self.factories_on_meta = False
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


def describe_difference(out: torch.Tensor, expected: torch.Tensor, what: str) -> str:
    a = out.detach().to("cpu", torch.float64)
    b = expected.detach().to("cpu", torch.float64)
    error = torch.where(a == b, 0.0, (a - b).abs()).nan_to_num(nan=float("inf"))  # equal infinities (a mask) are no error
    worst = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
    rtol, atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    wrong = int((error > atol + rtol * b.abs()).sum())
    return f"{what} differs from the reference in {wrong} of {error.numel()} entries; the worst is at index {list(worst)}: you have {a[worst].item():.6g}, expected {b[worst].item():.6g}."


def _argument_names(fn: Callable, count: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return (params + [f"argument {i}" for i in range(len(params), count)])[:count]


# --------------------------------------------------------------------------
# The public entry points
# --------------------------------------------------------------------------


def check(exercise_id: str, submission: Any) -> CheckResult:
    """Check a student's function or nn.Module class against exercise `exercise_id`.

    Never raises because of the submission; an unknown exercise id is the
    caller's mistake and raises KeyError with the close matches."""
    exercise = exercises.get(exercise_id)
    name = getattr(submission, "__name__", type(submission).__name__)
    probe = Probe(exercise, name)
    before = TorchState.capture()
    try:
        what = "a function" if exercise.kind == "function" else "an nn.Module class"
        if submission is None or not callable(submission):
            raise Failure("wrong_type", f"check() needs {what} for {exercise_id!r}, got {type(submission).__name__}.")
        if exercise.kind == "function" and inspect.isclass(submission):
            raise Failure("wrong_type", f"check() needs {what} for {exercise_id!r}, got the class {name}: pass your own function.")
        exercise.check(submission, probe)
        code, message = None, "All probes passed: shapes, dtypes, devices, values and properties."
    except Failure as failure:
        code, message = failure.code, failure.message
    except CheckTimeout:  # fired just after the student's call returned
        code, message = "timeout", f"`{name}` ran past the {probe.timeout:g} s limit."
    except KeyboardInterrupt:
        before.restore()
        raise
    except BaseException as error:  # a submission that broke the check itself
        code, message = "raised", f"checking `{name}` failed with {_last_line(error)}"
    before.restore()  # e.g. the RNG draws of a module's dropout: the notebook's seeds stay reproducible
    points = exercise.points if code is None else 0
    return CheckResult(exercise_id, code is None, code, message, points, exercise.points, name)


def solution_or_reference(exercise_id: str, submission: Any) -> Any:
    """For the cells that *use* an exercise: the student's version once it
    passes, else the reference, clearly labelled, so the chapter still runs."""
    exercise = exercises.get(exercise_id)
    if check(exercise_id, submission).passed:
        return submission
    print(f"(using the course's reference `{exercise_id}`: yours does not pass its check yet)")
    return exercise.reference
