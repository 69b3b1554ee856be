"""Each submission graded in a process of its own, under a memory limit and a deadline of the grader's.

The grader's own work for a submission (its kernel's replies decoded, its checks) runs in a worker
forked from the grader, torch and the catalogue imported already: a reply that costs more than it
weighs, or a check that never ends, costs that submission its score, never the batch or a classmate.
The worker's memory limit is RLIMIT_DATA, soft (the kernel it starts raises it back: helpers.grading.serve).

A worker keeps the batch's pace (`Pace`): it says when its kernel is up and waits for its turn to execute the
notebook, then says when the cells are done; its checks run while the next notebook executes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import resource
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from multiprocessing.connection import Connection
from typing import Any

from helpers.grading.limits import GRADER_MEMORY_MB, STARTUP_TIMEOUT, WORKER_GRACE
from helpers.grading.records import Report
from helpers.grading.reports import bounded

# Forked, not spawned: a worker starts in milliseconds, with the grader's settings as they are.
_CONTEXT = multiprocessing.get_context("fork")
# What a worker says before its report, and the batch's one answer.
READY, EXECUTED, GO = b"ready", b"executed", b"go"


class Pace:
    """A worker's half of the batch's schedule: `turn()` once its kernel is up (the sandbox, ipykernel, the
    grader's set-up), which returns when the notebook may execute; `executed()` once its cells are done."""

    def __init__(self, channel: Connection):
        self.channel = channel
        self.waited = 0.0  # seconds between its kernel's start and its turn: no limit of the notebook's counts them

    async def turn(self) -> None:
        started = time.monotonic()
        self.channel.send_bytes(READY)
        if await asyncio.to_thread(self.channel.recv_bytes) != GO:
            raise EOFError("the batch said something else than go")
        self.waited = time.monotonic() - started

    def executed(self) -> None:
        self.channel.send_bytes(EXECUTED)


def data_mb() -> float:
    """This process's data segment (what RLIMIT_DATA counts), in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _work(
    channel: Connection,
    memory_mb: int,
    grade: Callable[..., Coroutine[Any, Any, Report]],
    kwargs: dict[str, Any],
) -> None:
    import torch

    # OpenMP's threads do not survive a fork: a parallel region in the child of a process that ran one
    # waits for them for ever. One thread each: the checks are small, and --jobs runs workers side by side.
    torch.set_num_threads(1)
    if kwargs.get("cpus"):  # the cores of its sandbox: a busy grader slows only its own submission
        os.sched_setaffinity(0, kwargs["cpus"])
    os.setsid()  # a process group of its own: an unsandboxed kernel it starts is killed with it
    limit = int((data_mb() + memory_mb) * 2**20)
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    resource.setrlimit(resource.RLIMIT_DATA, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    report = bounded(asyncio.run(grade(**kwargs, pace=Pace(channel))))  # a few MB at most: the grader has no limit
    channel.send_bytes(json.dumps(report).encode())


def deadline(notebook_timeout: float) -> float:
    """How long a worker may take: its kernel's start, the notebook's limit, and the grader's report."""
    return STARTUP_TIMEOUT + notebook_timeout + WORKER_GRACE


async def next_message(channel: Connection, seconds: float) -> bytes:
    """The worker's next message; TimeoutError past `seconds`, EOFError or OSError when the worker is gone.
    Read only while awaited: a worker that dies while the batch waits for its turn costs the batch nothing."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:  # data, or the end of the pipe
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(channel.fileno(), ready)
    try:
        await asyncio.wait_for(readable, seconds)
    finally:
        loop.remove_reader(channel.fileno())
    return channel.recv_bytes()


async def graded_apart(
    seconds: float,
    grade: Callable[..., Coroutine[Any, Any, Report]],
    grader_mb: int = GRADER_MEMORY_MB,
    forked: Callable[[], None] = lambda: None,
    turn: Callable[[], Awaitable[None]] | None = None,
    executed: Callable[[], None] = lambda: None,
    **kwargs: Any,
) -> tuple[Report | None, str]:
    """(the report of grade(**kwargs, pace=a Pace) run in a worker, ""), or (None, why there is none): the worker
    ran past `seconds`, or died (past `grader_mb` of its own, a crash). A forked worker: `grade` needs no pickling,
    and the caller passes it, so that this module need not know the batch's; `forked()` is called once it is.
    When its kernel is up, the worker waits for `turn()` (not counted in `seconds`; none: at once), and
    `executed()` is called when it says its cells are done."""
    channel, theirs = _CONTEXT.Pipe()
    worker = _CONTEXT.Process(target=_work, args=(theirs, grader_mb, grade, kwargs), daemon=True)
    worker.start()
    forked()
    theirs.close()
    loop = asyncio.get_running_loop()
    left = seconds
    try:
        while True:
            began = loop.time()
            message = await next_message(channel, left)
            left -= loop.time() - began
            if message == READY:
                if turn is not None:
                    await turn()
                channel.send_bytes(GO)
            elif message == EXECUTED:
                executed()
            else:
                report: Report = json.loads(message)
                return report, ""
    except asyncio.TimeoutError:
        return None, f"the grader's work for it ran past its {seconds:g} s limit"
    except (EOFError, OSError, ValueError):
        return None, f"the grader's work for it stopped (past its {grader_mb} MB memory limit, or a crash)"
    finally:
        channel.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid or 0, signal.SIGKILL)  # the worker, and any kernel it left
        await asyncio.to_thread(worker.join)
