"""The probe: the vocabulary an exercise's check is written in.

A check is a short list of named probes (shape -> dtype -> device -> values ->
properties -> module hygiene) written per exercise in its chapter's module
under `helpers.exercises`, with a `Probe` handed to it:

* every call into student code goes through `Probe.call`, which makes it through
  the seam of `helpers.calls` (in a notebook: the safety net of `helpers.safety`,
  time limit, memory cap, watched torch calls, the reference tripwired; in the
  grader: the graded kernel), words how it ended, and notices if it changed its
  inputs in place;
* when the output is wrong, `Probe.expect` runs the exercise's catalogue of
  known-wrong variants (declared with the exercise) on the same inputs: the one that
  reproduces the student's output names the mistake. We diagnose by running
  code, never by reading the student's source.

`close` and `TOLERANCES` say what "the same values" means; `advice` gives a code's
message, hint and fix. This module imports `helpers.registry`, `helpers.safety` and `helpers.calls` only:
the catalogue imports it, never the other way round.
"""

from __future__ import annotations

import contextvars
import inspect
import math
import os
import re
import zlib
from collections.abc import Callable
from typing import Any, NoReturn

import torch

from helpers import registry
from helpers.calls import RUNNER, Ending, Outcome, Settings
from helpers.safety import Failure, tensors_in, torch_path, warm_up_meta

TIMEOUT_ENV = "COURSE_CHECK_TIMEOUT"  # seconds per call into student code
MEMORY_ENV = "COURSE_CHECK_MEMORY_MB"  # extra memory student code may take
DEVICE_ENV = "COURSE_DEVICE"  # force "cpu", "cuda", "cuda:1", "mps", ...
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


def close(
    out: torch.Tensor, expected: torch.Tensor, rtol: float | None = None, atol: float | torch.Tensor | None = None
) -> bool:
    """Same shape and values within the expected dtype's tolerance (any dtype, any device).
    `atol` may be a tensor that broadcasts to the result: a tolerance entry by entry."""
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape or out.is_meta or expected.is_meta:
        return False
    default_rtol, default_atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    a = out.detach().to("cpu", torch.float64)
    b = expected.detach().to("cpu", torch.float64)
    if isinstance(atol, torch.Tensor) and not _broadcasts(atol.shape, b.shape):
        atol = float(
            atol.max()
        )  # entry-by-entry tolerances of the reference, compared with a mistake of another shape: the loosest
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
    """A length passed to student code as an int (Probe.length), marked with its edges (T = 1 and
    T = max_len) for the framework's tests; Probe.call hands the student a plain int."""

    max_len: int | None = None


# Probe.independent: after these nothing more is run; later ones of these are no new finding.
STOPS_EVERYTHING = frozenset(
    {
        "timeout",
        "out_of_memory",
        "not_implemented",
        "uses_reference",
        "changed_global_state",
        "mutated_input",
        "changes_own_weights",  # the tables every later probe reads are no longer the module's own
    }
)
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
        self.seed = zlib.crc32(exercise.id.encode()) ^ SEED_SALT.get()
        self.generator = torch.Generator().manual_seed(self.seed)
        self.calls_seen: set[str] = set()  # the names of the torch functions student code ran
        self.factories_on_meta = False  # set during device_pass's second run
        self.copies_off_meta = False  # set during its first run
        self.also: list[str] = []  # further independent mistakes, found after the first
        self.notes: list[str] = []  # one line each, added to a pass message (a cross-check that was skipped)
        self.aspects_passed: set[str] = set()  # the named aspects of `independent` that passed
        self.axes_walked: set[str] = set()  # the contract's axes that ran to the end (helpers.contracts)

    # ---- failing -------------------------------------------------------
    def fail(self, code: str, message: str, hint: str = "", fix: str = "") -> NoReturn:
        raise Failure(code, message, hint, fix)

    def independent(self, *probes: Callable[[], Any], **aspects: Callable[[], Any]) -> None:
        """Run probes that look at independent aspects (layout, scale, dropout,
        hygiene...) all, so a student meets every mistake in one run: the first
        failure is the diagnosis, the others are listed in `also`, each code once.
        After a failure that says nothing more can be learned (a stub, a time-out,
        the reference used) nothing else runs; a later crash, the same broken
        code met again, adds nothing. Probes given by name (`values=...`) run after
        the unnamed ones, in order; a later one asks `probe.passed("values")`."""
        first, codes = None, set()
        for name, run in [*((None, run) for run in probes), *aspects.items()]:
            if first is not None and first.code in STOPS_EVERYTHING:
                break
            try:
                run()
            except Failure as failure:
                if first is None:
                    first = failure
                elif failure.code not in codes | {first.code} | CRASHES | self.codes_also():
                    self.also.append(f"{failure.code}: {failure.message}")
                codes.add(failure.code)
            else:
                if name is not None:
                    self.aspects_passed.add(name)
        if first is not None:
            raise first

    def codes_also(self) -> set[str]:
        """The codes listed in `also` so far (a probe may list one itself, as it reads a finding off the output)."""
        return {finding.split(":", 1)[0] for finding in self.also}

    def passed(self, aspect: str) -> bool:
        """Whether the named aspect ran and passed: a gradient probe that only means something once
        the values are right asks `probe.passed("values")`."""
        return aspect in self.aspects_passed

    # ---- inputs --------------------------------------------------------
    def randn(
        self, *shape: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
    ) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, dtype=dtype).to(device or self.device)

    def randint(self, high: int, *shape: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Plain random integers: for inputs that must avoid an edge on purpose; else `ids`."""
        return torch.randint(high, shape, generator=self.generator).to(device or self.device)

    def ids(
        self, high: int, *shape: int, device: torch.device | str | None = None, kind: str = "ids", every: bool = False
    ) -> torch.Tensor:
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

    def positions(
        self, max_len: int, *shape: int, device: torch.device | str | None = None, every: bool = False
    ) -> torch.Tensor:
        """Position ids below max_len, with 0 and max_len - 1 among them."""
        return self.ids(max_len, *shape, device=device, kind="positions", every=every)

    def segments(
        self, count: int, *shape: int, device: torch.device | str | None = None, every: bool = False
    ) -> torch.Tensor:
        """Segment (token type) ids below count, with 0 and count - 1 among them."""
        return self.ids(count, *shape, device=device, kind="segments", every=every)

    def sequence(self, tensor: torch.Tensor, max_len: int | None = None, dim: int = 1) -> torch.Tensor:
        """`tensor` with its length (its size along `dim`) marked: T = 1 and T = max_len are the
        edges (only T = 1 where no max_len bounds it)."""
        return self.tag(tensor, "lengths", max_len, dim)

    def length(self, length: int, max_len: int | None = None) -> int:
        """An int argument that is a length (sinusoidal_encoding's max_len, alibi_bias's seq_len):
        a Length, which Probe.call hands the student as a plain int."""
        marked = Length(length)
        marked.max_len = max_len
        return marked

    @staticmethod
    def tag(tensor: torch.Tensor, kind: str, bound: int | None, dim: int | None = None) -> torch.Tensor:
        """Mark an input with the edges it must reach (see `ids`, `sequence`): the framework's tests
        (tests/test_checks.py) ask that some call into student code received each of them."""
        tensor._course_edges = (*getattr(tensor, "_course_edges", ()), (kind, bound, dim))
        return tensor

    def record_gradient(self, table: torch.Tensor, rows_used: torch.Tensor) -> None:
        """A gradient probe compared `table`'s gradient; `rows_used` (bool, one per row) says which
        rows its inputs used. Nothing here: the framework's tests (tests/test_checks.py's Recording)
        keep them, to ask that every table a module trains was compared over every row."""

    # ---- calling student code -----------------------------------------
    def call(self, fn: Callable[..., Any], *args: Any, what: str | None = None, **kwargs: Any) -> Any:
        """Call student code safely. The student's code gets clones of the
        tensors; if it changes them in place we say which argument."""
        what = what or f"`{self.name}`"
        args = tuple(int(a) if isinstance(a, Length) else a for a in args)  # the student gets plain ints
        kwargs = {k: int(a) if isinstance(a, Length) else a for k, a in kwargs.items()}
        # A module's inputs by the names the exercise gives them (its reference's forward): the module's own
        # signature is __call__'s *args, and a graded kernel's mirror knows no more.
        reference, signature_of = self.exercise.reference, fn
        if isinstance(fn, torch.nn.Module) and inspect.isclass(reference):
            signature_of = getattr(reference, "forward", fn)
        names = _argument_names(signature_of, len(args))
        originals = [(name, t) for name, arg in zip(names, args) for t in tensors_in(arg)]
        originals += [(name, t) for name, arg in kwargs.items() for t in tensors_in(arg)]
        saved = [t.detach().clone() for _, t in originals]
        state_before = _own_state(fn, buffers=not self.exercise.stateful)
        called = RUNNER.get().call(fn, args, kwargs, self.settings())
        if called.outcome.ending is not Ending.OK:
            self.fail(*self.worded(called.outcome, what))
        if called.changed:
            self.fail(
                "changed_global_state",
                f"{what} changed torch's global settings ({'; '.join(called.changed)}). We put them back.",
            )
        self.calls_seen |= called.seen
        for (name, live), snapshot in zip(originals, saved):
            if not live.is_meta and (live.shape != snapshot.shape or not torch.equal(live, snapshot)):
                self.fail(
                    "mutated_input",
                    f"{what} changed its input `{name}` in place (an `+=`, a `.mul_()`, an assignment into it...).",
                )
        self._expect_own_state_kept(state_before, what)
        return called.value

    def settings(self) -> Settings:
        """The safety net this probe asks for around its next call."""
        return Settings(
            self.timeout,
            self.memory_mb,
            str(self.device),
            [torch_path(f) for f in self.exercise.forbidden],
            self.factories_on_meta,
            self.copies_off_meta,
            torch.is_grad_enabled(),
        )

    def worded(self, outcome: Outcome, what: str) -> tuple[str, str, str, str]:
        """(code, message, hint, fix) of a call that did not end well: the one table of their wording."""
        ending, line = outcome.ending, outcome.line
        if ending is Ending.TIMEOUT:
            return "timeout", f"{what} ran for more than {self.timeout:g} s and was stopped.", "", ""
        if ending is Ending.FORBIDDEN:
            said = f"{what} called {outcome.name} (directly, or through a module such as nn.Embedding that uses it), which this exercise asks you to do without."
            return "forbidden_api", said, "", ""
        if ending is Ending.REFERENCE:
            return "uses_reference", ran_reference(what, outcome.name), "", ""
        if ending is Ending.NOT_IMPLEMENTED and outcome.stub is not None:
            where = (
                ""
                if outcome.stub in what
                else f" It calls `{outcome.stub}`, which is the one not implemented yet: that is the cell to fill in first."
            )
            return "not_implemented", f"{what} is not implemented yet.{where}", "", ""
        if ending is Ending.EXIT:
            said = f"{what} called exit() ({line}), which would end the whole program."
            return "raised", said, "", "Return the result instead of calling exit() or sys.exit()."
        if outcome.oom:
            said = f"{what} tried to allocate more than {self.memory_mb} MB ({line}), far more than the task needs."
            return "out_of_memory", said, "", ""
        return "raised", f"{what} raised {line}", "", ""

    def _expect_own_state_kept(self, before: dict[str, tuple[torch.Tensor, torch.Tensor]], what: str) -> None:
        """A module's forward leaves its own parameters and buffers as they were: one that renormalises
        or clamps its table in place (nn.Embedding(max_norm=...), `.clamp_()`, `.renorm_()`) would be
        compared against the table as it is after the call, and look right."""
        runner = RUNNER.get()  # graded: the kernel's word on its own tensors, where it contradicts the grader's copy
        for name, (tensor, snapshot) in before.items():
            claimed = runner.claim(tensor)
            live = tensor if claimed is None else claimed
            if live.shape != snapshot.shape or torch.equal(live.detach(), snapshot):
                continue
            rows = (
                (live.detach() != snapshot).reshape(len(live), -1).any(1).nonzero().flatten().tolist()
                if live.dim()
                else []
            )
            which = f" (rows {', '.join(map(str, rows[:6]))}{', ...' if len(rows) > 6 else ''})" if rows else ""
            self.fail(
                "changes_own_weights",
                f"{what} changed its own `{name}` in place while computing its output{which}: a forward pass must leave "
                "the module's tables as they are (nn.Embedding(max_norm=...) renormalises the rows it looks up, "
                "`.clamp_()` or `.renorm_()` on a weight write into it).",
            )

    def build(self, cls: Any, *args: Any, **kwargs: Any) -> torch.nn.Module:
        """Instantiate a student's nn.Module class and move it to the check device."""
        if isinstance(cls, torch.nn.Module):
            self.fail("wrong_type", f"pass the class `{type(cls).__name__}` to check(), not an instance of it.")
        if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
            self.fail("wrong_type", f"`{self.name}` should be a subclass of torch.nn.Module, got {type(cls).__name__}.")
        module = self.call(cls, *args, what=f"`{self.name}(...)`", **kwargs)
        return self.call(module.to, self.device, what=f"`{self.name}.to(device)`")

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
        self.no_nan(
            out, expected, what
        )  # first: a NaN is the finding, whatever else differs (an expected -inf hides none)
        if not values_ok and mistakes is not None:
            for code, wrong in mistakes().items():  # a mistake may have several faces
                candidates = wrong if isinstance(wrong, (list, tuple)) else [wrong]
                if any(isinstance(c, torch.Tensor) and close(out, c, rtol, atol) for c in candidates):
                    self.fail(code, self.explain(code))
        if out.shape != expected.shape:
            self.fail(
                "wrong_shape",
                f"{what}: shape {tuple(out.shape)}, expected {tuple(expected.shape)}.",
                hint=hint,
                fix=fix or self._own_advice("wrong_shape") or _shape_fix(out.shape, expected.shape),
            )
        if out.dtype != expected.dtype:
            module_fix = (  # a module's output dtype comes from its tables, not from an input (ids are Long)
                f"Keep the module's tables in {expected.dtype}, the default (no `dtype=` of another precision in __init__), "
                f"or cast what forward returns with `.to({expected.dtype})`."
            )
            self.fail(
                "wrong_dtype",
                f"{what}: dtype {out.dtype}, expected {expected.dtype}.",
                fix=self._own_advice("wrong_dtype") or (module_fix if self.exercise.kind == "module" else ""),
            )
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
            self.fail(
                "nan_or_inf",
                f"{what} holds inf at index {where} (and {int(bad.sum()) - 1} more entries), where the reference has a finite number.",
            )
        self.fail("wrong_values", describe_difference(out, expected, what, rtol, atol), hint=hint, fix=fix)

    def _own_advice(self, code: str) -> str:
        """The exercise's own fix for a generic code (probe.advice's step 3), which a computed one must not hide."""
        return self.exercise.advice.get(code, ("", ""))[1]

    def no_nan(self, out: torch.Tensor, expected: torch.Tensor, what: str) -> None:
        """NaN wherever the reference has none is nan_or_inf, before anything else: a NaN
        beside an expected -inf (a mask made as 0 * -inf) or in a result of the wrong shape too."""
        if out.is_meta or expected.is_meta or not (out.is_floating_point() or out.is_complex()):
            return
        got, want = out.detach().cpu(), expected.detach().cpu()
        bad = (
            got.isnan() & ~want.isnan()
            if got.shape == want.shape
            else got.isnan()
            if not want.isnan().any()
            else torch.zeros(())
        )
        if bad.any():
            where = [int(i) for i in bad.nonzero()[0]]
            nearby = f", where the reference has {want[tuple(where)].item():.4g}" if got.shape == want.shape else ""
            self.fail(
                "nan_or_inf", f"{what} holds NaN at index {where} (and {int(bad.sum()) - 1} more entries){nearby}."
            )

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
           meta tensors (`FactoriesOnMeta`): the output, or a device clash,
           betrays them even where run 1 could not copy out of meta.
        Correct code that meta cannot run (.item(), .tolist()) gets no verdict."""
        if self.accelerator_pass:
            return  # the CPU pass ran it; this pass runs on the real device
        warm_up_meta()
        message = (
            message
            or f"`{self.name}` makes or moves a tensor to the CPU whatever its input's device (a torch.arange or torch.zeros without device=, or a .cpu()); on a GPU this fails."
        )
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


# What an exercise declares (registry.Exercise): its check, check(submission, probe), raises Failure on the
# first probe that fails; its second oracle, oracle(probe, submission), runs once after the check passed.
Check = Callable[[Any, Probe], None]
Oracle = Callable[[Probe, Any], None]


def ran_reference(what: str, reached: str) -> str:
    return f"{what} ran the course's own reference `{reached}`: the reference and solution_or_reference are for the cells after an exercise, not for the exercise itself."


def _quietly(mistake: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A known mistake run on inputs it cannot handle (a transposed table indexed
    past its end) simply is not the student's mistake: None."""
    try:
        return mistake(*args, **kwargs)
    except Exception:
        return None


def describe_difference(
    out: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    rtol: float | None = None,
    atol: float | torch.Tensor | None = None,
) -> str:
    a = out.detach().to("cpu", torch.float64)
    b = expected.detach().to("cpu", torch.float64)
    error = torch.where(a == b, 0.0, (a - b).abs()).nan_to_num(
        nan=float("inf")
    )  # equal infinities (a mask) are no error
    default_rtol, default_atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    rtol, atol = default_rtol if rtol is None else rtol, default_atol if atol is None else atol
    bound = (atol.detach().to("cpu", torch.float64) if isinstance(atol, torch.Tensor) else atol) + rtol * b.abs()
    excess = error - bound  # the worst entry is the one furthest past its own tolerance
    worst = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
    wrong = int((error > bound).sum())
    # "{what}: n of N entries differ", so the verb agrees with its subject whatever `what` names (the logits, the output)
    entries = f"{wrong} of {error.numel()} entries {'differs' if wrong == 1 else 'differ'}"
    return f"{what}: {entries} from the reference; the worst is at index {list(worst)}: you have {a[worst].item():.6g}, expected {b[worst].item():.6g}."


def _own_state(fn: Any, buffers: bool = True) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """A module's parameters and buffers (name -> (the tensor, a copy of its values)), before a call into it."""
    if not isinstance(fn, torch.nn.Module):
        return {}
    tensors = [*fn.named_parameters(), *(fn.named_buffers() if buffers else ())]
    return {name: (t, t.detach().clone()) for name, t in tensors if not t.is_meta}


def _shape_fix(got: torch.Size, expected: torch.Size) -> str:
    """The fix for a result with axes more or fewer than asked (empty when the count is right: the generic advice)."""
    extra = len(got) - len(expected)
    if extra > 0:
        return (
            f"Return shape {tuple(expected)}: yours has {extra} axis{'es' if extra > 1 else ''} more (an unsqueeze, a `[None]`, "
            "a table kept as (1, max_len, d)?). Drop it, or do not add it: index the table as it is, or `.squeeze(0)` a leading 1."
        )
    if extra < 0:
        return (
            f"Return shape {tuple(expected)}: yours has {-extra} axis{'es' if extra < -1 else ''} fewer. Keep every batch dimension: "
            "a `.squeeze()`, a `.reshape(-1, d)` or an index `[0]` drops one, and a batch of 1 is still a batch."
        )
    return ""


def _argument_names(fn: Callable[..., Any], count: int) -> list[str]:
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    params = [p for p in params if p != "self"]  # an unbound forward
    return (params + [f"argument {i}" for i in range(len(params), count)])[:count]


def advice(exercise: registry.Exercise, code: str) -> tuple[str, str, str]:
    """(message, hint, fix) for a code. The one order, each of hint and fix on its own:
    1. the failure's own (check() keeps a hint or fix the failure brought);
    2. the exercise's own mistake for the code: its docstring is the message, then a
       "Hint:" and a "Fix:" paragraph;
    3. `exercise.advice[code]`, the generic advice made specific to the exercise;
    4. `registry.GENERIC_ADVICE[code]`; the message, without a docstring, is the code's
       one-line meaning (registry.DIAGNOSES)."""
    doc = inspect.getdoc(exercise.mistakes[code]) if code in exercise.mistakes else None
    generic_hint, generic_fix = registry.GENERIC_ADVICE.get(code, ("", ""))
    own_hint, own_fix = exercise.advice.get(code, ("", ""))
    hint, fix = own_hint or generic_hint, own_fix or generic_fix
    if not doc:
        return registry.DIAGNOSES[code], hint, fix
    parts = dict(re.findall(r"(?ms)^(Hint|Fix):\s*(.*?)(?=^(?:Hint|Fix):|\Z)", doc))
    message = re.split(r"(?m)^(?:Hint|Fix):", doc)[0]

    # A sentence's first letter is capitalised, an identifier's never (nn.Embedding, relative_position, θ_i, x.dtype).
    def flat(text: str) -> str:
        words = " ".join(text.split())
        return words[:1].upper() + words[1:] if re.match(r"[a-z]+(?![\w.(\[])", words) else words

    return flat(message), flat(parts.get("Hint", hint)), flat(parts.get("Fix", fix))
