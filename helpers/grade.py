"""Grading a class: run each submitted notebook in a sandbox, then check every exercise.

    python -m helpers.grade SUBMISSION.ipynb [MORE.ipynb | DIR ...] --out DIR
                            [--format json|md|gradescope] [--timeout SECONDS_PER_CELL]
                            [--notebook-timeout SECONDS] [--jobs N] [--chapter NN]
                            [--memory-mb MB] [--no-sandbox] [--quiet]
                            [--feedback diagnosis|hint|fix]

0. Collect. Every submission is read once, before any notebook runs. A symbolic
   link, a file that is not a regular file (a FIFO, a device), or one file
   submitted under two paths is reported and not graded as anyone's work; a
   folder named *.ipynb is skipped with a line in the summary.
1. Sandbox (Linux, bubblewrap; `--no-sandbox` turns it off, and without a usable
   bubblewrap the grader says so and stops). Each kernel sees the system and
   the course's Python read-only, a private scratch folder (memory-backed; its
   HOME and working directory, holding a copy of the one notebook), a private
   /tmp, and nothing else: no other submission, no report, no home directory.
   It has its own PID namespace (it cannot see or signal the grader, and every
   process it starts dies with it), no network (the grader talks to it over
   Unix sockets in a folder bound into the sandbox), hard limits on processes,
   open files, file size and (--memory-mb) memory, and, when the grader runs
   as root, a throwaway user id of its own.
2. Execute. Cells run one by one, errors allowed. A cell that passes its time
   limit is interrupted (killed, if the interrupt does not stop it) and the
   rest goes on. A cell that kills the kernel (`os._exit`, a segfault, the OOM
   killer) is skipped: a new kernel re-runs the cells before it, then the
   rest. --notebook-timeout bounds everything after the kernel's start: cells,
   restarts and checks (a share of it is kept for the checks).
3. Grade. In that same kernel, every exercise of the notebook's chapter is
   checked against what the namespace holds under the exercise's id at the
   end. Each request carries the grader's code, compiled: this file's kernel
   part and the whole `helpers` package as the grader read it when it started
   (never a file a notebook could have rewritten), run in a fresh namespace
   after the import system, torch and builtins are put back as they were
   before the first cell. The verdict comes back in the reply to that request,
   tagged with a per-submission nonce, and the grader validates it; points
   come from the grader's own catalogue.
4. Report. Once the sandbox is gone, one report per submission under --out
   and a class summary (summary.md, summary.json, summary.csv). The exit code
   says whether grading ran (0), failed for a reason that is not the
   students' (1), or could not start (2: a wrong command line, no sandbox).

Limits of the tamper-proofing: the checks run in the student's own Python
process. The sandbox contains whatever a notebook does; replacing the grader's
code, the checker, the catalogue or torch functions, shadowing `helpers`,
rewriting files, reusing the course's reference or printing fake results earns
nothing. Code written to subvert Python or IPython themselves (rebinding
builtins such as `exec` or `__import__`, walking interpreter frames, hooking
IPython's message handlers) is out of scope; the report's `warnings` flag cells
that reach into such internals so a person can look at them.

`measure_overhead(notebook)` times grading against plain execution (the
budget is 1.3x); `helpers.bench` calls it and compares sandboxed grading with
unsandboxed grading.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import base64
import collections
import contextlib
import csv
import functools
import glob
import io
import json
import marshal
import os
import queue
import re
import secrets
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
CELL_TIMEOUT = 60.0  # seconds per cell, --timeout
NOTEBOOK_TIMEOUT = 600.0  # seconds for cells, restarts and checks together, --notebook-timeout
CHECK_TIMEOUT = 60.0  # seconds per exercise's check, at least (a backstop: checks time student calls out themselves)
CHECK_RESERVE = 15.0  # seconds of the notebook's limit kept for each exercise's check (at most a quarter of it)
STARTUP_TIMEOUT = 120.0  # kernel start plus the grader's set-up (imports torch)
INTERRUPT_GRACE = 5.0  # after an interrupt, how long a cell may take to stop before its kernel is killed
MAX_RESTARTS = 3  # kernel deaths/hangs while executing before the grader stops running more cells
GRADING_RESTARTS = 3  # checks that kill the kernel before the grader stops checking
POLL = 0.5  # seconds between "is the kernel still alive?" checks while waiting
# Executing notebooks must not download anything; the device is NOT forced (a GPU grades on the GPU).
KERNEL_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COURSE_PROGRESS_FILE": ""}  # graded kernels keep no progress file
FORMATS = ("json", "md", "gradescope")
OVERHEAD_BUDGET = 1.3
# The sandbox. Its limits are hard (soft = hard), so a notebook cannot raise them again.
PROCESS_LIMIT = 512  # processes and threads in one sandbox (torch and ipykernel need a few dozen)
OPEN_FILES = 1024
FILE_MB = 256  # the largest file a notebook may write
SCRATCH_MB = 512  # the scratch folder and /tmp, each (memory-backed, gone with the sandbox)
# What a sandboxed kernel inherits from the grader's environment: nothing else (tokens and keys stay out).
SANDBOX_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SANDBOX_ENV_PREFIXES = ("COURSE_", "CUDA_", "HIP_", "ROCR_")
INSTALL_BWRAP = (
    "install bubblewrap (Debian, Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install bubblewrap`; "
    "Arch: `sudo pacman -S bubblewrap`), or pass --no-sandbox to grade without one (see the README)"
)

# Cells that reach into the machinery are flagged for a person to look at (they earn nothing from it).
SUSPICIOUS = [
    (
        re.compile(r"\bhelpers\s*\.\s*(checking|registry|exercises|reference|grade)\b|\b_catalogue\b|\bDIAGNOSES\b"),
        "reaches into the course's checking code",
    ),
    (
        re.compile(r"\bsys\s*\.\s*(modules|meta_path|path_hooks|_getframe|settrace|setprofile)\b|\bgc\s*\.\s*get_(objects|referrers)\b"),
        "manipulates the interpreter (sys.modules, import hooks, frames or gc)",
    ),
    (re.compile(r"\bbuiltins\b|__builtins__|^\s*(__import__|exec|eval)\s*=", re.MULTILINE), "changes Python's builtins"),
    (re.compile(r"^\s*(torch|F|nn)(\s*\.\s*\w+)+\s*=[^=]|\bsetattr\s*\(\s*(torch|F|nn)\b", re.MULTILINE), "replaces a torch function"),
    (re.compile(r"\b(input_transformers_\w+|ast_transformers|display_formatter|user_ns|shell_handlers)\b"), "hooks into IPython"),
    (re.compile(r"_course_grader"), "reaches for the grader's records in the kernel"),
]


# ===========================================================================
# Inside the kernel. The grader compiles the code from this banner to the next one
# (`_kernel_code`) and sends it with every request, which runs it in a fresh
# namespace: no function or module a notebook could replace stands between the
# grader's request and the verdict. It imports only the standard library, inside
# its functions. What must outlive a request (Python's builtins and torch as they
# were before the first cell) is kept read-only in the kernel by `kernel_setup`,
# and every request checks that it is the very object that was set up.
# ===========================================================================

_STATE = "_course_grader_state"  # the attribute of `sys` that holds kernel_setup's records
_SKIP_NAMES = {"_", "__", "___"}  # IPython's output history lives in builtins
# Python's own functions, rebound by `_trust` to the copies kernel_setup saved before the first cell:
# a notebook that replaced builtins.isinstance cannot turn the code that undoes it against it.
_vars, _setattr, _delattr, _isinstance, _callable, _type, _exec = vars, setattr, delattr, isinstance, callable, type, exec
_ROOTS: tuple[str, ...] = ()  # where library code lives: anything else is the student's


def _trust(saved: Any, roots: tuple[str, ...]) -> None:
    global _vars, _setattr, _delattr, _isinstance, _callable, _type, _exec, _ROOTS
    _vars, _setattr, _delattr, _isinstance, _callable, _type, _exec = (saved[name] for name in ("vars", "setattr", "delattr", "isinstance", "callable", "type", "exec"))
    _ROOTS = roots


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


def _library_roots(package_dir: str) -> tuple[str, ...]:
    import os
    import sysconfig

    import torch

    paths = sysconfig.get_paths()
    roots = {os.path.dirname(torch.__file__), paths["stdlib"], paths["purelib"], paths["platlib"], package_dir}
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


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
    import os

    function = _python_function(value)
    return function is not None and not os.path.realpath(function.__code__.co_filename).startswith(_ROOTS)


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


def _limit(limits: dict[str, int]) -> None:
    """Hard limits: soft and hard alike, so that the notebook cannot raise them again."""
    if limits:
        import resource

        for name, value in limits.items():
            kind = getattr(resource, name)
            hard = resource.getrlimit(kind)[1]
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (cap, cap))
    try:  # out of memory, this kernel goes first: never the grader
        with open("/proc/self/oom_score_adj", "w") as score:
            score.write("1000")
    except OSError:
        pass


def kernel_setup(limits: dict[str, int], package_dir: str) -> int:
    """Runs in the fresh kernel before any student code: the hard limits, and what clean looks
    like. Returns the id of the records, which the grader sends back with every request."""
    import builtins
    import sys
    import types

    from IPython import get_ipython

    _limit(limits)
    _trust(_vars(builtins), _library_roots(package_dir))
    frozen = types.MappingProxyType
    watched = {label: (obj, frozen(saved)) for label, (obj, saved) in _snapshot(_watched_objects()).items()}
    state = frozen(
        {
            "shell": get_ipython(),
            "builtins": frozen(dict(_vars(builtins))),
            "roots": _ROOTS,
            "meta_path": tuple(sys.meta_path),
            "path_hooks": tuple(sys.path_hooks),
            "watched": frozen(watched),
        }
    )
    _setattr(sys, _STATE, state)
    return id(state)


def kernel_grade(exercise_id: str, nonce: str, state_id: int, package: str) -> str:
    """Check one exercise in this kernel; the verdict as the repr of a plain dict."""
    import sys

    result: dict[str, Any]
    try:
        state = sys.__dict__.get(_STATE)
        if id(state) != state_id:  # replaced: nothing this kernel holds can be checked fairly
            result = {"passed": False, "diagnosis": "changed_global_state", "message": "The notebook replaced the grader's records in its kernel: no exercise can be checked."}
        else:
            result = _grade(exercise_id, state, package)
    except KeyboardInterrupt:
        result = {"passed": False, "diagnosis": "timeout", "message": f"Checking `{exercise_id}` ran past the grader's time limit and was interrupted (an endless loop?)."}
    except BaseException as error:  # noqa: BLE001  (a broken kernel must still answer)
        result = {"passed": False, "diagnosis": "raised", "message": f"The grader could not check `{exercise_id}`: {type(error).__name__}: {error}"[:500]}
    result.update(nonce=nonce, id=exercise_id)
    return repr(result)


def _grade(exercise_id: str, state: Any, package: str) -> dict[str, Any]:
    from IPython.core.formatters import DisplayFormatter

    _trust(state["builtins"], state["roots"])
    shell = state["shell"]
    shell.display_formatter = DisplayFormatter(parent=shell)  # the reply is formatted by IPython's own
    watched = {label: (obj, dict(saved)) for label, (obj, saved) in state["watched"].items()}
    _restore(watched)
    fresh = _fresh_helpers(package, state)
    parts, tables = _parts(fresh["modules"]), fresh["tables"]()
    result = _check_one(exercise_id, fresh, shell)
    changed = _restore(watched) + _changed(parts, _parts(fresh["modules"]))
    changed += ["helpers.exercises"] if fresh["tables"]() != tables else []
    if changed:
        return {
            "passed": False,
            "diagnosis": "changed_global_state",
            "message": f"While `{exercise_id}` was being checked, it replaced {', '.join(sorted(set(changed))[:3])}. Your code must not patch torch, builtins or the course's checking code.",
        }
    return result


def _fresh_helpers(package: str, state: Any) -> dict[str, Any]:
    """Drop every `helpers*` module the notebook saw, put the import system back as it was before
    the first cell, and load `helpers` anew from the code the grader sent (never from a file)."""
    import base64
    import importlib
    import importlib.util
    import marshal
    import os
    import sys
    import zlib

    codes = marshal.loads(zlib.decompress(base64.b64decode(package)))  # {module: (file name, is a package, code)}

    class Loader:
        @staticmethod
        def create_module(spec: Any) -> None:
            return None

        @staticmethod
        def exec_module(module: Any) -> None:
            _exec(codes[module.__name__][2], module.__dict__)

    class Finder:
        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
            if name != "helpers" and not name.startswith("helpers."):
                return None
            if name not in codes:
                raise ModuleNotFoundError(f"{name} is not part of the grader's helpers")
            filename, is_package, _ = codes[name]
            where = [os.path.dirname(filename)] if is_package else None
            return importlib.util.spec_from_file_location(name, filename, loader=Loader, submodule_search_locations=where)

    for name in [n for n in sys.modules if n == "helpers" or n.startswith("helpers.")]:
        del sys.modules[name]
    sys.meta_path[:] = [Finder, *state["meta_path"]]  # no import hook the notebook installed
    sys.path_hooks[:] = state["path_hooks"]
    sys.path_importer_cache.clear()
    registry = importlib.import_module("helpers.registry")
    checking = importlib.import_module("helpers.checking")
    catalogue = importlib.import_module("helpers.exercises")._catalogue()  # imports every chapter's module
    modules = {n: m for n, m in sys.modules.items() if n == "helpers" or n.startswith("helpers.")}
    strays = [name for name, module in modules.items() if getattr(module.__spec__, "loader", None) is not Loader]
    if strays:
        raise ImportError(f"{', '.join(strays)} did not come from the grader")
    _route_to(modules["helpers.reference"])
    return {"checking": checking, "modules": modules, "tables": lambda: (dict(catalogue), dict(registry.DIAGNOSES))}


def _route_to(reference: Any) -> None:
    """The checks watch the functions of the fresh `helpers.reference` for calls from student code
    (`uses_reference`). The notebook holds its own copies, imported before grading, wherever it
    keeps them: each now calls the fresh function of the same name, so reusing a copy is seen too."""
    import gc
    import types

    kind, path, fresh = types.FunctionType, reference.__file__, _vars(reference)
    copies = [f for f in gc.get_objects() if _type(f) is kind and f.__code__.co_filename == path and f.__globals__ is not fresh]
    code = {}
    for function in copies:
        name = getattr(function.__code__, "co_qualname", function.__qualname__)
        if function.__code__.co_freevars or "<" in name:
            continue  # a closure, whose code cannot be swapped (the checks skip those too)
        if name not in code:
            call = f"def route(*args, **kwargs):\n    return __import__('sys').modules['helpers.reference'].{name}(*args, **kwargs)\n"
            template = next(c for c in compile(call, "<the grader: to the fresh reference>", "exec").co_consts if _isinstance(c, types.CodeType))
            code[name] = template.replace(co_name=function.__name__)
        function.__code__, function.__defaults__, function.__kwdefaults__ = code[name], None, None


def _parts(modules: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Every attribute of the fresh modules and of the classes they define, with each function's
    code and defaults: what a submission must leave alone while it is being checked."""
    import types

    def identity(value: Any) -> tuple[Any, ...]:
        return (value, value.__code__, value.__defaults__, value.__kwdefaults__) if _type(value) is types.FunctionType else (value,)

    parts = {}
    for name, module in modules.items():
        for attr, value in list(_vars(module).items()):
            parts[f"{name}.{attr}"] = identity(value)
            if _isinstance(value, _type) and _vars(value).get("__module__") == name:
                for member, inner in list(_vars(value).items()):
                    parts[f"{name}.{attr}.{member}"] = identity(inner)
    return parts


def _changed(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> list[str]:
    """Names rebound, or new and written by the student (a lazy import adding a submodule is fine)."""
    missing = (None,)
    changed = []
    for name, now in after.items():
        then = before.get(name, missing)
        if then is missing:
            if _written_by_student(now[0]):
                changed.append(name)
        elif len(now) != len(then) or any(a is not b for a, b in zip(now, then)):
            changed.append(name)
    return changed + [name for name in before if name not in after]


def _check_one(exercise_id: str, fresh: dict[str, Any], shell: Any) -> dict[str, Any]:
    namespace = shell.user_ns
    if exercise_id not in namespace:
        return {
            "passed": False,
            "diagnosis": "not_implemented",
            "message": f"`{exercise_id}` is not defined in the notebook: the cell that defines it was deleted or renamed, or did not run (see the errors above it).",
        }
    outcome = fresh["checking"].check(exercise_id, namespace[exercise_id])
    if not _isinstance(outcome, fresh["checking"].CheckResult):
        raise TypeError("check() did not return a CheckResult")
    passed = outcome.passed is True
    verdict = {"passed": passed, "diagnosis": None if passed else str(outcome.diagnosis), "message": str(outcome.message)}
    return {**verdict, "hint": str(outcome.hint), "fix": str(outcome.fix), "also": [str(finding) for finding in outcome.also]}


# ===========================================================================
# The grader's side: what it sends into the kernel
# ===========================================================================

_SOURCE = Path(__file__).read_text(encoding="utf-8")  # read once, when the grader starts


@functools.cache
def _kernel_code() -> str:
    """The kernel part of this file, compiled (marshal, base64). Blank lines stand in for the
    lines before it, so that a traceback from the kernel names this file's line numbers."""
    start, end = _SOURCE.index("\n# Inside the kernel."), _SOURCE.index("\n# The grader's side: what it sends")
    text = "\n" * _SOURCE.count("\n", 0, start) + _SOURCE[start:end]
    code = compile(text, __file__, "exec", flags=annotations.compiler_flag, dont_inherit=True)  # (the __future__ feature)
    return base64.b64encode(marshal.dumps(code)).decode("ascii")


@functools.cache
def package_code(package_dir: Path) -> str:
    """Every module of the `helpers` package in `package_dir`, compiled now, before any notebook
    runs (zlib, marshal, base64): each check loads these, not the files on disk."""
    codes = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join((package_dir.name, *(parts[:-1] if is_package else parts)))
        codes[name] = (str(path), is_package, compile(path.read_text(encoding="utf-8"), str(path), "exec", dont_inherit=True))
    return base64.b64encode(zlib.compress(marshal.dumps(codes))).decode("ascii")


def _kernel_call(function: str, *args: Any) -> str:
    """An expression that runs the kernel part of this file, fresh, and calls one of its functions."""
    arguments = ", ".join(repr(a) for a in args)
    load = "__import__('marshal').loads(__import__('base64').b64decode(code))"
    run = f"(__import__('builtins').exec({load}, namespace), namespace[{function!r}]({arguments}))[1]"
    return f"(lambda code, namespace: {run})({_kernel_code()!r}, {{'__name__': '_course_grader'}})"


# ===========================================================================
# The sandbox (Linux): every kernel runs under bubblewrap
# ===========================================================================


class Scratch:
    """A submission's private folder on the host, removed after grading: `work`, the kernel's
    working directory and HOME, which holds a copy of the notebook (in the sandbox, a
    memory-backed folder of its own), and `ipc`, the kernel's sockets and connection file.
    When the grader is root, a sandboxed kernel runs as `uid`, a user id of its own: root's
    processes are exempt from the process limit."""

    def __init__(self, notebook_name: str, data: bytes, sandboxed: bool):
        self.root = Path(tempfile.mkdtemp(prefix="grade-"))
        self.work, self.ipc, self.notebook = self.root / "work", self.root / "ipc", self.root / "notebook" / notebook_name
        for folder in (self.work, self.ipc, self.notebook.parent):
            folder.mkdir()
        self.notebook.write_bytes(data)
        if not sandboxed:
            shutil.copy(self.notebook, self.work / notebook_name)
        self.uid = 2**20 + secrets.randbelow(2**30) if sandboxed and os.geteuid() == 0 else None
        if self.uid is not None:
            os.chown(self.ipc, self.uid, self.uid)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _python_paths() -> set[str]:
    """Where this Python, its standard library and its packages live."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable), *sysconfig.get_paths().values()}
    if site.ENABLE_USER_SITE:
        paths.add(site.getusersitepackages())
    return {p for path in paths if path for p in (os.path.abspath(path), os.path.realpath(path)) if os.path.isdir(p)}


def _font_lists() -> list[Path]:
    """matplotlib's font list from the grader's own cache: without it, every sandboxed kernel
    that draws a figure would spend half a second building it again."""
    cache = os.environ.get("MPLCONFIGDIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "matplotlib")
    return sorted(Path(cache).glob("fontlist-*.json"))


def sandbox_env(scratch: Scratch) -> dict[str, str]:
    """A sandboxed kernel's whole environment."""
    env = {k: v for k, v in os.environ.items() if k in SANDBOX_ENV or k.startswith(SANDBOX_ENV_PREFIXES)}
    home = str(scratch.work)
    env.update(KERNEL_ENV, HOME=home, TMPDIR="/tmp", MPLCONFIGDIR=f"{home}/.matplotlib", PYTHONPATH=str(PACKAGE_DIR.parent))
    # Run as root, the kernel's user has no passwd entry: getpass.getuser() (torch's compile caches
    # ask it on a GPU machine) reads these first, instead of failing in pwd.getpwuid().
    env.update(USER="student", LOGNAME="student")
    env.setdefault("PATH", os.defpath)
    return env


def bwrap_command(scratch: Scratch) -> list[str]:
    """The command line that starts a sandbox around the command that follows it."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args.append("--clearenv")
    for key, value in sandbox_env(scratch).items():
        args += ["--setenv", key, value]
    mounted: set[str] = {"/"}  # mount points and the folders made on the way to them

    def mount(*option: str, path: str | Path) -> None:
        path = str(path)
        for parent in reversed(Path(path).parents):  # bwrap would make them 0700: unreachable to a kernel's own user
            if str(parent) not in mounted:
                args.extend(["--perms", "0755", "--dir", str(parent)])
                mounted.add(str(parent))
        args.extend([*option, path])
        mounted.add(path)

    def tmpfs(path: str | Path, megabytes: int) -> None:  # memory-backed, writable by the kernel's user
        if _bwrap_sizes_tmpfs():
            mount("--perms", "1777", "--size", str(megabytes * 2**20), "--tmpfs", path=path)
        else:  # bubblewrap before 0.8: no size cap
            mount("--tmpfs", path=path)
            args.extend(["--chmod", "1777", str(path)])

    mount("--dev", path="/dev")
    for device in sorted(glob.glob("/dev/nvidia*")) + ["/dev/dri", "/dev/kfd"]:  # GPUs, if any
        if os.path.exists(device):
            mount("--dev-bind", device, path=device)
    tmpfs("/dev/shm", 64)
    mount("--proc", path="/proc")
    tmpfs("/tmp", SCRATCH_MB)  # first: a Python or a package under /tmp goes on top
    readonly = ["/usr", "/etc", "/opt", "/nix", "/sys", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", str(PACKAGE_DIR)]
    bound: list[str] = []
    for path in sorted({p for p in readonly if os.path.lexists(p)} | _python_paths()):
        if any(path.startswith(b + "/") for b in bound):
            continue  # inside a folder already bound
        bound.append(path)
        if os.path.islink(path):  # /bin -> usr/bin on merged-/usr systems
            mount("--symlink", os.readlink(path), path=path)
        else:
            mount("--ro-bind", path, path=path)
    mount("--bind", str(scratch.ipc), path=scratch.ipc)
    tmpfs(scratch.work, SCRATCH_MB)
    mount("--ro-bind", str(scratch.notebook), path=scratch.work / scratch.notebook.name)
    fonts = scratch.work / ".matplotlib"
    args += ["--perms", "0777", "--dir", str(fonts)]
    for font_list in _font_lists():
        args += ["--ro-bind", str(font_list), str(fonts / font_list.name)]
    args += ["--chdir", str(scratch.work)]
    if scratch.uid is None:
        return [*args, "--"]
    # Root: bwrap mounts what root can read, then the kernel becomes a user of its own, without capabilities.
    become = ["setpriv", f"--reuid={scratch.uid}", f"--regid={scratch.uid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    return [*args, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", *become]


@functools.cache
def _bwrap_sizes_tmpfs() -> bool:
    """bubblewrap 0.8 and later cap a tmpfs's size (--size)."""
    return "--size" in subprocess.run(["bwrap", "--help"], capture_output=True, text=True).stdout


@functools.cache
def sandbox_problem() -> str | None:
    """None when kernels can run sandboxed here; else one line: why not, and what to do."""
    if not sys.platform.startswith("linux"):
        return f"there is no sandbox on {sys.platform} (bubblewrap needs Linux): grade in containers (see the README), or pass --no-sandbox"
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed: {INSTALL_BWRAP}"
    scratch = Scratch("probe.ipynb", b"{}", sandboxed=True)
    trial = "import ipykernel, os; open('probe.ipynb').close(); open('written', 'w').close(); os.listdir('/proc')"
    try:
        result = subprocess.run([*bwrap_command(scratch), sys.executable, "-c", trial], capture_output=True, text=True, timeout=STARTUP_TIMEOUT)
        if result.returncode == 0:
            return None
        reason = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired) as error:
        reason = str(error)
    finally:
        scratch.remove()
    return f"bubblewrap cannot make a sandbox here ({reason}); allow user namespaces (see the README), or pass --no-sandbox"


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
    kind: str  # ok | error | timeout (interrupted, kernel usable) | stuck (the interrupt did not stop it) | dead
    content: dict[str, Any] = field(default_factory=dict)


STOPPED = {"timeout": "was interrupted", "stuck": "was killed after the interrupt did not stop it"}


class Kernel:
    """One ipykernel (sandboxed unless told otherwise), driven over jupyter_client.

    Why not nbclient's execute_cell: on a timeout nbclient interrupts the
    kernel again and again and never escalates to a kill, and it keeps every
    output, which grading does not need. Here each request is: send, wait for
    its own reply while watching the process, interrupt at the limit, kill if
    the interrupt does not stop it."""

    def __init__(self, scratch: Scratch, nonce: str, limits: dict[str, int], sandboxed: bool):
        self.scratch, self.nonce, self.limits, self.sandboxed = scratch, nonce, limits, sandboxed
        self.state_id = 0
        self.km: Any = None
        self.kc: Any = None
        self._drain: asyncio.Task | None = None

    async def start(self) -> None:
        from jupyter_client import AsyncKernelManager

        prefix = bwrap_command(self.scratch) if self.sandboxed else []

        class Manager(AsyncKernelManager):
            def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
                # This very Python (the grader's code is compiled for it), in its sandbox.
                return [*prefix, sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]

        if self.sandboxed:  # no network inside: Unix sockets in a folder bound into the sandbox, interrupts by message
            ipc = self.scratch.ipc
            self.km = Manager(transport="ipc", ip=str(ipc / "kernel"), connection_file=str(ipc / "kernel.json"))
            self.km.kernel_spec.interrupt_mode = "message"
            self.km.write_connection_file()
            if self.scratch.uid is not None:
                os.chown(self.km.connection_file, self.scratch.uid, self.scratch.uid)
        else:
            self.km = Manager()
        # The kernel's own stdout/stderr (not the notebook's outputs): warnings and crash dumps nobody reads.
        await self.km.start_kernel(cwd=str(self.scratch.work), env=kernel_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=STARTUP_TIMEOUT)
        self._drain = asyncio.ensure_future(self._drain_iopub())
        setup = _kernel_call("kernel_setup", self.limits, str(PACKAGE_DIR))
        outcome = await self.run("", STARTUP_TIMEOUT, silent=True, user_expressions={"state": setup})
        try:
            self.state_id = int(expression_value(outcome, "state"))
        except (ValueError, KeyError, TypeError, SyntaxError) as error:
            raise GraderError(f"the grader's set-up failed in the kernel ({outcome.kind}): {last_line(outcome.content) or error}") from None

    async def grade(self, exercise_id: str, timeout: float) -> Outcome:
        """Check one exercise with this file's kernel code and the `helpers` package read at the start."""
        request = _kernel_call("kernel_grade", exercise_id, self.nonce, self.state_id, package_code(PACKAGE_DIR))
        return await self.run("", timeout, silent=True, user_expressions={"verdict": request})

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
            if isinstance(after, Outcome):  # an interrupt does not stop a long C call, a process ignoring SIGINT, a broken handler
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
        """Kill the kernel: the sandbox, and every process in it, goes with it."""
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


class OutOfTime(Exception):
    """The notebook's time limit ran out while its kernel had to be restarted."""


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def last_line(content: dict[str, Any]) -> str:
    """The last line of a reply's traceback, without colours."""
    lines = [ANSI.sub("", line) for entry in content.get("traceback") or [] for line in str(entry).splitlines()]
    lines = [line.strip() for line in lines if line.strip()]
    if lines:
        return lines[-1][:500]
    ename, evalue = content.get("ename"), content.get("evalue")
    return f"{ename}: {evalue}"[:500] if ename else ""


def expression_value(outcome: Outcome, name: str) -> Any:
    """The value of one of the request's user expressions (a Python literal); raises if there is none."""
    value = outcome.content["user_expressions"][name]
    if value.get("status") != "ok":
        raise ValueError(f"{value.get('ename')}: {value.get('evalue')}")
    return ast.literal_eval(value["data"]["text/plain"])


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
    ):
        self.cells, self.exercises = cells, exercises
        self.cell_timeout, self.notebook_timeout, self.memory_mb = cell_timeout, notebook_timeout, memory_mb
        self.sandboxed, self.notebook_name, self.data = sandboxed, notebook_name, data
        self.nonce = secrets.token_hex(16)
        self.errors: list[dict[str, Any]] = []
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

    async def new_kernel(self) -> None:
        """A fresh kernel in place of the current one, which is killed first."""
        await self.stop_kernel()
        kernel = Kernel(self.scratch, self.nonce, self.limits(), self.sandboxed)
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

    async def run(self) -> list[dict[str, Any]]:
        if self.sandboxed and sandbox_problem():
            raise GraderError(f"no sandbox: {sandbox_problem()}")
        self.scratch = Scratch(self.notebook_name, self.data, self.sandboxed)
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
                self.error(index, "NotebookTimeout", f"the notebook ran past its {self.notebook_limit()}: this cell and the ones after it were not run")
                return
            limit = min(self.cell_timeout, remaining)
            outcome = await self.kernel.run(source, limit)
            try:
                if outcome.kind == "error":
                    self.error(index, str(outcome.content.get("ename") or "Error"), last_line(outcome.content))
                elif outcome.kind in ("timeout", "stuck"):
                    self.skip.add(index)
                    if limit < self.cell_timeout:
                        ended = f"in this cell, which {STOPPED[outcome.kind]}; the cells after it were not run"
                        self.error(index, "NotebookTimeout", f"the notebook ran past its {self.notebook_limit()} {ended}")
                    else:
                        self.error(index, "CellTimeout", f"the cell ran past its {self.cell_timeout:g} s limit and {STOPPED[outcome.kind]}")
                    if outcome.kind == "stuck":
                        await self.recover(self.cells[:position])
                    if limit < self.cell_timeout:
                        return
                elif outcome.kind == "dead":
                    self.skip.add(index)
                    self.error(index, "KernelDied", "the kernel died in this cell (os._exit, a crash or running out of memory); the cells before it were re-run in a new kernel")
                    await self.recover(self.cells[:position])
            except OutOfTime:
                ended = "while its kernel was restarted; the cells after this one were not run"
                self.error(index, "NotebookTimeout", f"the notebook ran past its {self.notebook_limit()} {ended}")
                return
            if self.restarts >= MAX_RESTARTS and position + 1 < len(self.cells):
                self.error(None, "TooManyKernelDeaths", f"the kernel died or hung {self.restarts} times; the cells after cell {index} were not run")
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
                outcome = await self.kernel.run(source, max(limit, 0.01))
                if outcome.kind in ("timeout", "stuck") and limit < self.cell_timeout:
                    await self.stop_kernel()
                    raise OutOfTime
                if outcome.kind in ("timeout", "stuck", "dead"):
                    self.skip.add(index)
                    what = "died" if outcome.kind == "dead" else f"hung and {STOPPED[outcome.kind]}"
                    self.error(index, "KernelDied" if outcome.kind == "dead" else "CellTimeout", f"when re-run after a kernel restart, this cell {what}; it was skipped")
                    if outcome.kind != "timeout":
                        break
            else:
                return

    async def grade(self) -> list[dict[str, Any]]:
        results = []
        check_limit = max(CHECK_TIMEOUT, self.cell_timeout)
        deaths = 0
        for position, exercise in enumerate(self.exercises):
            remaining = self.remaining()
            if deaths > GRADING_RESTARTS:
                results.append(self.verdict(exercise, False, "raised", "Not checked: checking the exercises before it killed the kernel again and again."))
                continue
            if self.kernel is None or remaining <= 0:
                results.append(self.verdict(exercise, False, "timeout", f"Not checked: the notebook used up its {self.notebook_limit()} before this exercise."))
                continue
            limit = min(check_limit, remaining)
            outcome = await self.kernel.grade(exercise.id, limit)
            if outcome.kind == "ok":
                results.append(self.parse(exercise, outcome.content))
            elif outcome.kind == "error":
                results.append(self.verdict(exercise, False, "raised", f"The grader could not check `{exercise.id}`: {last_line(outcome.content)}"))
            elif outcome.kind == "dead":
                results.append(self.verdict(exercise, False, "raised", f"Checking `{exercise.id}` killed the kernel (os._exit, a crash or running out of memory)."))
            else:
                which = f"the notebook's {self.notebook_limit()}" if limit < check_limit else f"the grader's {check_limit:g} s limit for one check"
                results.append(self.verdict(exercise, False, "timeout", f"Checking `{exercise.id}` ran past {which} and {STOPPED[outcome.kind]}."))
            if outcome.kind in ("stuck", "dead"):
                deaths += 1
                if position + 1 < len(self.exercises) and deaths <= GRADING_RESTARTS:  # the rest in a new kernel, same state
                    try:
                        await self.recover([c for c in self.cells if c[0] not in self.skip])
                    except OutOfTime:
                        pass
                else:
                    await self.stop_kernel()
        return results

    def parse(self, exercise: ExerciseInfo, content: dict[str, Any]) -> dict[str, Any]:
        """Only a well-formed reply to the grader's own request counts: this exercise, this
        submission's nonce, the fields a verdict has and nothing else."""
        try:
            data = ast.literal_eval(expression_value(Outcome("ok", content), "verdict"))
            if not isinstance(data, dict) or not VERDICT <= set(data) <= VERDICT | HELP:
                raise ValueError("a malformed verdict")
            if data["nonce"] != self.nonce or data["id"] != exercise.id:
                raise ValueError("a verdict without this submission's nonce")
            passed, diagnosis, message = data["passed"], data["diagnosis"], data["message"]
            if not isinstance(passed, bool) or not isinstance(message, str) or not (diagnosis is None or isinstance(diagnosis, str)):
                raise ValueError("a malformed verdict")
            hint, fix, also = data.get("hint", ""), data.get("fix", ""), data.get("also", [])
            if not (isinstance(hint, str) and isinstance(fix, str) and isinstance(also, list) and all(isinstance(a, str) for a in also)):
                raise ValueError("a malformed verdict")
        except Exception as error:  # noqa: BLE001
            return self.verdict(exercise, False, "raised", f"The grader got no valid verdict for `{exercise.id}` ({type(error).__name__}).")
        if not passed and diagnosis not in diagnoses():
            diagnosis = "raised"
        return self.verdict(exercise, passed, None if passed else diagnosis, message[:2000], hint[:2000], fix[:2000], [a[:2000] for a in also[:10]])

    @staticmethod
    def verdict(exercise: ExerciseInfo, passed: bool, diagnosis: str | None, message: str, hint: str = "", fix: str = "", also: list[str] | None = None) -> dict[str, Any]:
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
    """Which chapters a notebook is: those whose exercises it checks; else those whose
    exercises it defines; else the NN_ prefix of its file name; else every chapter.
    Checks come first: a chapter pastes in an earlier chapter's function to build on it
    (chapter 05 defines chapter 03's relative_shift_matrix) without being that chapter."""
    text = "\n".join(sources)
    for pattern in (r"\b(check|solution_or_reference)\(\s*['\"]{name}['\"]", r"\b(def|class)\s+{name}\b|^{name}\s*="):
        found = {e.chapter for e in exercises if re.search(pattern.format(name=re.escape(e.id)), text, re.MULTILINE)}
        if found:
            return found
    match = re.match(r"(\d+)_", filename)
    chapters = {e.chapter for e in exercises}
    if match and int(match.group(1)) in chapters:
        return {int(match.group(1))}
    return chapters


def suspicious(cells: list[tuple[int, str]]) -> list[dict[str, Any]]:
    return [{"cell": index, "message": f"this cell {what}; that earns nothing in grading, but look at it by hand"} for index, source in cells for pattern, what in SUSPICIOUS if pattern.search(source)]


@dataclass
class Found:
    """A submission as collected: its path as named or found (links not followed), its bytes,
    read once before any notebook runs, or the reason it is not graded as anyone's work."""

    path: Path
    data: bytes | None = None
    problem: tuple[str, str] | None = None  # (error type, message)
    notes: list[str] = field(default_factory=list)  # for a person to look at: the warnings of its report
    inode: tuple[int, int] | None = None


NOT_GRADED = ("SymbolicLink", "NotARegularFile", "SameFile")  # problems that flag a submission


async def grade_notebook_async(
    path: str | Path,
    *,
    name: str | None = None,
    chapters: set[int] | None = None,
    cell_timeout: float = CELL_TIMEOUT,
    notebook_timeout: float = NOTEBOOK_TIMEOUT,
    memory_mb: int = 0,
    exercises: list[ExerciseInfo] | None = None,
    sandbox: bool = True,
    found: Found | None = None,
) -> dict[str, Any]:
    """Execute and grade one notebook; the report as a dict (see `report_json`).
    `found` is the submission as `collect` read it; without it, `path` is read here."""
    path = Path(path)
    found = found or read_submission(path)
    exercises = exercises if exercises is not None else exercise_table()
    started = time.monotonic()
    cells: list[tuple[int, str]] = []
    sources: list[str] = []
    problem = found.problem
    if problem is None:
        try:
            cells, sources = read_cells(found.data or b"")
        except Exception as error:  # noqa: BLE001  (not a notebook: graded as empty)
            problem = ("NotebookFormatError", f"the submission could not be read as a notebook: {type(error).__name__}: {error}"[:500])
    wanted = chapters or detect_chapters(sources, path.name, exercises)
    selected = [e for e in exercises if e.chapter in wanted]
    copy = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name).lstrip(".") or "submission.ipynb"
    submission = Submission(cells, selected, cell_timeout=cell_timeout, notebook_timeout=notebook_timeout, memory_mb=memory_mb, sandboxed=sandbox, notebook_name=copy, data=found.data or b"")
    graded = True
    try:
        if problem is not None:  # nothing to run
            submission.error(None, *problem)
            results = [Submission.verdict(e, False, "not_implemented", f"Not graded: {problem[1]}.") for e in selected]
        else:
            results = await submission.run()
    except Exception as error:  # noqa: BLE001  (no sandbox, the kernel did not start, ...: not the student's fault)
        graded = False
        submission.error(None, "GraderError", f"{type(error).__name__}: {error}"[:500])
        results = [Submission.verdict(e, False, "raised", "Not graded: the grader failed (see the errors).") for e in selected]
    return {
        "submission": name or str(path),
        "score": sum(r["score"] for r in results),
        "max_score": sum(r["max_score"] for r in results),
        "exercises": results,
        "errors": submission.errors,
        "warnings": [{"cell": None, "message": note} for note in found.notes] + suspicious(cells),
        "flag": problem[0] if problem and problem[0] in NOT_GRADED else None,
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


# What students see of each failure: the diagnosis (and further findings) always; the hint
# from "hint" on; the fix only with "fix". The class summary never depends on it.
FEEDBACK = ("diagnosis", "hint", "fix")
VERDICT, HELP = {"passed", "diagnosis", "message", "nonce", "id"}, {"hint", "fix", "also"}


def for_students(report: dict[str, Any], feedback: str) -> dict[str, Any]:
    """The report with each exercise's help cut to the feedback level."""
    hidden = FEEDBACK[FEEDBACK.index(feedback) + 1 :]
    return {**report, "exercises": [{k: v for k, v in ex.items() if k not in hidden} for ex in report["exercises"]]}


def _help_lines(ex: dict[str, Any]) -> list[str]:
    return [f"Also: {a}" for a in ex.get("also", [])] + [f"{label}: {ex[key]}" for key, label in (("hint", "Hint"), ("fix", "Fix")) if ex.get(key)]


def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def _cell(text: Any) -> str:
    """Markdown table cell: one line, pipes escaped."""
    return " ".join(str("" if text is None else text).split()).replace("|", "\\|")


def report_markdown(report: dict[str, Any]) -> str:
    lines = [f"# {report['submission']}", "", f"**Score: {report['score']:g} / {report['max_score']:g}**", ""]
    if report.get("flag"):
        lines += [f"**Not graded as anyone's work ({report['flag']}): see the errors.**", ""]
    lines += ["| exercise | result | score | diagnosis | message |", "|---|---|---|---|---|"]
    for ex in report["exercises"]:
        result = "✔ passed" if ex["passed"] else "✘ failed"
        said = " ".join([ex["message"], *([] if ex["passed"] else _help_lines(ex))])
        lines.append(f"| `{ex['id']}` | {result} | {ex['score']:g} / {ex['max_score']:g} | {_cell(ex['diagnosis'])} | {_cell(said)} |")
    if report["errors"]:
        lines += ["", "## Errors while running the notebook", "", "Cells are numbered from 0, counting text cells.", "", "| cell | error | last line of the traceback |", "|---|---|---|"]
        lines += [f"| {_cell(e['cell'])} | {_cell(e['type'])} | {_cell(e['message'])} |" for e in report["errors"]]
    if report.get("warnings"):
        lines += ["", "## For a person to look at", ""]
        lines += [f"- cell {w['cell']}: {w['message']}" if w["cell"] is not None else f"- {w['message']}" for w in report["warnings"]]
    return "\n".join(lines) + "\n"


def report_gradescope(report: dict[str, Any]) -> str:
    """Gradescope's autograder results.json."""
    tests = []
    for ex in report["exercises"]:
        output = ex["message"] if ex["passed"] else "\n".join([f"{ex['diagnosis']}: {ex['message']}", *_help_lines(ex)])
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


def read_submission(path: Path) -> Found:
    """A submission's bytes, read once, never following a link or blocking on a FIFO."""
    found = Found(path)
    if os.path.islink(path):
        found.problem = ("SymbolicLink", f"the submission is a symbolic link (to {os.readlink(path)}), not a file of its own")
        return found
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        found.problem = ("NotebookFormatError", f"the submission could not be read: {error.strerror}")
        return found
    with open(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):
            found.problem = ("NotARegularFile", "the submission is a folder")
        elif not stat.S_ISREG(status.st_mode):
            found.problem = ("NotARegularFile", "the submission is not a regular file (a FIFO, a socket or a device)")
        else:
            found.data, found.inode = file.read(), (status.st_dev, status.st_ino)
    return found


def collect(arguments: list[str], exclude: Path | None = None) -> tuple[list[Found], list[dict[str, str]]]:
    """The submissions named, or found (recursively) in the named folders, each read now; and
    what was skipped (folders named *.ipynb, links to folders). Raises FileNotFoundError."""
    found: dict[str, Found] = {}  # by absolute path, links not resolved: one path named twice is one submission
    skipped: list[dict[str, str]] = []
    excluded = exclude.resolve() if exclude is not None else None
    for argument in arguments:
        top = Path(argument)
        if not os.path.lexists(top):
            raise FileNotFoundError(argument)
        if not top.is_dir() or top.is_symlink() and top.suffix == ".ipynb":
            found.setdefault(os.path.abspath(top), Found(top))
            continue
        for folder, subfolders, files in os.walk(top):  # never into a linked folder
            keep = []
            for name in sorted(subfolders):
                path = Path(folder, name)
                if name == ".ipynb_checkpoints" or path.resolve() == excluded:
                    continue
                if path.is_symlink():
                    if name.endswith(".ipynb"):
                        found.setdefault(os.path.abspath(path), Found(path))
                    else:
                        skipped.append({"path": str(path), "reason": "a link to a folder: not followed"})
                elif name.endswith(".ipynb"):
                    skipped.append({"path": str(path), "reason": "a folder named *.ipynb, not a notebook"})
                else:
                    keep.append(name)
            subfolders[:] = keep
            for name in sorted(files):
                if name.endswith(".ipynb"):
                    found.setdefault(os.path.abspath(Path(folder, name)), Found(Path(folder, name)))
    submissions = [read_submission(item.path) for item in found.values()]
    flag_shared_files(submissions)
    return submissions, skipped


def flag_shared_files(submissions: list[Found]) -> None:
    """One file under two paths (a hard link) is two students claiming one piece of work: each is
    flagged and neither is graded. A file that a submitted link points to is graded, with a note."""
    by_inode = collections.defaultdict(list)
    for item in submissions:
        if item.inode is not None:
            by_inode[item.inode].append(item)
    for group in by_inode.values():
        for item in group if len(group) > 1 else ():
            others = ", ".join(str(o.path) for o in group if o is not item)
            item.problem = ("SameFile", f"the submission is the same file as {others} (a hard link): decide by hand whose work it is")
            item.data = None
    for item in submissions:
        if item.problem and item.problem[0] == "SymbolicLink":
            with contextlib.suppress(OSError):
                target = os.stat(item.path)
                for other in by_inode.get((target.st_dev, target.st_ino), []):
                    other.notes.append(f"{item.path} is a symbolic link to this submission")


def report_names(paths: list[Path]) -> list[str]:
    """A file name per submission: its stem, with as many parent folders as it takes
    to tell colliding ones apart (alice/ch01 -> alice__ch01, bob/ch01 -> bob__ch01)."""
    parts = [Path(os.path.abspath(p)).with_suffix("").parts for p in paths]  # a link is named after itself
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


def summarize(reports: list[dict[str, Any]], skipped: list[dict[str, str]] | None = None) -> dict[str, Any]:
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
        {
            "submission": r["submission"],
            "score": r["score"],
            "max_score": r["max_score"],
            "errors": len(r["errors"]),
            "graded": r["graded"],
            "flag": r.get("flag"),
            "exercises": {e["id"]: e["score"] for e in r["exercises"]},
        }
        for r in reports
    ]
    return {"submissions": len(reports), "students": students, "exercises": list(exercises.values()), "skipped": list(skipped or [])}


def _status(student: dict[str, Any]) -> str:
    if not student["graded"]:
        return "NOT GRADED (grader error)"
    return f"FLAGGED, not graded as anyone's work: {student['flag']}" if student.get("flag") else ""


def summary_markdown(summary: dict[str, Any]) -> str:
    lines = [f"# Class summary: {summary['submissions']} submissions", "", "| submission | score | errors |", "|---|---|---|"]
    for s in summary["students"]:
        note = f" ({_status(s)})" if _status(s) else ""
        lines.append(f"| {_cell(s['submission'])} | {s['score']:g} / {s['max_score']:g}{note} | {s['errors']} |")
    lines += ["", "| exercise | passed | most common mistake |", "|---|---|---|"]
    for e in summary["exercises"]:
        mistake = f"`{e['most_common_diagnosis']}` ×{e['most_common_count']}: {e['meaning']}" if e["most_common_diagnosis"] else "none"
        lines.append(f"| `{e['id']}` | {e['passed']}/{e['submissions']} ({e['pass_rate']:.0%}) | {_cell(mistake)} |")
    if summary.get("skipped"):
        lines += ["", "Skipped:", ""] + [f"- `{_cell(s['path'])}`: {s['reason']}" for s in summary["skipped"]]
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
        lines.append(f"{s['submission']:<{width}}  {s['score']:g}/{s['max_score']:g}" + (f"  {_status(s)}" if _status(s) else ""))
    lines += ["", f"{'exercise':<{width}}  passed        most common mistake"]
    for e in summary["exercises"]:
        rate = f"{e['passed']}/{e['submissions']} ({e['pass_rate']:.0%})"
        mistake = f"{e['most_common_diagnosis']} x{e['most_common_count']}: {e['meaning']}" if e["most_common_diagnosis"] else "-"
        lines.append(f"{e['id']:<{width}}  {rate:<12}  {mistake}")
    lines += [f"skipped: {s['path']} ({s['reason']})" for s in summary.get("skipped", [])]
    return "\n".join(lines) + "\n"


async def grade_many(
    submissions: list[Found],
    out: Path,
    *,
    fmt: str = "json",
    feedback: str = "hint",
    jobs: int = 1,
    chapters: set[int] | None = None,
    cell_timeout: float = CELL_TIMEOUT,
    notebook_timeout: float = NOTEBOOK_TIMEOUT,
    memory_mb: int = 0,
    sandbox: bool = True,
    skipped: list[dict[str, str]] | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Grade `submissions` (as `collect` found them), N at a time, each in its own kernel; write
    each report as soon as its sandbox is gone, and the class summary at the end."""
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    exercises = exercise_table()
    package_code(PACKAGE_DIR)  # the checks' code, read and compiled before any notebook runs
    names = report_names([s.path for s in submissions])
    suffix, render = RENDER[fmt]
    single_gradescope = fmt == "gradescope" and len(submissions) == 1  # what a Gradescope autograder expects
    semaphore = asyncio.Semaphore(max(1, jobs))
    cwd = Path.cwd()

    def shown(path: Path) -> str:
        absolute = Path(os.path.abspath(path))
        return str(absolute.relative_to(cwd)) if absolute.is_relative_to(cwd) else str(path)

    async def one(found: Found, name: str) -> dict[str, Any]:
        async with semaphore:
            report = await grade_notebook_async(
                found.path,
                name=shown(found.path),
                chapters=chapters,
                cell_timeout=cell_timeout,
                notebook_timeout=notebook_timeout,
                memory_mb=memory_mb,
                exercises=exercises,
                sandbox=sandbox,
                found=found,
            )
        target = out / "results.json" if single_gradescope else out / f"{name}{suffix}"
        target.write_text(render(for_students(report, feedback)), encoding="utf-8")
        return report

    tasks = [asyncio.ensure_future(one(s, n)) for s, n in zip(submissions, names)]
    with tqdm(total=len(tasks), desc="grading", unit="notebook", disable=not progress, file=sys.stderr) as bar:
        for finished in asyncio.as_completed(tasks):
            report = await finished
            bar.set_postfix_str(f"{Path(report['submission']).name}: {report['score']:g}/{report['max_score']:g}")
            bar.update()
    reports = [t.result() for t in tasks]  # in the order given
    summary = summarize(reports, skipped)
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
    parser.add_argument("--feedback", default="hint", choices=FEEDBACK, help="what each report shows of a failure: the diagnosis only, or also the hint, or also the fix (default: hint)")
    parser.add_argument("--timeout", type=float, default=CELL_TIMEOUT, help=f"seconds per cell (default: {CELL_TIMEOUT:g})")
    parser.add_argument("--notebook-timeout", type=float, default=NOTEBOOK_TIMEOUT, help=f"seconds for a whole notebook, cells and checks (default: {NOTEBOOK_TIMEOUT:g})")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded in parallel, one kernel each (default: 1)")
    parser.add_argument("--chapter", action="append", help="grade these chapters' exercises, e.g. 01 or 01,02 or all (default: detected per notebook)")
    parser.add_argument("--memory-mb", type=int, default=0, help="cap each kernel's memory, hard (RLIMIT_DATA; CPU-only machines); default: no cap")
    parser.add_argument("--no-sandbox", action="store_true", help="run kernels without the sandbox: only for notebooks you trust, or inside a container of their own")
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        submissions, skipped = collect(args.submissions, exclude=out)
        chapters = parse_chapters(args.chapter)
    except (FileNotFoundError, ValueError) as error:
        print(f"grade: no such submission or bad --chapter: {error}", file=sys.stderr)
        return 2
    if not submissions:
        print("grade: no notebooks found", file=sys.stderr)
        return 2
    if not args.no_sandbox and sandbox_problem():
        print(f"grade: {sandbox_problem()}", file=sys.stderr)
        return 2
    reports = asyncio.run(
        grade_many(
            submissions,
            out,
            fmt=args.format,
            feedback=args.feedback,
            jobs=args.jobs,
            chapters=chapters,
            cell_timeout=args.timeout,
            notebook_timeout=args.notebook_timeout,
            memory_mb=args.memory_mb,
            sandbox=not args.no_sandbox,
            skipped=skipped,
            progress=not args.quiet,
        )
    )
    if not args.quiet:
        print(summary_text(summarize(reports, skipped)), end="")
        print(f"reports in {out}/ (summary.md, summary.csv, summary.json)")
    return 0 if all(r["graded"] for r in reports) else 1


# ===========================================================================
# The budget: grading vs plain execution
# ===========================================================================


def execute_plainly(path: str | Path, timeout: float = NOTEBOOK_TIMEOUT) -> float:
    """Seconds to execute a notebook top to bottom with nbclient (kernel start included), as a
    teacher would without the grader: same Python, same environment, errors allowed, no sandbox."""
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


def measure_overhead(notebook: str | Path, repeats: int = 1, sandbox: bool = True) -> dict[str, Any]:
    """Grading time over plain execution time for one notebook (budget: 1.3x).
    With repeats > 1, the fastest of each is kept (the machine's noise is one-sided)."""
    plain, graded = [], []
    report: dict[str, Any] = {}
    for _ in range(max(1, repeats)):
        plain.append(execute_plainly(notebook))
        started = time.perf_counter()
        report = grade_notebook(notebook, sandbox=sandbox)
        graded.append(time.perf_counter() - started)
    ratio = min(graded) / min(plain)
    return {
        "notebook": str(notebook),
        "sandbox": sandbox,
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
