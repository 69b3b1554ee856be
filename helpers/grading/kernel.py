"""One graded kernel: an ipykernel in its sandbox, driven over jupyter_client."""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import queue
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio

from helpers.grading import sandbox, wire
from helpers.grading.limits import GRADED_ENV, INTERRUPT_GRACE, KERNEL_ENV, POLL, STARTUP_TIMEOUT
from helpers.grading.sandbox import Scratch, bwrap_command

_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
# What starts a graded kernel: ipykernel_launcher's own two lines, without debugpy, which ipykernel imports for a
# debugger no graded kernel serves (0.7 s of every kernel's start); the notebook's cells cannot import it either.
LAUNCH = (
    "import sys; del sys.path[0]; sys.modules['debugpy'] = None; "
    "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
)


def kernel_env() -> dict[str, str]:
    """The environment kernels run in: the grader's own, offline, with this `helpers` importable."""
    env = {**os.environ, **KERNEL_ENV}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(sandbox.PACKAGE_DIR.parent), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


@functools.cache
def warm_up() -> None:
    """Once per process: what a worker's first check would otherwise import under its time limit (jupyter_client
    for its kernel; torch's meta kernels, dynamo and sympy for the checks that run on the meta device: seconds of
    CPU). The grader does it once its first workers are forked, so that the later ones start with it done; each
    of the first does it while its first kernel boots (Kernel.start), not before. Nothing here touches
    CUDA, which a forked worker could not use (tests/test_grade.py), nor runs torch on more than a thread."""
    from jupyter_client import AsyncKernelManager  # noqa: F401

    from helpers import safety

    safety.warm_up_meta()


@dataclass
class CellRun:
    """How running one cell ended (a call into student code ends as a helpers.calls.Outcome)."""

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

    def __init__(self, scratch: Scratch, limits: dict[str, int], sandboxed: bool):
        self.scratch, self.limits, self.sandboxed = scratch, limits, sandboxed
        self.requests = 0
        self.km: Any = None
        self.kc: Any = None
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from jupyter_client import AsyncKernelManager

        prefix = bwrap_command(self.scratch) if self.sandboxed else []

        class Manager(AsyncKernelManager):
            def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
                # This very Python (the grader's code is compiled for it), in its sandbox.
                return [*prefix, sys.executable, "-c", LAUNCH, "-f", self.connection_file]

        if self.sandboxed:  # no network inside: Unix sockets in a folder bound into the sandbox, interrupts by message
            self.scratch.unlock()
            ipc = self.scratch.ipc
            self.km = Manager(transport="ipc", ip=str(ipc / "kernel"), connection_file=str(ipc / "kernel.json"))
            self.km.kernel_spec.interrupt_mode = "message"
            self.km.write_connection_file()
            if self.scratch.uid is not None:
                os.chown(self.km.connection_file, self.scratch.uid, self.scratch.uid)
        else:
            self.km = Manager()
        # The kernel's own stdout/stderr (not the notebook's outputs): warnings and crash dumps nobody reads.
        await self.km.start_kernel(
            cwd=str(self.scratch.work),
            env={**kernel_env(), **GRADED_ENV},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        warm_up()  # while the kernel boots, in a worker forked before the grader had (a no-op in every other)
        context = zmq.asyncio.Context()
        largest = wire.MAX_MESSAGE * 4 // 3 + 2**20  # base64 of the largest reply: a larger one is dropped unread
        context.setsockopt(zmq.MAXMSGSIZE, largest)  # type: ignore[attr-defined]  # pyzmq makes its constants at import
        self.kc = self.km.client(context=context)
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=STARTUP_TIMEOUT)
        self.scratch.lock()
        self._drain = asyncio.ensure_future(self._drain_iopub())
        setup = f"__import__('helpers.grading.serve', fromlist=['setup']).setup({self.limits!r}, get_ipython())"
        outcome = await self.run("", STARTUP_TIMEOUT, silent=True, user_expressions={"ready": setup})
        if outcome.kind != "ok" or outcome.content.get("user_expressions", {}).get("ready", {}).get("status") != "ok":
            raise GraderError(
                f"the grader's set-up failed in the kernel ({outcome.kind}): {last_line(outcome.content)}"
            )

    async def ask(self, request: bytes, timeout: float) -> bytes:
        """One request to the kernel's function server (helpers.grading.serve): the request as a
        file it can read but not change, the reply as the value of an expression, size-capped
        by the socket before anything parses it. KernelGone when no reply came."""
        self.requests += 1
        path = self.scratch.ask / f"request-{self.requests}"
        path.write_bytes(request)
        answer = f"get_ipython().course_answer({str(path)!r})"  # kept by setup, before the first cell
        try:
            outcome = await self.run("", timeout, silent=True, user_expressions={"reply": answer})
        finally:
            path.unlink()
        if outcome.kind not in ("ok", "timeout"):
            raise wire.KernelGone(outcome.kind)
        value = outcome.content.get("user_expressions", {}).get("reply")
        if not isinstance(value, dict) or value.get("status") != "ok":
            said = value.get("evalue", "") if isinstance(value, dict) else ""
            raise wire.ProtocolError(f"the kernel could not answer ({str(said)[:200]})")
        text = value.get("data", {}).get("text/plain", "")
        if not (
            isinstance(text, str)
            and len(text) >= 2
            and text[0] == text[-1] == "'"
            and _BASE64.fullmatch(text, 1, len(text) - 1)
        ):
            raise wire.ProtocolError("a reply that is not the server's")
        try:
            return base64.b64decode(text[1:-1], validate=True)
        except ValueError:
            raise wire.ProtocolError("a reply that is not the server's") from None

    async def _drain_iopub(self) -> None:
        """Outputs are not kept (the submission is never written); read them so they do not pile up."""
        while True:
            try:
                await self.kc.get_iopub_msg(timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception:  # a malformed message; keep draining
                await asyncio.sleep(0.01)

    async def run(
        self, code: str, timeout: float, *, silent: bool = False, user_expressions: dict[str, str] | None = None
    ) -> CellRun:
        msg_id = self.kc.execute(
            code,
            silent=silent,
            store_history=not silent,
            user_expressions=user_expressions or {},
            allow_stdin=False,
            stop_on_error=False,
        )
        reply = await self._reply(msg_id, timeout)
        if isinstance(reply, CellRun):
            if reply.kind != "timeout":
                return reply
            await self.km.interrupt_kernel()
            after = await self._reply(msg_id, INTERRUPT_GRACE)
            if isinstance(
                after, CellRun
            ):  # an interrupt does not stop a long C call, a process ignoring SIGINT, a broken handler
                return CellRun("dead" if after.kind == "dead" else "stuck")
            return CellRun("timeout", after["content"])
        status = reply["content"].get("status")
        return CellRun("ok" if status == "ok" else "error", reply["content"])

    async def _reply(self, msg_id: str, timeout: float) -> dict[str, Any] | CellRun:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return CellRun("timeout")
            try:
                msg = await self.kc.get_shell_msg(timeout=min(POLL, remaining))
            except queue.Empty:
                if not await self.km.is_alive():
                    return CellRun("dead")
                continue
            except Exception:  # a malformed message from the kernel: not a reply to anything
                continue
            parent = msg.get("parent_header") if isinstance(msg, dict) else None
            if isinstance(parent, dict) and parent.get("msg_id") == msg_id and isinstance(msg.get("content"), dict):
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
        except Exception:  # already dead: nothing to clean
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
