"""Grading a class: run each submitted notebook, then check every exercise.

    python -m helpers.grade SUBMISSION.ipynb [MORE.ipynb | DIR ...] --out DIR
                            [--format json|md|gradescope] [--timeout SECONDS_PER_CELL]
                            [--notebook-timeout SECONDS] [--jobs N] [--chapter NN]

For each submission, in a fresh kernel whose working directory is an empty
scratch folder (the submission itself is read once and never written to):

1. Execute. Cells run one by one, errors allowed. A cell that passes its time
   limit is interrupted (killed, if an interrupt does not stop it) and the
   rest of the notebook goes on. A cell that kills the kernel (`os._exit`, a
   segfault, the OOM killer) is skipped: a new kernel re-runs the cells before
   it, then the rest. The whole notebook has a time limit too.
2. Grade. In that same kernel, every exercise of the notebook's chapter is
   checked against what the student's namespace defines under the exercise's
   id, as it stands at the end. The checks come from a fresh import of the
   real `helpers` package (every `helpers*` module the notebook imported,
   patched or shadowed is dropped first; the import system is put back as it
   was before the first cell), and what the notebook did to torch and builtins
   (`torch.allclose = ...`) is undone. The verdicts come back in the reply to
   the grader's own request, tagged with a per-submission nonce; nothing the
   notebook printed or stored counts. Points come from the grader's registry.
3. Report. One report per submission under --out and a class summary
   (summary.md, summary.json, summary.csv). The exit code says whether grading
   ran (0), failed for a reason that is not the students' (1), or was called
   wrongly (2); never whether the students passed.

Limits of the tamper-proofing: the checks run in the student's process. What a
notebook does through the course's own API (redefining `check`, patching
`helpers.checking`, the registry, torch functions, shadowing `helpers` with a
file or an import hook, printing fake results) earns nothing. Code written to
attack the grader itself (walking interpreter frames, rewriting IPython's
input transformers) is out of scope; the report's `warnings` flag cells that
reach into such internals so a person can look at them.

`measure_overhead(notebook)` times grading against plain execution (the
budget is 1.3x); `helpers.bench` calls it.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import collections
import csv
import io
import json
import os
import queue
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
CELL_TIMEOUT = 60.0  # seconds per cell, --timeout
NOTEBOOK_TIMEOUT = 600.0  # seconds for the whole notebook, --notebook-timeout
CHECK_TIMEOUT = 60.0  # seconds per exercise's check, at least (a backstop: checks time student calls out themselves)
STARTUP_TIMEOUT = 120.0  # kernel start plus the grader's set-up (imports torch)
INTERRUPT_GRACE = 5.0  # after an interrupt, how long a cell may take to stop before its kernel is killed
MAX_RESTARTS = 3  # kernel deaths/hangs while executing before the grader stops running more cells
GRADING_RESTARTS = 3  # checks that kill the kernel before the grader stops checking
POLL = 0.5  # seconds between "is the kernel still alive?" checks while waiting
# Executing notebooks must not download anything; the device is NOT forced (a GPU grades on the GPU).
KERNEL_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
FORMATS = ("json", "md", "gradescope")
OVERHEAD_BUDGET = 1.3

# Cells that reach into the machinery are flagged for a person to look at (they earn nothing from it).
SUSPICIOUS = [
    (re.compile(r"\bhelpers\s*\.\s*(checking|registry|exercises|reference|grade)\b|\b_catalogue\b|\bDIAGNOSES\b"), "reaches into the course's checking code"),
    (
        re.compile(r"\bsys\s*\.\s*(modules|meta_path|path_hooks|_getframe|settrace|setprofile)\b|\bgc\s*\.\s*get_(objects|referrers)\b"),
        "manipulates the interpreter (sys.modules, import hooks, frames or gc)",
    ),
    (re.compile(r"\bbuiltins\b|__builtins__"), "changes Python's builtins"),
    (re.compile(r"^\s*(torch|F|nn)(\s*\.\s*\w+)+\s*=[^=]|\bsetattr\s*\(\s*(torch|F|nn)\b", re.MULTILINE), "replaces a torch function"),
    (re.compile(r"\b(input_transformers_\w+|ast_transformers|display_formatter|user_ns)\b"), "hooks into IPython"),
]


# ===========================================================================
# Inside the kernel. The grader loads this very file there under a private
# module name (not `helpers.grade`, so a notebook cannot find it by importing)
# and calls `kernel_setup` before the first cell and `kernel_grade` after the
# last. Only the standard library is imported at the top of this file, so
# that costs nothing.
# ===========================================================================

_KERNEL: dict[str, Any] = {}
# Bound when the kernel loads this file, before any student code: a notebook that replaces
# builtins.isinstance cannot turn the code that restores builtins against itself.
_vars, _setattr, _delattr, _isinstance, _callable, _type, _realpath = vars, setattr, delattr, isinstance, callable, type, os.path.realpath
_SKIP_NAMES = {"_", "__", "___"}  # IPython's output history lives in builtins


def _watched_objects() -> dict[str, Any]:
    """What the checks rely on and a notebook could patch."""
    import builtins
    import inspect
    import math
    import traceback

    import torch
    import torch.nn.functional as F

    return {
        "builtins": builtins,
        "math": math,
        "inspect": inspect,
        "traceback": traceback,
        "torch": torch,
        "torch.nn": torch.nn,
        "torch.nn.functional": F,
        "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module,
        "torch.nn.Parameter": torch.nn.Parameter,
    }


def _worth_watching(value: Any) -> bool:
    import types

    return _callable(value) or _isinstance(value, types.ModuleType)


def _snapshot(objects: dict[str, Any]) -> dict[str, tuple[Any, dict[str, Any]]]:
    return {label: (obj, {k: v for k, v in _vars(obj).items() if k not in _SKIP_NAMES and _worth_watching(v)}) for label, obj in objects.items()}


def _library_roots() -> tuple[str, ...]:
    import sysconfig

    import torch

    paths = sysconfig.get_paths()
    roots = {os.path.dirname(torch.__file__), paths["stdlib"], paths["purelib"], paths["platlib"], _KERNEL["package_dir"]}
    return tuple(_realpath(r) + os.sep for r in roots if r)


def _python_function(value: Any) -> Any:
    """The plain function behind a function, bound method or partial (no attribute lookups a notebook could hook)."""
    import functools
    import types

    for _ in range(3):
        kind = _type(value)
        if kind is types.FunctionType:
            return value
        if kind is types.MethodType:
            value = value.__func__
        elif kind is functools.partial:
            value = value.func
        else:
            return None
    return None


def _written_by_student(value: Any) -> bool:
    function = _python_function(value)
    return function is not None and not _realpath(function.__code__.co_filename).startswith(_KERNEL["roots"])


def _library_wrapper(old: Any, new: Any) -> bool:
    """A library wrapping what was there: torch wraps `torch.manual_seed` when torch._dynamo loads."""
    function = _python_function(new)
    if function is None or _written_by_student(function):
        return False
    for _ in range(5):
        inner = _vars(function).get("__wrapped__")
        if inner is old:
            return True
        function = _python_function(inner)
        if function is None:
            return False
    return False


def _same(current: Any, saved: Any) -> bool:
    import types

    if current is saved:
        return True
    # IPython re-binds `get_ipython` in builtins on every cell: a new bound method of the same function.
    return _type(current) is types.MethodType and _type(saved) is types.MethodType and current.__func__ is saved.__func__ and current.__self__ is saved.__self__


def _restore(snapshot: dict[str, tuple[Any, dict[str, Any]]]) -> list[str]:
    """Undo every replaced attribute (a library's wrapper of the original is kept);
    return the names that had been replaced."""
    missing = object()
    changed = []
    for label, (obj, saved) in snapshot.items():
        now = _vars(obj)
        for name, value in list(saved.items()):
            current = now.get(name, missing)
            if _same(current, value):
                continue
            if _library_wrapper(value, current):
                saved[name] = current
                continue
            changed.append(f"{label}.{name}")
            _setattr(obj, name, value)
        if _isinstance(obj, _type):  # a method added to a class shadows the C implementation it inherits
            for name in [n for n, v in now.items() if n not in saved and n not in _SKIP_NAMES and _written_by_student(v)]:
                changed.append(f"{label}.{name}")
                _delattr(obj, name)
    return changed


def kernel_setup(package_dir: str, memory_mb: int = 0) -> None:
    """Runs in the fresh kernel before any student code: remember what clean looks like."""
    import sys

    from IPython import get_ipython

    _KERNEL.update(
        shell=get_ipython(),
        package_dir=package_dir,
        meta_path=list(sys.meta_path),
        path_hooks=list(sys.path_hooks),
        watched=_snapshot(_watched_objects()),
        fresh=None,
    )
    _KERNEL["roots"] = _library_roots()
    if memory_mb > 0:  # a runaway allocation becomes a MemoryError, not the OOM killer picking a victim
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        cap = memory_mb * 2**20 if hard == resource.RLIM_INFINITY else min(hard, memory_mb * 2**20)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))


def _fresh_helpers() -> dict[str, Any]:
    """Drop every `helpers*` module the notebook saw, then import the real package from its own folder."""
    import importlib
    import importlib.util
    import sys

    package = Path(_KERNEL["package_dir"])
    for name in [n for n in sys.modules if n == "helpers" or n.startswith("helpers.")]:
        del sys.modules[name]
    sys.meta_path[:] = _KERNEL["meta_path"]  # no import hook the notebook installed
    sys.path_hooks[:] = _KERNEL["path_hooks"]
    sys.path_importer_cache.clear()
    spec = importlib.util.spec_from_file_location("helpers", package / "__init__.py", submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["helpers"] = module
    spec.loader.exec_module(module)
    registry = importlib.import_module("helpers.registry")
    checking = importlib.import_module("helpers.checking")
    catalogue = importlib.import_module("helpers.exercises")._catalogue()  # imports every chapter's module
    modules = {n: m for n, m in sys.modules.items() if n == "helpers" or n.startswith("helpers.")}
    for name, mod in modules.items():
        if not str(getattr(mod, "__file__", "")).startswith(str(package)):
            raise ImportError(f"{name} was not loaded from {package}")
    return {
        "checking": checking,
        "registry": registry,
        "catalogue": catalogue,
        "snapshot": _snapshot(modules),
        "exercises": dict(catalogue),
        "diagnoses": dict(registry.DIAGNOSES),
    }


def _restore_fresh(fresh: dict[str, Any]) -> list[str]:
    changed = _restore(fresh["snapshot"])
    for table, saved in ((fresh["catalogue"], fresh["exercises"]), (fresh["registry"].DIAGNOSES, fresh["diagnoses"])):
        if table != saved:
            changed.append("helpers.exercises" if table is fresh["catalogue"] else "helpers.registry")
            table.clear()
            table.update(saved)
    return changed


def kernel_grade(exercise_id: str, nonce: str) -> str:
    """Check one exercise in this kernel; the verdict as the repr of a plain dict."""
    result: dict[str, Any]
    try:
        if _KERNEL.get("fresh") is None:
            from IPython.core.formatters import DisplayFormatter

            _KERNEL["fresh"] = _fresh_helpers()
            shell = _KERNEL["shell"]
            shell.display_formatter = DisplayFormatter(parent=shell)  # the reply is formatted by IPython's own
        fresh = _KERNEL["fresh"]
        _restore(_KERNEL["watched"])
        _restore_fresh(fresh)
        result = _check_one(exercise_id, fresh)
        changed = _restore(_KERNEL["watched"]) + _restore_fresh(fresh)
        if changed:
            result = {
                "passed": False,
                "diagnosis": "changed_global_state",
                "message": f"While `{exercise_id}` was being checked, it replaced {', '.join(sorted(set(changed))[:3])}. Your code must not patch torch, builtins or the course's checking code.",
            }
    except KeyboardInterrupt:
        result = {"passed": False, "diagnosis": "timeout", "message": f"Checking `{exercise_id}` ran past the grader's time limit and was interrupted (an endless loop?)."}
    except BaseException as error:  # noqa: BLE001  (a broken kernel must still answer)
        result = {"passed": False, "diagnosis": "raised", "message": f"The grader could not check `{exercise_id}`: {type(error).__name__}: {error}"[:500]}
    result.update(nonce=nonce, id=exercise_id)
    return repr(result)


def _check_one(exercise_id: str, fresh: dict[str, Any]) -> dict[str, Any]:
    namespace = _KERNEL["shell"].user_ns
    if exercise_id not in namespace:
        return {
            "passed": False,
            "diagnosis": "not_implemented",
            "message": f"`{exercise_id}` is not defined in the notebook: the cell that defines it was deleted or renamed, or did not run (see the errors above it).",
        }
    outcome = fresh["checking"].check(exercise_id, namespace[exercise_id])
    if not isinstance(outcome, fresh["checking"].CheckResult):
        raise TypeError("check() did not return a CheckResult")
    passed = outcome.passed is True
    return {"passed": passed, "diagnosis": None if passed else str(outcome.diagnosis), "message": str(outcome.message)}


# ===========================================================================
# The grader's side: kernels, execution, recovery
# ===========================================================================


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


def kernel_env() -> dict[str, str]:
    """The environment kernels run in: the grader's own, offline, with this `helpers` importable."""
    env = {**os.environ, **KERNEL_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class Outcome:
    kind: str  # ok | error | timeout (interrupted, kernel usable) | stuck (kernel killed) | dead
    content: dict[str, Any] = field(default_factory=dict)


class Kernel:
    """One ipykernel, driven over jupyter_client (the layer nbclient is built on).

    Why not nbclient's execute_cell: on a timeout nbclient interrupts the
    kernel again and again and never escalates to a kill, and it keeps every
    output, which grading does not need. Here each request is: send, wait for
    its own reply while watching the process, interrupt at the limit, kill if
    the interrupt does not stop it."""

    def __init__(self, cwd: str, nonce: str, memory_mb: int):
        self.cwd, self.nonce, self.memory_mb = cwd, nonce, memory_mb
        self.module = f"_course_grader_{nonce}"
        self.km: Any = None
        self.kc: Any = None
        self._drain: asyncio.Task | None = None

    async def start(self) -> None:
        from jupyter_client import AsyncKernelManager

        self.km = AsyncKernelManager(kernel_name="python3")
        # The kernel's own stdout/stderr (not the notebook's outputs): warnings and crash dumps nobody reads.
        await self.km.start_kernel(cwd=self.cwd, env=kernel_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=STARTUP_TIMEOUT)
        self._drain = asyncio.ensure_future(self._drain_iopub())
        code = (
            "def _course_grader_setup():\n"
            "    import importlib.util, sys\n"
            f"    spec = importlib.util.spec_from_file_location({self.module!r}, {str(PACKAGE_DIR / 'grade.py')!r})\n"
            "    module = importlib.util.module_from_spec(spec)\n"
            f"    sys.modules[{self.module!r}] = module\n"
            "    spec.loader.exec_module(module)\n"
            f"    module.kernel_setup({str(PACKAGE_DIR)!r}, {int(self.memory_mb)})\n"
            "_course_grader_setup()\n"
            "del _course_grader_setup\n"
        )
        outcome = await self.run(code, STARTUP_TIMEOUT, silent=True)
        if outcome.kind != "ok":
            raise GraderError(f"the grader's set-up failed in the kernel ({outcome.kind}): {last_line(outcome.content)}")

    async def _drain_iopub(self) -> None:
        """Outputs are not kept (the submission is never written); read them so they do not pile up."""
        while True:
            try:
                await self.kc.get_iopub_msg(timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001  (a malformed message; keep draining)
                await asyncio.sleep(0.01)

    async def run(self, code: str, timeout: float, *, silent: bool = False, user_expressions: dict[str, str] | None = None) -> Outcome:
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent, user_expressions=user_expressions or {}, allow_stdin=False, stop_on_error=False)
        reply = await self._reply(msg_id, timeout)
        if isinstance(reply, Outcome):
            if reply.kind != "timeout":
                return reply
            await self.km.interrupt_kernel()
            after = await self._reply(msg_id, INTERRUPT_GRACE)
            if isinstance(after, Outcome):  # an interrupt does not stop a long C call or a process ignoring SIGINT
                return Outcome("dead" if after.kind == "dead" else "stuck")
            return Outcome("timeout", after["content"])
        status = reply["content"].get("status")
        return Outcome("ok" if status == "ok" else "error", reply["content"])

    async def _reply(self, msg_id: str, timeout: float) -> dict[str, Any] | Outcome:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return Outcome("timeout")
            try:
                msg = await self.kc.get_shell_msg(timeout=min(POLL, remaining))
            except queue.Empty:
                if not await self.km.is_alive():
                    return Outcome("dead")
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg

    async def stop(self) -> None:
        if self._drain is not None:
            self._drain.cancel()
        try:
            if self.kc is not None:
                self.kc.stop_channels()
            if self.km is not None:
                if await self.km.is_alive():
                    await self.km.shutdown_kernel(now=True)
                await self.km.cleanup_resources()
        except Exception:  # noqa: BLE001  (already dead: nothing to clean)
            pass
        self.km = self.kc = None


class GraderError(Exception):
    """Grading could not run (not the student's fault)."""


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def last_line(content: dict[str, Any]) -> str:
    """The last line of a reply's traceback, without colours."""
    lines = [ANSI.sub("", line) for entry in content.get("traceback") or [] for line in str(entry).splitlines()]
    lines = [line.strip() for line in lines if line.strip()]
    if lines:
        return lines[-1][:500]
    ename, evalue = content.get("ename"), content.get("evalue")
    return f"{ename}: {evalue}"[:500] if ename else ""


class Submission:
    """Grades one notebook; `report()` is the result."""

    def __init__(self, cells: list[tuple[int, str]], exercises: list[ExerciseInfo], *, cell_timeout: float, notebook_timeout: float, memory_mb: int = 0):
        self.cells, self.exercises = cells, exercises
        self.cell_timeout, self.notebook_timeout, self.memory_mb = cell_timeout, notebook_timeout, memory_mb
        self.nonce = secrets.token_hex(16)
        self.errors: list[dict[str, Any]] = []
        self.skip: set[int] = set()  # cells that hung or killed the kernel: never run again
        self.restarts = 0
        self.cwd = ""
        self.timings: dict[str, float] = {}  # seconds: kernel start (with the grader's set-up), cells, checks

    def error(self, cell: int | None, kind: str, message: str) -> None:
        self.errors.append({"cell": cell, "type": kind, "message": message})

    async def new_kernel(self) -> Kernel:
        kernel = Kernel(self.cwd, self.nonce, self.memory_mb)
        try:
            await kernel.start()
        except BaseException:
            await kernel.stop()
            raise
        return kernel

    async def run(self) -> list[dict[str, Any]]:
        self.cwd = tempfile.mkdtemp(prefix="grade-")
        kernel: Kernel | None = None
        clock = time.perf_counter
        try:
            started = clock()
            kernel = await self.new_kernel()
            self.timings["start"] = clock() - started
            started = clock()
            kernel = await self.execute(kernel)
            self.timings["execute"] = clock() - started
            started = clock()
            results = await self.grade(kernel)
            self.timings["grade"] = clock() - started
            return results
        finally:
            if kernel is not None:
                await kernel.stop()
            shutil.rmtree(self.cwd, ignore_errors=True)

    async def execute(self, kernel: Kernel) -> Kernel:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.notebook_timeout
        for position, (index, source) in enumerate(self.cells):
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.error(index, "NotebookTimeout", f"the notebook ran past its {self.notebook_timeout:g} s limit; this cell and the ones after it were not run")
                break
            limit = min(self.cell_timeout, remaining)
            outcome = await kernel.run(source, limit)
            if outcome.kind == "error":
                self.error(index, str(outcome.content.get("ename") or "Error"), last_line(outcome.content))
            elif outcome.kind in ("timeout", "stuck"):
                self.skip.add(index)
                if limit < self.cell_timeout:
                    self.error(index, "NotebookTimeout", f"the notebook ran past its {self.notebook_timeout:g} s limit in this cell; it was interrupted and the cells after it were not run")
                else:
                    self.error(index, "CellTimeout", f"the cell ran past its {self.cell_timeout:g} s limit and was interrupted")
                if outcome.kind == "stuck":
                    kernel = await self.recover(kernel, self.cells[:position])
                if limit < self.cell_timeout:
                    break
            elif outcome.kind == "dead":
                self.skip.add(index)
                self.error(index, "KernelDied", "the kernel died in this cell (os._exit, a crash or running out of memory); the cells before it were re-run in a new kernel")
                kernel = await self.recover(kernel, self.cells[:position])
            if self.restarts >= MAX_RESTARTS and position + 1 < len(self.cells):
                self.error(None, "TooManyKernelDeaths", f"the kernel died or hung {self.restarts} times; the cells after cell {index} were not run")
                break
        return kernel

    async def recover(self, kernel: Kernel, before: list[tuple[int, str]]) -> Kernel:
        """A new kernel in the state the old one had: re-run `before`, minus the cells
        that hang or kill. Each failed attempt skips one more cell, so this ends."""
        await kernel.stop()
        while True:
            self.restarts += 1
            kernel = await self.new_kernel()
            for index, source in before:
                if index in self.skip:
                    continue
                outcome = await kernel.run(source, self.cell_timeout)
                if outcome.kind in ("timeout", "stuck", "dead"):
                    self.skip.add(index)
                    what = "died" if outcome.kind == "dead" else "hung"
                    self.error(index, "KernelDied" if outcome.kind == "dead" else "CellTimeout", f"when re-run after a kernel restart, this cell {what}; it was skipped")
                    if outcome.kind != "timeout":
                        await kernel.stop()
                        break
            else:
                return kernel

    async def grade(self, kernel: Kernel) -> list[dict[str, Any]]:
        results = []
        limit = max(CHECK_TIMEOUT, self.cell_timeout)
        variable = f"_course_grade_{self.nonce}"
        deaths = 0
        for position, exercise in enumerate(self.exercises):
            if deaths > GRADING_RESTARTS:
                results.append(self.verdict(exercise, False, "raised", "Not graded: checking the exercises before it killed the kernel again and again."))
                continue
            code = f"{variable} = __import__('sys').modules[{kernel.module!r}].kernel_grade({exercise.id!r}, {self.nonce!r})"
            outcome = await kernel.run(code, limit, silent=True, user_expressions={"verdict": variable})
            if outcome.kind == "ok":
                results.append(self.parse(exercise, outcome.content))
            elif outcome.kind == "error":
                results.append(self.verdict(exercise, False, "raised", f"The grader could not check `{exercise.id}`: {last_line(outcome.content)}"))
            elif outcome.kind == "timeout":
                results.append(self.verdict(exercise, False, "timeout", f"Checking `{exercise.id}` ran past the grader's {limit:g} s limit and was interrupted."))
            else:
                deaths += 1
                what = "killed the kernel (os._exit, a crash or running out of memory)" if outcome.kind == "dead" else f"hung past the grader's {limit:g} s limit"
                results.append(self.verdict(exercise, False, "raised" if outcome.kind == "dead" else "timeout", f"Checking `{exercise.id}` {what}."))
                if position + 1 < len(self.exercises) and deaths <= GRADING_RESTARTS:  # the rest in a new kernel, same state
                    kernel = await self.recover(kernel, [c for c in self.cells if c[0] not in self.skip])
        await kernel.stop()
        return results

    def parse(self, exercise: ExerciseInfo, content: dict[str, Any]) -> dict[str, Any]:
        """Only the reply to the grader's own request counts, and only with this submission's nonce."""
        try:
            value = content["user_expressions"]["verdict"]
            data = ast.literal_eval(ast.literal_eval(value["data"]["text/plain"]))
            if not isinstance(data, dict) or data.get("nonce") != self.nonce or data.get("id") != exercise.id:
                raise ValueError("a verdict without this submission's nonce")
            passed, diagnosis, message = data["passed"], data["diagnosis"], data["message"]
            if not isinstance(passed, bool) or not isinstance(message, str) or not (diagnosis is None or isinstance(diagnosis, str)):
                raise ValueError("a malformed verdict")
        except Exception as error:  # noqa: BLE001
            return self.verdict(exercise, False, "raised", f"The grader got no valid verdict for `{exercise.id}` ({type(error).__name__}).")
        if not passed and diagnosis not in diagnoses():
            diagnosis = "raised"
        return self.verdict(exercise, passed, None if passed else diagnosis, message)

    @staticmethod
    def verdict(exercise: ExerciseInfo, passed: bool, diagnosis: str | None, message: str) -> dict[str, Any]:
        return {
            "id": exercise.id,
            "passed": passed,
            "score": exercise.points if passed else 0,
            "max_score": exercise.points,
            "diagnosis": diagnosis,
            "message": message,
        }


# ===========================================================================
# One notebook -> one report
# ===========================================================================


def read_cells(data: bytes) -> tuple[list[tuple[int, str]], list[str]]:
    """(index, source) of every non-empty code cell; and every code cell's source.

    Plain JSON for nbformat 4 (nbformat's schema validation costs seconds per
    notebook and a student's stray metadata must not cost them their grade);
    older formats go through nbformat's converter."""
    notebook = json.loads(data.decode("utf-8"))
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        import nbformat

        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
    code = []
    for index, cell in enumerate(notebook["cells"]):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            code.append((index, "".join(source) if isinstance(source, list) else str(source)))
    return [(i, s) for i, s in code if s.strip()], [s for _, s in code]


def detect_chapters(sources: list[str], filename: str, exercises: list[ExerciseInfo]) -> set[int]:
    """Which chapters a notebook is: those whose exercises it defines or checks;
    else the NN_ prefix of its file name; else every chapter."""
    text = "\n".join(sources)
    found = set()
    for exercise in exercises:
        name = re.escape(exercise.id)
        pattern = rf"\b(def|class)\s+{name}\b|^{name}\s*=|\b(check|solution_or_reference)\(\s*['\"]{name}['\"]"
        if re.search(pattern, text, re.MULTILINE):
            found.add(exercise.chapter)
    if found:
        return found
    match = re.match(r"(\d+)_", filename)
    chapters = {e.chapter for e in exercises}
    if match and int(match.group(1)) in chapters:
        return {int(match.group(1))}
    return chapters


def suspicious(cells: list[tuple[int, str]]) -> list[dict[str, Any]]:
    return [{"cell": index, "message": f"this cell {what}; that earns nothing in grading, but look at it by hand"} for index, source in cells for pattern, what in SUSPICIOUS if pattern.search(source)]


async def grade_notebook_async(
    path: str | Path,
    *,
    name: str | None = None,
    chapters: set[int] | None = None,
    cell_timeout: float = CELL_TIMEOUT,
    notebook_timeout: float = NOTEBOOK_TIMEOUT,
    memory_mb: int = 0,
    exercises: list[ExerciseInfo] | None = None,
) -> dict[str, Any]:
    """Execute and grade one notebook; the report as a dict (see `report_json`)."""
    path = Path(path)
    exercises = exercises if exercises is not None else exercise_table()
    started = time.monotonic()
    errors: list[dict[str, Any]] = []
    cells: list[tuple[int, str]] = []
    sources: list[str] = []
    try:
        cells, sources = read_cells(path.read_bytes())  # read once; never opened for writing
    except Exception as error:  # noqa: BLE001  (not a notebook: graded as empty)
        errors.append({"cell": None, "type": "NotebookFormatError", "message": f"the submission could not be read as a notebook: {type(error).__name__}: {error}"[:500]})
    wanted = chapters or detect_chapters(sources, path.name, exercises)
    selected = [e for e in exercises if e.chapter in wanted]
    submission = Submission(cells, selected, cell_timeout=cell_timeout, notebook_timeout=notebook_timeout, memory_mb=memory_mb)
    graded = True
    try:
        if errors:  # unreadable: nothing to run
            results = [Submission.verdict(e, False, "not_implemented", "The submission could not be read as a notebook (see the errors).") for e in selected]
        else:
            results = await submission.run()
    except Exception as error:  # noqa: BLE001  (the kernel did not start, ...: not the student's fault)
        graded = False
        submission.error(None, "GraderError", f"{type(error).__name__}: {error}"[:500])
        results = [Submission.verdict(e, False, "raised", "Not graded: the grader failed (see the errors).") for e in selected]
    return {
        "submission": name or str(path),
        "score": sum(r["score"] for r in results),
        "max_score": sum(r["max_score"] for r in results),
        "exercises": results,
        "errors": errors + submission.errors,
        "warnings": suspicious(cells),
        "chapters": sorted(wanted),
        "graded": graded,
        "seconds": round(time.monotonic() - started, 2),
        "timings": {k: round(v, 2) for k, v in submission.timings.items()},
    }


def grade_notebook(path: str | Path, **kwargs: Any) -> dict[str, Any]:
    """Synchronous `grade_notebook_async`."""
    return asyncio.run(grade_notebook_async(path, **kwargs))


# ===========================================================================
# Report formats
# ===========================================================================


def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def _cell(text: Any) -> str:
    """Markdown table cell: one line, pipes escaped."""
    return " ".join(str("" if text is None else text).split()).replace("|", "\\|")


def report_markdown(report: dict[str, Any]) -> str:
    lines = [f"# {report['submission']}", "", f"**Score: {report['score']:g} / {report['max_score']:g}**", ""]
    lines += ["| exercise | result | score | diagnosis | message |", "|---|---|---|---|---|"]
    for ex in report["exercises"]:
        result = "✔ passed" if ex["passed"] else "✘ failed"
        lines.append(f"| `{ex['id']}` | {result} | {ex['score']:g} / {ex['max_score']:g} | {_cell(ex['diagnosis'])} | {_cell(ex['message'])} |")
    if report["errors"]:
        lines += ["", "## Errors while running the notebook", "", "Cells are numbered from 0, counting text cells.", "", "| cell | error | last line of the traceback |", "|---|---|---|"]
        lines += [f"| {_cell(e['cell'])} | {_cell(e['type'])} | {_cell(e['message'])} |" for e in report["errors"]]
    if report.get("warnings"):
        lines += ["", "## For a person to look at", ""]
        lines += [f"- cell {w['cell']}: {w['message']}" for w in report["warnings"]]
    return "\n".join(lines) + "\n"


def report_gradescope(report: dict[str, Any]) -> str:
    """Gradescope's autograder results.json."""
    tests = []
    for ex in report["exercises"]:
        output = ex["message"] if ex["passed"] else f"{ex['diagnosis']}: {ex['message']}"
        tests.append({"name": ex["id"], "score": ex["score"], "max_score": ex["max_score"], "status": "passed" if ex["passed"] else "failed", "output": output})
    errors = "\n".join(f"cell {e['cell']}: {e['message']}" if e["cell"] is not None else e["message"] for e in report["errors"])
    results = {
        "score": report["score"],
        "execution_time": report.get("seconds", 0),
        "output": f"Errors while running your notebook:\n{errors}" if errors else "Your notebook ran without errors.",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    return json.dumps(results, indent=2, ensure_ascii=False) + "\n"


RENDER = {"json": (".json", report_json), "md": (".md", report_markdown), "gradescope": (".results.json", report_gradescope)}


# ===========================================================================
# A class: many notebooks, a progress bar, a summary
# ===========================================================================


def collect(arguments: list[str], exclude: Path | None = None) -> list[Path]:
    """Notebooks named or found (recursively) in the named folders; raises FileNotFoundError."""
    found: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            for notebook in sorted(path.rglob("*.ipynb")):
                if ".ipynb_checkpoints" in notebook.parts or (exclude is not None and exclude.resolve() in notebook.resolve().parents):
                    continue
                found.append(notebook)
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(argument)
    unique = {p.resolve(): p for p in found}
    return list(unique.values())


def report_names(paths: list[Path]) -> list[str]:
    """A file name per submission: its stem, with as many parent folders as it takes
    to tell colliding ones apart (alice/ch01 -> alice__ch01, bob/ch01 -> bob__ch01)."""
    parts = [p.resolve().with_suffix("").parts for p in paths]
    depth = [1] * len(paths)
    while True:
        stems = ["__".join(part[-d:]).lstrip("/") for part, d in zip(parts, depth)]
        counts = collections.Counter(stems)
        clashing = [i for i, stem in enumerate(stems) if counts[stem] > 1 and depth[i] < len(parts[i])]
        if not clashing:
            break
        for i in clashing:
            depth[i] += 1
    names, seen = [], collections.Counter()
    for stem in stems:
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "submission"
        seen[name] += 1
        names.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return names


def summarize(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Each student's score; each exercise's pass rate and the class's most common mistake."""
    codes = diagnoses()
    exercises: dict[str, dict[str, Any]] = {}
    for report in reports:
        for ex in report["exercises"]:
            entry = exercises.setdefault(ex["id"], {"id": ex["id"], "max_score": ex["max_score"], "submissions": 0, "passed": 0, "diagnoses": collections.Counter()})
            entry["submissions"] += 1
            entry["passed"] += bool(ex["passed"])
            if not ex["passed"]:
                entry["diagnoses"][ex["diagnosis"]] += 1
    for entry in exercises.values():
        entry["pass_rate"] = round(entry["passed"] / entry["submissions"], 3)
        common = entry["diagnoses"].most_common(1)
        entry["most_common_diagnosis"] = common[0][0] if common else None
        entry["most_common_count"] = common[0][1] if common else 0
        entry["meaning"] = codes.get(entry["most_common_diagnosis"], "") if common else ""
        entry["diagnoses"] = dict(entry["diagnoses"].most_common())
    students = [
        {"submission": r["submission"], "score": r["score"], "max_score": r["max_score"], "errors": len(r["errors"]), "graded": r["graded"], "exercises": {e["id"]: e["score"] for e in r["exercises"]}}
        for r in reports
    ]
    return {"submissions": len(reports), "students": students, "exercises": list(exercises.values())}


def summary_markdown(summary: dict[str, Any]) -> str:
    lines = [f"# Class summary: {summary['submissions']} submissions", "", "| submission | score | errors |", "|---|---|---|"]
    for s in summary["students"]:
        note = "" if s["graded"] else " (NOT GRADED: grader error)"
        lines.append(f"| {_cell(s['submission'])} | {s['score']:g} / {s['max_score']:g}{note} | {s['errors']} |")
    lines += ["", "| exercise | passed | most common mistake |", "|---|---|---|"]
    for e in summary["exercises"]:
        mistake = f"`{e['most_common_diagnosis']}` ×{e['most_common_count']}: {e['meaning']}" if e["most_common_diagnosis"] else "none"
        lines.append(f"| `{e['id']}` | {e['passed']}/{e['submissions']} ({e['pass_rate']:.0%}) | {_cell(mistake)} |")
    return "\n".join(lines) + "\n"


def summary_csv(summary: dict[str, Any]) -> str:
    ids = [e["id"] for e in summary["exercises"]]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["submission", "score", "max_score", "errors", *ids])
    for s in summary["students"]:
        writer.writerow([s["submission"], s["score"], s["max_score"], s["errors"], *(s["exercises"].get(i, "") for i in ids)])
    return buffer.getvalue()


def summary_text(summary: dict[str, Any]) -> str:
    """The table printed at the end of a batch."""
    width = max([len(s["submission"]) for s in summary["students"]] + [len(e["id"]) for e in summary["exercises"]] + [10])
    lines = ["", f"{'submission':<{width}}  score"]
    for s in summary["students"]:
        lines.append(f"{s['submission']:<{width}}  {s['score']:g}/{s['max_score']:g}" + ("" if s["graded"] else "  NOT GRADED (grader error)"))
    lines += ["", f"{'exercise':<{width}}  passed        most common mistake"]
    for e in summary["exercises"]:
        rate = f"{e['passed']}/{e['submissions']} ({e['pass_rate']:.0%})"
        mistake = f"{e['most_common_diagnosis']} x{e['most_common_count']}: {e['meaning']}" if e["most_common_diagnosis"] else "-"
        lines.append(f"{e['id']:<{width}}  {rate:<12}  {mistake}")
    return "\n".join(lines) + "\n"


async def grade_many(
    paths: list[Path],
    out: Path,
    *,
    fmt: str = "json",
    jobs: int = 1,
    chapters: set[int] | None = None,
    cell_timeout: float = CELL_TIMEOUT,
    notebook_timeout: float = NOTEBOOK_TIMEOUT,
    memory_mb: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Grade `paths` (N at a time, each in its own kernel); write each report as it finishes."""
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    exercises = exercise_table()
    names = report_names(paths)
    suffix, render = RENDER[fmt]
    single_gradescope = fmt == "gradescope" and len(paths) == 1  # what a Gradescope autograder expects
    semaphore = asyncio.Semaphore(max(1, jobs))
    cwd = Path.cwd()

    def shown(path: Path) -> str:
        try:
            return str(path.resolve().relative_to(cwd))
        except ValueError:
            return str(path)

    async def one(path: Path, name: str) -> dict[str, Any]:
        async with semaphore:
            report = await grade_notebook_async(path, name=shown(path), chapters=chapters, cell_timeout=cell_timeout, notebook_timeout=notebook_timeout, memory_mb=memory_mb, exercises=exercises)
        target = out / "results.json" if single_gradescope else out / f"{name}{suffix}"
        target.write_text(render(report), encoding="utf-8")
        return report

    tasks = [asyncio.ensure_future(one(p, n)) for p, n in zip(paths, names)]
    with tqdm(total=len(tasks), desc="grading", unit="notebook", disable=not progress, file=sys.stderr) as bar:
        for finished in asyncio.as_completed(tasks):
            report = await finished
            bar.set_postfix_str(f"{Path(report['submission']).name}: {report['score']:g}/{report['max_score']:g}")
            bar.update()
    reports = [t.result() for t in tasks]  # in the order given
    summary = summarize(reports)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(summary_markdown(summary), encoding="utf-8")
    (out / "summary.csv").write_text(summary_csv(summary), encoding="utf-8")
    return reports


def parse_chapters(values: list[str] | None) -> set[int] | None:
    if not values:
        return None
    parts = [p for v in values for p in v.split(",") if p.strip()]
    if any(p.strip().lower() == "all" for p in parts):
        return {e.chapter for e in exercise_table()}
    return {int(p) for p in parts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.grade", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="+", help="notebooks, or folders searched recursively for *.ipynb")
    parser.add_argument("--out", default="grades", help="folder for the reports and the class summary (default: grades)")
    parser.add_argument("--format", default="json", choices=FORMATS, help="per-submission report format (default: json)")
    parser.add_argument("--timeout", type=float, default=CELL_TIMEOUT, help=f"seconds per cell (default: {CELL_TIMEOUT:g})")
    parser.add_argument("--notebook-timeout", type=float, default=NOTEBOOK_TIMEOUT, help=f"seconds for the whole notebook (default: {NOTEBOOK_TIMEOUT:g})")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded in parallel, one kernel each (default: 1)")
    parser.add_argument("--chapter", action="append", help="grade these chapters' exercises, e.g. 01 or 01,02 or all (default: detected per notebook)")
    parser.add_argument("--memory-mb", type=int, default=0, help="cap each kernel's memory (RLIMIT_DATA; CPU-only machines); default: no cap")
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        paths = collect(args.submissions, exclude=out)
        chapters = parse_chapters(args.chapter)
    except (FileNotFoundError, ValueError) as error:
        print(f"grade: no such submission or bad --chapter: {error}", file=sys.stderr)
        return 2
    if not paths:
        print("grade: no notebooks found", file=sys.stderr)
        return 2
    reports = asyncio.run(
        grade_many(
            paths,
            out,
            fmt=args.format,
            jobs=args.jobs,
            chapters=chapters,
            cell_timeout=args.timeout,
            notebook_timeout=args.notebook_timeout,
            memory_mb=args.memory_mb,
            progress=not args.quiet,
        )
    )
    if not args.quiet:
        print(summary_text(summarize(reports)), end="")
        print(f"reports in {out}/ (summary.md, summary.csv, summary.json)")
    return 0 if all(r["graded"] for r in reports) else 1


# ===========================================================================
# The budget: grading vs plain execution
# ===========================================================================


def execute_plainly(path: str | Path, timeout: float = NOTEBOOK_TIMEOUT) -> float:
    """Seconds to execute a notebook top to bottom with nbclient (kernel start included), as a
    teacher would without the grader: same kernel, same environment, errors allowed."""
    import nbclient
    import nbformat

    notebook = nbformat.reads(Path(path).read_bytes().decode("utf-8"), as_version=4)
    cwd = tempfile.mkdtemp(prefix="plain-")
    try:
        started = time.perf_counter()
        client = nbclient.NotebookClient(notebook, timeout=int(timeout), kernel_name="python3", allow_errors=True, resources={"metadata": {"path": cwd}})
        client.execute(env=kernel_env())
        return time.perf_counter() - started
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def measure_overhead(notebook: str | Path, repeats: int = 1) -> dict[str, Any]:
    """Grading time over plain execution time for one notebook (budget: 1.3x).
    With repeats > 1, the fastest of each is kept (the machine's noise is one-sided)."""
    plain, graded = [], []
    report: dict[str, Any] = {}
    for _ in range(max(1, repeats)):
        plain.append(execute_plainly(notebook))
        started = time.perf_counter()
        report = grade_notebook(notebook)
        graded.append(time.perf_counter() - started)
    ratio = min(graded) / min(plain)
    return {
        "notebook": str(notebook),
        "execute_s": round(min(plain), 2),
        "grade_s": round(min(graded), 2),
        "ratio": round(ratio, 3),
        "budget": OVERHEAD_BUDGET,
        "within_budget": ratio <= OVERHEAD_BUDGET,
        "score": report.get("score"),
        "max_score": report.get("max_score"),
        "timings": report.get("timings"),  # the last graded run: start, execute, grade (the checks alone)
    }


if __name__ == "__main__":
    sys.exit(main())
