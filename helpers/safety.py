"""The safety net around student code: what a check puts up around every call into it.

* `time_limit` stops it after a number of seconds (a timer signal, or a watchdog thread);
* `memory_cap` caps what it may allocate on the CPU;
* `Watch` sees the torch functions it calls and refuses the forbidden ones;
* `ReferenceWatch` tripwires the course's reference, so using it is noticed;
* `FactoriesOnMeta` and `CopiesOffMeta` let a CPU-only machine see code that would break on a GPU;
* `TorchState` captures torch's global settings, to put them back afterwards.

`Failure` is what every probe raises; the BaseExceptions here (`CheckTimeout`, `ForbiddenCall`,
`ReferenceReached`) are raised inside student code, so that its `except Exception:` cannot swallow them.
`helpers.calls` composes these parts into the one net around every call. This module imports only
`helpers.registry` (and `helpers.reference`, to tripwire it).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
import os
import resource
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

import torch
from torch.overrides import TorchFunctionMode

from helpers import registry

# The signature of a TorchFunctionMode's __torch_function__, short: three modes below implement it.
Function = Callable[..., Any]
Types = tuple[type, ...]
Args = tuple[Any, ...]
Kwargs = dict[str, Any] | None


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
        return [
            f"{n} {getattr(other, n)} -> {getattr(self, n)}" for n in names if getattr(self, n) != getattr(other, n)
        ]

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

        def keep_stopping(frame: FrameType | None, event: str, arg: Any) -> Any:
            """After the deadline, raise again at the next line of student code:
            a CheckTimeout caught by `except:` is raised anew in the handler's
            body, which no `except` of the same `try` covers. (CPython drops
            a tracer that raises; the next alarm installs it again.)"""
            if expired and _student_code(frame):
                raise CheckTimeout
            return keep_stopping

        def on_alarm(signum: int, frame: FrameType | None) -> None:
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

        def watchdog() -> None:
            if done.wait(seconds):
                return
            while not done.wait(RETRY):  # again and again: a bare `except:` may swallow one
                with lock:  # never after the block is left
                    frame = sys._current_frames().get(target)
                    if not done.is_set() and not _importing(frame) and _student_code(frame):
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(
                            ctypes.c_ulong(target), ctypes.py_object(CheckTimeout)
                        )

        threading.Thread(target=watchdog, daemon=True).start()
        try:
            yield
        finally:
            with lock:
                done.set()
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(target), None
                )  # one still pending must not fire later


RETRY = 0.02  # seconds between two CheckTimeouts once the limit has passed
TORCH_FILES = os.path.dirname(torch.__file__)
_NOT_STUDENT_CODE = (
    TORCH_FILES,
    os.path.dirname(contextlib.__file__) + os.sep + "contextlib",
    # the framework's own bookkeeping around a call into student code (this module, the net, Probe.call, check)
    *(os.path.join(os.path.dirname(__file__), name) for name in ("safety.py", "calls.py", "probe.py", "checking.py")),
)


class ReferenceReached(BaseException):
    """Raised by a tripwired reference function (and by `ReferenceWatch` once the block is left, with the
    name of the first it caught): BaseException, so `except Exception:` cannot hide it."""

    def __init__(self, name: str = ""):
        super().__init__(name)
        self.name = name


def _reference_functions() -> dict[Any, str]:
    """Every function of helpers.reference, module-level and methods: function -> its name."""
    from helpers import reference

    found = {}
    for name, value in vars(reference).items():
        if inspect.isfunction(value) and value.__module__ == reference.__name__:
            found[value] = f"helpers.reference.{name}"
        elif inspect.isclass(value) and value.__module__ == reference.__name__:
            found.update(
                {f: f"helpers.reference.{name}.{attr}" for attr, f in vars(value).items() if inspect.isfunction(f)}
            )
    return {
        f: name for f, name in found.items() if not f.__code__.co_freevars
    }  # a tripwire has no closure to match (super()'s)


def reference_name(value: Any) -> str | None:
    """`helpers.reference.NAME` where `value` is one of the reference's functions, else None."""
    return _reference_functions().get(value)


_REACHED: list[str] = []  # the reference functions a tripwire caught, in order


def _tripwire(*args: Any, **kwargs: Any) -> None:
    """Stands in for a reference function while student code runs. It runs with the
    reference module's globals, so it reaches this module by import, not by name."""
    safety = __import__("helpers.safety", fromlist=["_REACHED"])
    safety._REACHED.append(__import__("sys")._getframe().f_code.co_qualname)
    raise safety.ReferenceReached


class ReferenceWatch:
    """Ends the block with ReferenceReached if it called any function of helpers.reference:
    the submission is, wraps or calls the course's reference (however it got hold of it: an
    import, importlib, `solution_or_reference`, a subclass). For the block's duration every
    reference function's code is a tripwire that records the call and raises; the checker's
    own calls to the reference happen outside the block. The call itself is detected, not the
    source text, and it costs nothing per call."""

    def __init__(self) -> None:
        self.saved: dict[Callable[..., Any], tuple[Any, ...]] = {}

    def __enter__(self) -> None:
        _REACHED.clear()
        for function, name in _reference_functions().items():
            self.saved[function] = (function.__code__, function.__defaults__, function.__kwdefaults__)
            function.__defaults__, function.__kwdefaults__ = None, None
            function.__code__ = _tripwire.__code__.replace(co_name=function.__name__, co_qualname=name)

    def __exit__(self, *exc: Any) -> Literal[False]:
        for function, (code, defaults, kwdefaults) in self.saved.items():
            function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
        if _REACHED:  # whatever the block raised or returned: the result is not the student's
            reached = _REACHED[0]
            _REACHED.clear()
            raise ReferenceReached(reached)
        return False


def _student_code(frame: FrameType | None) -> bool:
    """Is the innermost frame the student's (not torch's, contextlib's or ours)?"""
    return frame is not None and not frame.f_code.co_filename.startswith(_NOT_STUDENT_CODE)


def _importing(frame: FrameType | None) -> bool:
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


MATRIX_PRODUCTS = frozenset(
    {  # the names torch gives a product of two matrices
        "matmul",
        "__matmul__",
        "__rmatmul__",
        "mm",
        "bmm",
        "mv",
        "einsum",
        "tensordot",
        "linear",
        "addmm",
        "baddbmm",
        "inner",
        "_sparse_mm",
        "smm",
        "hspmm",
    }
)


def square_matrix_product() -> None:
    """Stands in `Watch.seen` for a matrix product with a square matrix (..., n, n), n >= 2, among its
    operands and an operand made from the call's inputs, whose result the call returns (through any later
    operations): a rotation or a shift applied to the input. Any product would also count an outer product
    that only builds angles, (T, 1) @ (1, d/2) or einsum("t,i->ti"), and a decoy, eye(d) @ eye(d), whose
    result is thrown away or never touched the input."""


def matrix_product_of_inputs() -> None:
    """Stands in `Watch.seen` for a matrix product with an operand made from the call's inputs, whose
    result the call returns (through any later operations): not a decoy product beside the real work."""


def is_square_matrix(operand: object) -> bool:
    return isinstance(operand, torch.Tensor) and operand.dim() >= 2 and operand.shape[-1] == operand.shape[-2] >= 2


# What a tensor the Watch saw is made from (bits of Watch.made_from): the call's inputs; a matrix product with an
# operand made from them; such a product with a square matrix among its operands.
FROM_INPUTS, THROUGH_PRODUCT, THROUGH_SQUARE = 1, 2, 4


class Watch(TorchFunctionMode):
    """Sees every torch function the student's code calls: refuses the forbidden ones and remembers the
    rest (e.g. "was there a matmul?"). It also follows what each tensor is made from, from the call's
    `inputs` on, so that "its result comes out of a product with a square matrix" cannot be met by a
    product the code makes and throws away (`returned`)."""

    def __init__(self, forbidden: tuple[Callable[..., Any], ...], inputs: Any = ()):
        super().__init__()
        self.forbidden, self.seen = forbidden, set()  # type: tuple[Callable[..., Any], ...], set[Callable[..., Any]]
        # id(tensor) -> (a weak reference to it, what it is made from): ids are reused once a tensor is freed
        self.made_from: dict[int, tuple[weakref.ref[torch.Tensor], int]] = {}
        for tensor in tensors_in(inputs):
            self.mark(tensor, FROM_INPUTS)

    def of(self, tensor: torch.Tensor) -> int:
        entry = self.made_from.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else 0

    def mark(self, tensor: torch.Tensor, made_from: int) -> None:
        try:
            self.made_from[id(tensor)] = (weakref.ref(tensor), made_from | self.of(tensor))
        except TypeError:  # a tensor-like object that takes no weak reference: nothing to follow
            pass

    def __torch_function__(self, func: Function, types: Types, args: Args = (), kwargs: Kwargs = None) -> Any:
        if func in self.forbidden:
            raise ForbiddenCall(_qualified_name(func))
        self.seen.add(func)
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        operands = tensors_in(args) + tensors_in(kwargs)
        made_from = functools.reduce(int.__or__, map(self.of, operands), 0)
        name = getattr(func, "__name__", "")
        if name in MATRIX_PRODUCTS and made_from & FROM_INPUTS:
            made_from |= THROUGH_PRODUCT | (THROUGH_SQUARE if any(map(is_square_matrix, operands)) else 0)
        if made_from:
            # what it returns, and what it wrote into: an in-place method (add_, __setitem__, __iadd__), an out=
            written = tensors_in(args[:1]) if name.endswith("_") or name in IN_PLACE else []
            for tensor in tensors_in(result) + written + tensors_in(kwargs.get("out")):
                self.mark(tensor, made_from)
        return result

    def returned(self, value: Any) -> None:
        """After the call: which of the products above its returned `value` comes out of."""
        made_from = functools.reduce(int.__or__, map(self.of, tensors_in(value)), 0)
        if made_from & THROUGH_PRODUCT:
            self.seen.add(matrix_product_of_inputs)
        if made_from & THROUGH_SQUARE:
            self.seen.add(square_matrix_product)


IN_PLACE = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__imatmul__"})


def torch_path(func: Callable[..., Any]) -> str:
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


def _qualified_name(func: Callable[..., Any]) -> str:
    module = getattr(func, "__module__", None) or "torch"
    return f"{module.replace('torch.nn.functional', 'F')}.{getattr(func, '__name__', func)}"


def tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []


@functools.cache
def warm_up_meta() -> None:
    """The first meta-device ops in a process (a meta tensor times a Python
    float, a layer_norm) import torch._dynamo: seconds. Paid once, here, outside
    the student's time limit, so that it never counts against their code."""
    x = torch.zeros(2, 3, device="meta")
    torch.nn.functional.layer_norm(x * 1.0 + x, (3,))


class FactoriesOnMeta(TorchFunctionMode):
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

    def __init__(self) -> None:
        super().__init__()
        self.real: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(meta) -> (meta, the real tensor)

    MAY_MIX = {"to", "copy_", "__get__", "__set__"}  # moving data between devices is allowed, as on a GPU
    READ_OUT = {"numpy", "tolist", "item", "__array__"}  # what reads a CPU tensor's values out of torch

    def __torch_function__(self, func: Function, types: Types, args: Args = (), kwargs: Kwargs = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if (
            name in ("__getitem__", "__setitem__")
            and len(args) > 1
            and isinstance(args[0], torch.Tensor)
            and not args[0].is_meta
        ):
            args = (args[0], self._real_index(args[1]), *args[2:])
        elif name in self.READ_OUT and args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            # leaving torch (to NumPy, to Python) from "the CPU" works on a GPU machine: with the real values
            # where this run kept them, else no verdict from this run (device_pass reads "copy out of meta")
            args = (self._real_index(args[0]), *args[1:])
            if args[0].is_meta:
                raise RuntimeError(f"Cannot copy out of meta tensor ({name}): the device check's stand-in for the CPU")
        elif name not in self.MAY_MIX:
            tensors = [t for t in tensors_in([args, kwargs]) if t.dim() > 0]
            if any(t.is_meta for t in tensors) and not all(t.is_meta for t in tensors):
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but {name} got a tensor made on the CPU without device= and one on the input's device"
                )
        result = func(*args, **kwargs)
        made_on_cpu = name in self.FACTORIES and kwargs.get("device") is None and not _in_module_init()
        # An explicit .cpu() or .to("cpu") lands on the CPU too: on a GPU it leaves the input's device, as a
        # factory does. (Not .to(a torch.device): here the CPU stands for the GPU, and .to(x.device) is that.)
        named_cpu = _moves_to_cpu(name, args, kwargs) and not any(
            isinstance(a, torch.device) for a in (*args, *kwargs.values())
        )
        if (made_on_cpu or named_cpu) and isinstance(result, torch.Tensor) and result.dim() > 0:
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


def _moves_to_cpu(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """`t.cpu()` or `t.to("cpu")` / `t.to(torch.device("cpu"))`: a move to the CPU, asked for by name."""
    if name == "cpu":
        return True
    target = kwargs.get("device", args[1] if len(args) > 1 and isinstance(args[1], (str, torch.device)) else None)
    return name == "to" and target is not None and torch.device(target).type == "cpu"


class CopiesOffMeta(TorchFunctionMode):
    """While the inputs stand on the meta device for "the GPU", `.cpu()` or `.to("cpu")` in student code
    moves a tensor to the CPU, as it would from a GPU: it gets zeros of its shape there (meta holds no
    data to copy), so a result left on the CPU shows, and one moved back with .to(x.device) does not."""

    def __torch_function__(self, func: Function, types: Types, args: Args = (), kwargs: Kwargs = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if source is not None and source.is_meta:
            if _moves_to_cpu(name, args, kwargs):
                return torch.zeros(source.shape, dtype=kwargs.get("dtype", source.dtype), device="cpu").requires_grad_(
                    source.requires_grad and source.is_floating_point()
                )
        return func(*args, **kwargs)


def _in_module_init() -> bool:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), torch.nn.Module):
            return True
        frame = frame.f_back
    return False
