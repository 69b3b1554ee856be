"""One submission: its notebook executed in a sandboxed kernel, then every exercise checked.

The checks run here, in the grader's process, with the same catalogue and words as
`check()` in a notebook; the kernel only answers calls (helpers.grading.serve), and
nothing it sends is more than data (helpers.grading.wire).
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import secrets
import time
from dataclasses import dataclass

from helpers import checking
from helpers.exercises import get
from helpers.grading import wire
from helpers.grading.code import code_only, reaches_grader
from helpers.grading.escape import plain
from helpers.grading.kernel import STOPPED, GraderError, Kernel, OutOfTime, last_line
from helpers.grading.limits import (
    CHECK_RESERVE,
    CHECK_TIMEOUT,
    FILE_MB,
    GRADING_RESTARTS,
    MAX_RESTARTS,
    OPEN_FILES,
    PROCESS_LIMIT,
)
from helpers.grading.records import CellError, Verdict
from helpers.grading.remote import MISSING, Session
from helpers.grading.sandbox import Scratch, sandbox_problem

# Verdicts that rest on what only the kernel sees (serve.STUDENT, its safety net), which a notebook can hide:
# best effort, and that result's report says so. Values, shapes, dtypes and devices are the grader's.
SEEN_IN_KERNEL = {
    "forbidden_api": "the forbidden torch function it calls",
    "changed_global_state": "torch's settings it changed",
    "mutated_input": "the inputs or parameters it changed in place",
    "not_a_matrix_product": "the torch functions it calls",
    "method_not_used": "the torch functions it calls",
}
FORBIDDEN_NONE_SEEN = "that it calls none of the torch functions this exercise forbids"
AUTOGRAD_SEEN = "that its outputs are tied to autograd, and the gradients autograd gave"
ATTRIBUTES_SEEN = "its module's Python attributes ({}), which only its kernel reports"
METHOD_SEEN = "{}, from the torch functions it calls"
MODULES_SEEN = "what its modules hold (their parameters, buffers and submodules), which only its kernel lists"
BEST_EFFORT = "{}: seen inside the student's kernel, which the student controls (values, shapes, dtypes and devices are compared by the grader)"
# Code that switches off what sees torch calls in the kernel (torch's function dispatch and its modes): by name, or
# by fetching the current mode (to call its __exit__), or by leaving the Python dispatch key out.
DISPATCH_OFF = re.compile(
    r"DisableTorchFunction|_DisableTorchDispatch|_disabled_torch_function_impl|_pop_(torch_function_)?mode"
    r"|_pop_torch_function_stack|_set_torch_function_mode|_len_torch_function_stack|_unset_\w*mode"
    r"|_get_current_(function|dispatch)_mode|_get_(function|dispatch)_stack_at|_disable_current_modes"
    r"|(Exclude|Force)DispatchKeyGuard|\.\s*__exit__\s*\("
)
NOT_DEFINED = "`{}` is not defined in the notebook: the cell that defines it was deleted or renamed, or did not run (see the errors above it)."


@dataclass(frozen=True)
class ExerciseInfo:
    id: str
    chapter: int
    points: float


def exercise_table() -> list[ExerciseInfo]:
    """Every registered exercise, by chapter, in registration order."""
    from helpers.exercises import all_exercises

    table = [ExerciseInfo(e.id, e.chapter, e.points) for e in all_exercises().values()]
    return sorted(table, key=lambda e: e.chapter)  # stable: registration order within a chapter


def diagnoses() -> dict[str, str]:
    from helpers.registry import DIAGNOSES

    return DIAGNOSES


class Submission:
    """Grades one notebook; `run()` returns the exercises' results."""

    def __init__(
        self,
        cells: list[tuple[int, str]],
        exercises: list[ExerciseInfo],
        *,
        cell_timeout: float,
        notebook_timeout: float,
        memory_mb: int = 0,
        sandboxed: bool = True,
        notebook_name: str = "submission.ipynb",
        data: bytes = b"",
        cpus: list[int] | None = None,
    ):
        self.cells, self.exercises = cells, exercises
        self.code = [(index, code_only(source)) for index, source in cells]  # what the rules on code read
        self.cell_timeout, self.notebook_timeout, self.memory_mb = cell_timeout, notebook_timeout, memory_mb
        self.sandboxed, self.notebook_name, self.data, self.cpus = sandboxed, notebook_name, data, cpus
        self.errors: list[CellError] = []
        self.skip: set[int] = set()  # cells that hung or killed the kernel: never run again
        self.restarts = 0
        self.kernel: Kernel | None = None
        self.scratch: Scratch | None = None
        # Checks keep a share of the notebook's limit; the cells may use the rest.
        self.reserve = min(notebook_timeout / 4, CHECK_RESERVE * len(exercises))
        self.deadline = self.cells_deadline = float("inf")  # set once the first kernel is up
        self.timings: dict[str, float] = {}  # seconds: kernel start (with the grader's set-up), cells, checks

    def error(self, cell: int | None, kind: str, message: str) -> None:
        self.errors.append({"cell": cell, "type": kind, "message": message})

    def limits(self) -> dict[str, int]:
        if os.name != "posix":
            return {}
        limits = {"RLIMIT_NOFILE": OPEN_FILES, "RLIMIT_FSIZE": FILE_MB * 2**20}
        if self.memory_mb > 0:  # a runaway allocation becomes a MemoryError, not the OOM killer picking a victim
            limits["RLIMIT_DATA"] = self.memory_mb * 2**20
        if self.sandboxed:  # counted per sandbox; outside one it would count every process of the grader's user
            limits["RLIMIT_NPROC"] = PROCESS_LIMIT
        return limits

    def notebook_limit(self) -> str:
        return f"{self.notebook_timeout:g} s limit (cells and checks together; {self.reserve:g} s kept for the checks)"

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def running(self) -> Kernel:
        """The kernel cells run in: there is one from run()'s start to its end, but after a failed restart."""
        if self.kernel is None:
            raise OutOfTime
        return self.kernel

    async def new_kernel(self) -> None:
        """A fresh kernel in place of the current one, which is killed first."""
        await self.stop_kernel()
        assert self.scratch is not None, "run() makes the scratch folder first"
        kernel = Kernel(self.scratch, self.limits(), self.sandboxed)
        try:
            await kernel.start()
        except BaseException:
            await kernel.stop()
            raise
        self.kernel = kernel

    async def stop_kernel(self) -> None:
        kernel, self.kernel = self.kernel, None
        if kernel is not None:
            await kernel.stop()

    async def run(self) -> list[Verdict]:
        if self.sandboxed and sandbox_problem():
            raise GraderError(f"no sandbox: {sandbox_problem()}")
        self.scratch = Scratch(self.notebook_name, self.data, self.sandboxed, self.cpus, {e.id for e in self.exercises})
        clock = time.perf_counter
        try:
            started = clock()
            await self.new_kernel()  # the grader's own set-up: not counted against the notebook's limit
            self.timings["start"] = clock() - started
            self.deadline = time.monotonic() + self.notebook_timeout
            self.cells_deadline = self.deadline - self.reserve
            started = clock()
            await self.execute()
            self.timings["execute"] = clock() - started
            started = clock()
            results = await self.grade()
            self.timings["grade"] = clock() - started
            return results
        finally:
            await self.stop_kernel()  # the sandbox and all it started are gone before any report is written
            self.scratch.remove()

    async def execute(self) -> None:
        for position, (index, source) in enumerate(self.cells):
            remaining = self.cells_deadline - time.monotonic()
            if remaining <= 0:
                self.error(
                    index,
                    "NotebookTimeout",
                    f"the notebook ran past its {self.notebook_limit()}: this cell and the ones after it were not run",
                )
                return
            limit = min(self.cell_timeout, remaining)
            outcome = await self.running.run(source, limit)
            try:
                if outcome.kind == "error":
                    self.error(index, str(outcome.content.get("ename") or "Error"), last_line(outcome.content))
                elif outcome.kind in ("timeout", "stuck"):
                    self.skip.add(index)
                    if limit < self.cell_timeout:
                        ended = f"in this cell, which {STOPPED[outcome.kind]}; the cells after it were not run"
                        self.error(
                            index, "NotebookTimeout", f"the notebook ran past its {self.notebook_limit()} {ended}"
                        )
                    else:
                        self.error(
                            index,
                            "CellTimeout",
                            f"the cell ran past its {self.cell_timeout:g} s limit and {STOPPED[outcome.kind]}",
                        )
                    if outcome.kind == "stuck":
                        await self.recover(self.cells[:position])
                    if limit < self.cell_timeout:
                        return
                elif outcome.kind == "dead":
                    self.skip.add(index)
                    self.error(
                        index,
                        "KernelDied",
                        "the kernel died in this cell (os._exit, a crash or running out of memory); the cells before it were re-run in a new kernel",
                    )
                    await self.recover(self.cells[:position])
            except OutOfTime:
                ended = "while its kernel was restarted; the cells after this one were not run"
                self.error(index, "NotebookTimeout", f"the notebook ran past its {self.notebook_limit()} {ended}")
                return
            if self.restarts >= MAX_RESTARTS and position + 1 < len(self.cells):
                self.error(
                    None,
                    "TooManyKernelDeaths",
                    f"the kernel died or hung {self.restarts} times; the cells after cell {index} were not run",
                )
                return

    async def recover(self, before: list[tuple[int, str]]) -> None:
        """A new kernel in the state the old one had: re-run `before`, minus the cells that hang
        or kill. Each failed attempt skips one more cell, so this ends; so does the time limit."""
        while True:
            if self.remaining() <= 0:
                await self.stop_kernel()
                raise OutOfTime
            self.restarts += 1
            try:  # starting a kernel counts against the notebook's limit too
                await asyncio.wait_for(self.new_kernel(), self.remaining())
            except asyncio.TimeoutError:
                raise OutOfTime from None
            for index, source in before:
                if index in self.skip:
                    continue
                limit = min(self.cell_timeout, self.remaining())
                outcome = await self.running.run(source, max(limit, 0.01))
                if outcome.kind in ("timeout", "stuck") and limit < self.cell_timeout:
                    await self.stop_kernel()
                    raise OutOfTime
                if outcome.kind in ("timeout", "stuck", "dead"):
                    self.skip.add(index)
                    what = "died" if outcome.kind == "dead" else f"hung and {STOPPED[outcome.kind]}"
                    self.error(
                        index,
                        "KernelDied" if outcome.kind == "dead" else "CellTimeout",
                        f"when re-run after a kernel restart, this cell {what}; it was skipped",
                    )
                    if outcome.kind != "timeout":
                        break
            else:
                return

    async def grade(self) -> list[Verdict]:
        """Every exercise checked here, in the grader's process, against stand-ins for the
        notebook's objects whose calls go to the kernel (helpers.grading.remote). Probes are
        drawn from this submission's own secret seed."""
        results = []
        check_limit = max(CHECK_TIMEOUT, self.cell_timeout)
        deaths = 0
        salt = secrets.randbits(31)
        loop = asyncio.get_running_loop()
        for position, exercise in enumerate(self.exercises):
            remaining = self.remaining()
            if deaths > GRADING_RESTARTS:
                results.append(
                    self.verdict(
                        exercise,
                        False,
                        "raised",
                        "Not checked: checking the exercises before it killed the kernel again and again.",
                    )
                )
                continue
            if self.kernel is None or remaining <= 0:
                results.append(
                    self.verdict(
                        exercise,
                        False,
                        "timeout",
                        f"Not checked: the notebook used up its {self.notebook_limit()} before this exercise.",
                    )
                )
                continue
            limit = min(check_limit, remaining)
            deadline = time.monotonic() + limit
            result, gone = await asyncio.to_thread(self.check_one, exercise, self.kernel, deadline, salt, loop)
            if result is not None:  # else the kernel is gone
                results.append(result)
                continue
            if gone == "timeout":
                which = (
                    f"the notebook's {self.notebook_limit()}"
                    if limit < check_limit
                    else f"the grader's {check_limit:g} s limit for one check"
                )
                results.append(self.verdict(exercise, False, "timeout", f"Checking `{exercise.id}` ran past {which}."))
            else:
                results.append(
                    self.verdict(
                        exercise,
                        False,
                        "raised",
                        f"Checking `{exercise.id}` killed the kernel (os._exit, a crash or running out of memory), or it stopped answering.",
                    )
                )
            deaths += 1
            if (
                position + 1 < len(self.exercises) and deaths <= GRADING_RESTARTS
            ):  # the rest in a new kernel, same state
                try:
                    await self.recover([c for c in self.cells if c[0] not in self.skip])
                except OutOfTime:
                    pass
            else:
                await self.stop_kernel()
        return results

    def check_one(
        self, exercise: ExerciseInfo, kernel: Kernel, deadline: float, salt: int, loop: asyncio.AbstractEventLoop
    ) -> tuple[Verdict | None, str | None]:
        """(the verdict, None), or (None, "timeout" | "dead") when the kernel could not answer.
        Runs in a worker thread; each request to the kernel goes through the event loop."""
        state: dict[str, str | None] = {"gone": None}

        def send(request: bytes, timeout: float) -> bytes:
            left = deadline - time.monotonic()
            if left <= 0 or state["gone"]:
                state["gone"] = state["gone"] or "timeout"
                raise wire.KernelGone(state["gone"])
            try:
                return asyncio.run_coroutine_threadsafe(kernel.ask(request, min(timeout, left)), loop).result()
            except wire.KernelGone as gone:
                state["gone"] = "dead" if str(gone) == "dead" else "timeout" if time.monotonic() >= deadline else "dead"
                raise

        session = Session(send, deadline=deadline)
        try:
            with session.active(salt):
                session.release()
                stand_in = session.stand_in(exercise.id)
                if stand_in is MISSING:
                    return self.verdict(exercise, False, "not_implemented", NOT_DEFINED.format(exercise.id)), None
                outcome = session.overrule(checking.check(exercise.id, stand_in))
        except wire.KernelGone:
            return None, state["gone"] or "dead"
        except Exception as error:  # a kernel that answers nonsense: what it makes the grader raise costs this exercise
            return self.verdict(
                exercise,
                False,
                "raised",
                f"The grader got no valid answer from the kernel for `{exercise.id}` ({plain(error, 300)}).",
            ), None
        if state["gone"]:
            return None, state["gone"]
        if outcome.passed:
            result = self.verdict(exercise, True, None, outcome.message)
        else:
            result = self.verdict(
                exercise, False, outcome.diagnosis, outcome.message, outcome.hint, outcome.fix, list(outcome.also)
            )
        attributes = list(session.attributes_read)
        return self.kernel_said(exercise, result, session.autograd, attributes, session.mirrored_a_module()), None

    @functools.cached_property
    def switches_off(self) -> int | None:
        """The first cell whose code switches off what sees torch calls (read once: a cell may be 60 MB)."""
        return next((index for index, code in self.code if DISPATCH_OFF.search(code)), None)

    @functools.cached_property
    def reaches_grader(self) -> int | None:
        """The first cell whose code reaches the grader's machinery in the kernel (grading.code)."""
        return next((index for index, code in self.code if reaches_grader(code)), None)

    def kernel_said(
        self,
        exercise: ExerciseInfo,
        result: Verdict,
        autograd: int,
        attributes: list[str] | None = None,
        modules: bool = False,
    ) -> Verdict:
        """`result`, with what its verdict takes on the kernel's word (`best_effort`): a diagnosis
        only the kernel sees; for a pass, that no forbidden function was seen, the gradients, the
        module's Python attributes the check read, what the student's modules hold (`modules`: a module whose
        kernel hides a bias Parameter from its record passes `has_bias`). A pass that needs no
        forbidden call seen, in a notebook whose code switches off what sees them, scores nothing: the grader
        cannot tell; nor does a pass that read attributes or a student's module, in a notebook whose code
        reaches the grader's machinery in its kernel (which reports them)."""
        observed = [SEEN_IN_KERNEL[result["diagnosis"]]] if result["diagnosis"] in SEEN_IN_KERNEL else []
        if result["passed"]:
            forbidden, method = bool(get(exercise.id).forbidden), get(exercise.id).method_seen
            named = ", ".join(f"`{name}`" for name in (attributes or [])[:5])
            kernel_word = [ATTRIBUTES_SEEN.format(named)] * bool(attributes) + [MODULES_SEEN] * modules
            kernel_word += [METHOD_SEEN.format(method)] * bool(method)
            observed += [FORBIDDEN_NONE_SEEN] * forbidden + [AUTOGRAD_SEEN] * (autograd > 0) + kernel_word
            hidden, reaches = self.switches_off, self.reaches_grader
            if (forbidden or method) and hidden is not None:
                reads = "this exercise forbids some of them" if forbidden else "this exercise's verdict reads them"
                message = (
                    f"Not counted: cell {hidden} switches off torch's function dispatch, which hides from the grader "
                    f"the torch functions `{exercise.id}` calls, and {reads}."
                )
                result = self.verdict(exercise, False, "forbidden_api" if forbidden else "method_not_used", message)
                observed = [FORBIDDEN_NONE_SEEN] * forbidden + [METHOD_SEEN.format(method)] * bool(method)
            elif kernel_word and reaches is not None:
                what = " and ".join(
                    [named] * bool(attributes)
                    + ["what its modules hold"] * modules
                    + ["the torch functions it calls"] * bool(method)
                )
                message = (
                    f"Not counted: cell {reaches} reaches into the grader's machinery in the kernel (helpers.grading), "
                    f"which reports {what} to the grader, and this exercise's verdict reads them."
                )
                result = self.verdict(exercise, False, "forbidden_api", message)
                observed = kernel_word
        if observed:
            result["best_effort"] = BEST_EFFORT.format("; ".join(observed))
        return result

    @staticmethod
    def verdict(
        exercise: ExerciseInfo,
        passed: bool,
        diagnosis: str | None,
        message: str,
        hint: str = "",
        fix: str = "",
        also: list[str] | None = None,
    ) -> Verdict:
        return {
            "id": exercise.id,
            "passed": passed,
            "score": exercise.points if passed else 0,
            "max_score": exercise.points,
            "diagnosis": diagnosis,
            "message": message,
            "also": also or [],
            "hint": hint,
            "fix": fix,
        }
