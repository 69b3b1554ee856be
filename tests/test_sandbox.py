"""Hostile submissions against the sandboxed grader (issue 15: every attack that used to work).

One batch, graded once per run (--jobs 2), holds an honest classmate and a dozen
attacks built from chapter 01: killing the grader, processes meant to outlive
it, reading and rewriting other people's files and the checker, the network,
raising the hard limits, forging the grader's verdict, reusing the course's
reference, and submissions that are links, FIFOs, folders or one file under two
names. Every attack is bounded in time and in processes, its network traffic
stays on loopback, and all its harm is aimed at a folder this test makes: the
victims, a copy of `helpers` the grader runs from, a decoy process standing in
for the grader, and listening sockets standing in for the network. An attack
cell that gets through raises "ESCAPED: ...", which the report would show.

Two more runs: a notebook that breaks the kernel's execute handler, under a
short --notebook-timeout; and, without the sandbox, a notebook that rewrites
the checker on disk before a classmate is graded.

Skipped, with the reason, where the machine forbids the namespaces bubblewrap needs.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import grade
from tests.grading_support import (
    HEAD,
    RIGHT_LOOKUP,
    RIGHT_ONE_HOT,
    SOLUTION,
    WRONG_LOOKUP,
    by_id,
    once_per_run,
    passed,
    tree,
    write_notebook,
)

pytestmark = pytest.mark.skipif(
    grade.sandbox_problem() is not None, reason=f"no sandbox here: {grade.sandbox_problem()}"
)

PROCESSES = 64  # the sandbox's process limit in this batch (grade.PROCESS_LIMIT): a fork loop of 100 must stop short
FILE_MB = 8  # the largest file a notebook may write in this batch (grade.FILE_MB)
MEMORY_MB = 6000  # --memory-mb

# Each attack fails quietly when the sandbox holds, and raises ESCAPED when it does not. The
# capitalised names are filled in by the test: paths in its own folder, pids, ports, a marker.
ATTEMPT = """\
import os, socket
escaped = []


def attempt(what, action):
    try:
        action()
    except (OSError, ValueError):  # refused: not found, read-only, unreachable, not allowed
        return
    escaped.append(what)
"""
KILL_THE_GRADER = """\
import os, signal

for pid, sig in ((os.getppid(), signal.SIGTERM), (GRADER, signal.SIGTERM), (DECOY, signal.SIGKILL)):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
if GRADER in pids or DECOY in pids or len(pids) > 16:
    raise RuntimeError(f"ESCAPED: /proc shows the machine's processes ({len(pids)})")"""
OUTLIVE = """\
import os, subprocess, sys

# a session of its own, meant to rewrite the summary once the grader is done; and a daemon
rewrite = f"import time; time.sleep(5); open({OUT!r} + '/summary.csv', 'w').write('forged')"
subprocess.Popen([sys.executable, "-c", rewrite, MARKER], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["sh", "-c", "sleep 30", MARKER])
    os._exit(0)"""
ORPHAN = """\
import os

if os.fork() == 0:  # a child, then the kernel dies: the child would stay behind as an orphan
    os.execv("/bin/sh", ["sh", "-c", "sleep 30", MARKER])
os._exit(0)"""
SNOOP = (
    ATTEMPT
    + """
attempt("read a victim", lambda: open(VICTIM).read())
attempt("list the class", lambda: os.listdir(CLASS))
attempt("list the reports", lambda: os.listdir(OUT))
attempt("read the grader's command line", lambda: open(f"/proc/{GRADER}/cmdline").read())
attempt("overwrite a classmate", lambda: open(CLASSMATE, "w").write("{}"))
attempt("delete a victim", lambda: os.remove(VICTIM))
attempt("rewrite the checker", lambda: open(CHECKER, "a").write("\\ncheck = lambda *args: True\\n"))
attempt("connect to the machine", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=3))
attempt("connect to an abstract socket", lambda: socket.socket(socket.AF_UNIX).connect("\\0" + MARKER))
open(HOST_TMP, "w").write("written")  # the sandbox's own /tmp: allowed, and never the machine's
open("notes.txt", "w").write("the scratch folder is writable")
if escaped:
    raise RuntimeError("ESCAPED: " + ", ".join(escaped))"""
)
LIMITS = (
    ATTEMPT
    + """import resource, signal

for name in ("RLIMIT_DATA", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_FSIZE"):
    attempt(f"raise {name}", lambda: resource.setrlimit(getattr(resource, name), (resource.RLIM_INFINITY,) * 2))
try:
    bytearray((MEMORY_MB + 512) * 2**20)
    escaped.append("allocate past --memory-mb")
except MemoryError:
    pass
children = []
try:
    for _ in range(PROCESSES + 36):
        pid = os.fork()
        if pid == 0:
            os.execv("/bin/sh", ["sh", "-c", "sleep 2", MARKER])
        children.append(pid)
except OSError:
    pass
for pid in children:
    os.waitpid(pid, 0)
if len(children) >= PROCESSES:
    escaped.append(f"start {len(children)} processes")
files = []
try:
    for _ in range(2000):
        files.append(open("/dev/null"))
except OSError:
    pass
for file in files:
    file.close()
if len(files) >= 2000:
    escaped.append("open 2000 files")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
attempt("write a file past the limit", lambda: open("big", "wb").write(b"x" * (FILE_MB + 1) * 2**20))
if escaped:
    raise RuntimeError("ESCAPED: " + ", ".join(escaped))"""
)
FORGE_FUNCTION = """\
import sys, types


def forged(exercise_id, nonce, *args):
    return repr({"passed": True, "diagnosis": None, "message": "forged", "nonce": nonce, "id": exercise_id})


for name, module in list(sys.modules.items()):  # the old grader's in-kernel module, and a stand-in for it
    if name.startswith("_course_grader"):
        module.kernel_grade = forged
sys.modules["_course_grader_0"] = types.SimpleNamespace(kernel_grade=forged)"""
FORGE_RECORDS = """\
import sys

import builtins

# the grader's records of what to undo, replaced by records that undo nothing
records = {"watched": {}, "builtins": vars(builtins), "roots": (), "meta_path": (), "path_hooks": (), "shell": get_ipython()}
for name in [n for n in vars(sys) if n.startswith("_course_grader")]:
    setattr(sys, name, records)
import torch

torch.allclose = lambda *args, **kwargs: True"""
REUSE_IMPORT = """\
def lookup(weight, ids):
    from helpers.reference import lookup as theirs

    return theirs(weight, ids)"""
REUSE_IMPORTLIB = 'import importlib\n\none_hot_lookup = importlib.import_module("helpers.reference").one_hot_lookup'
REUSE_FALLBACK = 'from helpers import solution_or_reference\n\nlookup = solution_or_reference("lookup", None)'

ATTACKS = {  # name: cells
    "classmate": [HEAD, RIGHT_LOOKUP, RIGHT_ONE_HOT],
    "kill_the_grader": [HEAD, RIGHT_LOOKUP, KILL_THE_GRADER, RIGHT_ONE_HOT],
    "outlive": [HEAD, RIGHT_LOOKUP, OUTLIVE, ORPHAN, RIGHT_ONE_HOT],
    "snoop": [HEAD, RIGHT_LOOKUP, SNOOP, RIGHT_ONE_HOT],
    "limits": [HEAD, RIGHT_LOOKUP, LIMITS, RIGHT_ONE_HOT],
    "forge_function": [HEAD, WRONG_LOOKUP, FORGE_FUNCTION],
    "forge_records": [HEAD, WRONG_LOOKUP, RIGHT_ONE_HOT, FORGE_RECORDS],
    "reuse_import": [HEAD, REUSE_IMPORT, REUSE_IMPORTLIB],
    "reuse_fallback": [HEAD, REUSE_FALLBACK, RIGHT_ONE_HOT],
}


def fill(source: str, values: dict[str, object]) -> str:
    for name, value in values.items():
        source = source.replace(name, repr(value))
    return source


def marked_processes(marker: str) -> list[str]:
    """Command lines of the machine's processes that carry the marker (started by an attack)."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and marker.encode() in (command := Path(f"/proc/{entry}/cmdline").read_bytes()):
                found.append(command.replace(b"\0", b" ").decode(errors="replace"))
    return found


def survivors(marker: str, grace: float = 5.0) -> list[str]:
    """What the attacks started and is still running once the sandboxes had `grace` seconds to go."""
    deadline = time.monotonic() + grace
    while (found := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


class Listener:
    """A socket that counts the connections it accepts: the machine's network, as an attack sees it."""

    def __init__(self, family: int, address: object):
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.bind(address)
        self.socket.listen()
        self.socket.settimeout(0.2)
        self.accepted, self.open = 0, True
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while self.open:
            with contextlib.suppress(OSError):
                self.socket.accept()[0].close()
                self.accepted += 1

    def close(self) -> int:
        self.open = False
        self.socket.close()
        return self.accepted


def copy_helpers(root: Path) -> Path:
    """The grader runs from a copy of `helpers`: an attack that got through would harm only the copy."""
    package = root / "package" / "helpers"
    shutil.copytree(grade.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    return package


def run_the_attacks(root: Path) -> dict:
    monkeypatch = pytest.MonkeyPatch()
    package = copy_helpers(root)
    monkeypatch.setattr("helpers.grading.sandbox.PACKAGE_DIR", package)
    monkeypatch.setattr("helpers.grading.sandbox.STAND_INS", package / "grading" / "stand_ins")
    monkeypatch.setattr("helpers.grading.submission.PROCESS_LIMIT", PROCESSES)
    monkeypatch.setattr("helpers.grading.submission.FILE_MB", FILE_MB)
    victims, school, out = root / "victims", root / "class", root / "out"
    victims.mkdir()
    school.mkdir()
    (victims / "victim.txt").write_text("a file no notebook may read, change or delete\n")
    marker = f"course-attack-{secrets.token_hex(6)}"
    decoy = subprocess.Popen(["sleep", "300"])  # stands in for the grader: the attacks try to kill it
    tcp, abstract = Listener(socket.AF_INET, ("127.0.0.1", 0)), Listener(socket.AF_UNIX, "\0" + marker)
    values = {
        "VICTIM": str(victims / "victim.txt"),
        "CLASSMATE": str(school / "classmate.ipynb"),
        "CLASS": str(school),
        "OUT": str(out),
        "CHECKER": str(package / "checking.py"),
        "HOST_TMP": f"/tmp/{marker}",
        "GRADER": os.getpid(),
        "DECOY": decoy.pid,
        "PORT": tcp.socket.getsockname()[1],
        "MARKER": marker,
        "MEMORY_MB": MEMORY_MB,
        "PROCESSES": PROCESSES,
        "FILE_MB": FILE_MB,
    }
    try:
        for name, cells in ATTACKS.items():
            write_notebook(school / f"{name}.ipynb", [fill(cell, values) for cell in cells])
        (school / "linked.ipynb").symlink_to(SOLUTION)  # the instructor's solution, as someone's submission
        for twin in ("twin_a", "twin_b"):  # one file, two students
            (school / twin).mkdir()
        write_notebook(school / "twin_a" / "hw.ipynb", [HEAD, RIGHT_LOOKUP, RIGHT_ONE_HOT])
        (school / "twin_b" / "hw.ipynb").hardlink_to(school / "twin_a" / "hw.ipynb")
        os.mkfifo(school / "fifo.ipynb")
        (school / "trap.ipynb").mkdir()
        before = {"victims": tree(victims), "class": tree(school), "helpers": tree(package)}
        started = time.monotonic()
        arguments = [
            str(school),
            "--out",
            str(out),
            "--jobs",
            "2",
            "--timeout",
            "40",
            "--memory-mb",
            str(MEMORY_MB),
            "--quiet",
        ]
        code = grade.main(arguments)
        seconds = time.monotonic() - started
        left = survivors(marker)
        after = {"victims": tree(victims), "class": tree(school), "helpers": tree(package)}
        reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json") if not p.name.startswith("summary")}
        return {
            "code": code,
            "seconds": seconds,
            "reports": reports,
            "summary": json.loads((out / "summary.json").read_text()),
            "summary_csv": (out / "summary.csv").read_text(),
            "expected_csv": grade.summary_csv(json.loads((out / "summary.json").read_text())),
            "before": before,
            "after": after,
            "survivors": left,
            "decoy_alive": decoy.poll() is None,
            "host_tmp_written": os.path.exists(values["HOST_TMP"]),
            "connections": [tcp.close(), abstract.close()],
        }
    finally:
        decoy.kill()
        monkeypatch.undo()


@pytest.fixture(scope="module")
def attacks(tmp_path_factory):
    return once_per_run(tmp_path_factory, "attacks", run_the_attacks)


def escapes(report):
    return [e["message"] for e in report["errors"] if "ESCAPED" in e["message"]]


def test_the_batch_finishes_with_exit_code_zero_and_a_report_each(attacks):
    assert attacks["code"] == 0
    graded = {*ATTACKS, "linked", "twin_a__hw", "twin_b__hw", "fifo"}
    assert set(attacks["reports"]) == graded, sorted(attacks["reports"])
    assert all(report["graded"] for report in attacks["reports"].values())


def test_no_attack_got_out_of_its_sandbox(attacks):
    assert {name: escapes(report) for name, report in attacks["reports"].items() if escapes(report)} == {}
    for name in ("snoop", "limits"):  # each attack cell ran to its end, quietly
        assert attacks["reports"][name]["errors"] == [], attacks["reports"][name]["errors"]


def test_every_victim_file_is_byte_identical_and_nothing_was_written_outside(attacks):
    assert attacks["after"] == attacks["before"]  # victims, the class's folder (the submissions), the checker's copy
    assert not attacks["host_tmp_written"]  # the sandbox's /tmp is its own
    assert attacks["summary_csv"] == attacks["expected_csv"]  # written by the grader, and only by it


def test_no_process_survives_the_batch_and_nobody_was_signalled(attacks):
    assert attacks["survivors"] == []
    assert attacks["decoy_alive"]
    assert passed(attacks["reports"]["kill_the_grader"]) == {"lookup", "one_hot_lookup"}  # harmless: the work is graded


def test_no_connection_was_made(attacks):
    assert attacks["connections"] == [0, 0]


def test_processes_started_to_outlive_the_kernel_cost_only_their_cell(attacks):
    report = attacks["reports"]["outlive"]
    assert [(e["cell"], e["type"]) for e in report["errors"]] == [(4, "KernelDied")]
    assert passed(report) == {"lookup", "one_hot_lookup"}


def test_the_limits_hold_and_grading_goes_on(attacks):
    assert passed(attacks["reports"]["limits"]) == {"lookup", "one_hot_lookup"}


def test_the_honest_classmate_scores_full_marks(attacks):
    report = attacks["reports"]["classmate"]
    assert passed(report) == {"lookup", "one_hot_lookup"} and report["score"] == 4 and report["errors"] == []


def test_replacing_the_grading_code_earns_nothing(attacks):
    """The verdict is computed in the grader's process: whatever a kernel forges or patches, each
    exercise is judged for what its code computes."""
    function, records = by_id(attacks["reports"]["forge_function"]), by_id(attacks["reports"]["forge_records"])
    assert (function["lookup"]["score"], function["lookup"]["diagnosis"]) == (0, "transposed_weight")
    assert function["one_hot_lookup"]["diagnosis"] == "not_implemented"
    assert (records["lookup"]["score"], records["lookup"]["diagnosis"]) == (
        0,
        "transposed_weight",
    )  # torch.allclose patched there, not here
    assert records["one_hot_lookup"]["passed"]
    assert all(attacks["reports"][name]["warnings"] for name in ("forge_function", "forge_records"))


@pytest.mark.parametrize(
    "name, exercise, reached",
    [
        ("reuse_import", "lookup", "helpers.reference.lookup"),
        ("reuse_import", "one_hot_lookup", "helpers.reference.one_hot_lookup"),
        ("reuse_fallback", "lookup", "helpers.reference.lookup"),
    ],
)
def test_reusing_the_course_reference_scores_zero(attacks, name, exercise, reached):
    result = by_id(attacks["reports"][name])[exercise]
    assert (result["score"], result["diagnosis"]) == (0, "uses_reference")
    assert reached in result["message"]


def test_links_odd_files_and_shared_files_are_flagged_not_graded(attacks):
    reports = attacks["reports"]
    flags = {
        name: (reports[name]["flag"], reports[name]["score"]) for name in ("linked", "twin_a__hw", "twin_b__hw", "fifo")
    }
    assert flags == {
        "linked": ("SymbolicLink", 0),
        "twin_a__hw": ("SameFile", 0),
        "twin_b__hw": ("SameFile", 0),
        "fifo": ("NotARegularFile", 0),
    }
    assert (
        "twin_b" in reports["twin_a__hw"]["errors"][0]["message"]
        and "twin_a" in reports["twin_b__hw"]["errors"][0]["message"]
    )
    skipped = attacks["summary"]["skipped"]
    assert [(Path(s["path"]).name, s["reason"]) for s in skipped] == [
        ("trap.ipynb", "a folder named *.ipynb, not a notebook")
    ]


BREAK_THE_HANDLER = """\
import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)  # the interrupt cannot help
get_ipython().kernel.shell_handlers["execute_request"] = lambda *args, **kwargs: None  # no request is ever answered"""


def test_the_notebook_limit_bounds_execution_and_grading(tmp_path, monkeypatch):
    monkeypatch.setattr("helpers.grading.kernel.INTERRUPT_GRACE", 1.0)
    path = write_notebook(tmp_path / "01_hang.ipynb", [HEAD, RIGHT_LOOKUP, BREAK_THE_HANDLER, RIGHT_ONE_HOT, "x = 1"])
    out = tmp_path / "out"
    assert grade.main([str(path), "--out", str(out), "--timeout", "4", "--notebook-timeout", "12", "--quiet"]) == 0
    report = json.loads((out / "01_hang.json").read_text())
    assert report["timings"]["execute"] + report["timings"]["grade"] < 12 + 1 + 3  # the limit, one grace, one kill
    messages = [e["message"] for e in report["errors"]] + [ex["message"] for ex in report["exercises"]]
    assert any("killed after the interrupt did not stop it" in m for m in messages), messages
    assert any("12 s limit" in m for m in messages), messages
    assert report["score"] == 0  # nothing could be checked in a kernel that answers nothing


def test_without_the_sandbox_a_checker_rewritten_on_disk_still_grades_right(tmp_path, monkeypatch):
    package = copy_helpers(tmp_path)
    monkeypatch.setattr(grade, "PACKAGE_DIR", package)
    forged = "\ndef check(*args, **kwargs):\n    raise SystemExit\n"
    rewrite = f"with open({str(package / 'checking.py')!r}, 'a') as f:\n    f.write({forged!r})"
    school = tmp_path / "class"
    school.mkdir()
    write_notebook(school / "a_rewrites.ipynb", [HEAD, WRONG_LOOKUP, rewrite])
    write_notebook(school / "b_later.ipynb", [HEAD, WRONG_LOOKUP])
    out = tmp_path / "out"
    assert grade.main([str(school), "--out", str(out), "--no-sandbox", "--chapter", "01", "--quiet"]) == 0
    assert "raise SystemExit" in (package / "checking.py").read_text()  # the attack reached the disk: no sandbox
    for name in ("a_rewrites", "b_later"):  # yet the checks came from what the grader read when it started
        lookup = by_id(json.loads((out / f"{name}.json").read_text()))["lookup"]
        assert (lookup["score"], lookup["diagnosis"]) == (0, "transposed_weight"), lookup


def in_a_sandbox(code: str) -> subprocess.CompletedProcess:
    """`python -c code` in a sandbox as a graded kernel gets one."""
    import sys

    scratch = grade.Scratch("probe.ipynb", b"{}", sandboxed=True)
    try:
        return subprocess.run(
            [*grade.bwrap_command(scratch), sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    finally:
        scratch.remove()


def test_the_kernels_user_has_a_name(tmp_path):
    """Run as root, the sandbox's kernel is a user without a passwd entry; getpass.getuser()
    (torch's compile caches call it on a GPU machine) must still answer, not raise KeyError."""
    said = in_a_sandbox("import getpass; print(getpass.getuser())")
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == "student"


NEW_USER_NAMESPACE = """\
import ctypes, os, subprocess, threading

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
said = {"unshare": libc.unshare(CLONE_NEWUSER), "command": subprocess.run(["unshare", "-U", "true"]).returncode}
child = libc.syscall(56 if os.uname().machine == "x86_64" else 220, CLONE_NEWUSER | 17, 0, 0, 0, 0)  # clone, SIGCHLD
if child == 0:
    os._exit(0)
said["clone"] = child
threading.Thread(target=lambda: None).start()  # threads still start (clone without the flag)
said["process"] = subprocess.run(["true"]).returncode  # and processes (clone3 refused, libc falls back)
print(said)
"""


def test_no_user_namespace_can_be_made_inside_the_sandbox():
    """Root in a child user namespace reaches much of the host kernel's surface: the sandbox's seccomp
    filter refuses unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER), `unshare -U` included."""
    said = in_a_sandbox(NEW_USER_NAMESPACE)
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == "{'unshare': -1, 'command': 1, 'clone': -1, 'process': 0}", said.stdout


KEYS_AND_RINGS = """\
import ctypes, os

libc = ctypes.CDLL(None, use_errno=True)
x86 = os.uname().machine == "x86_64"
ADD_KEY, REQUEST_KEY, KEYCTL = (248, 249, 250) if x86 else (217, 218, 219)
PERF_EVENT_OPEN, BPF, USERFAULTFD = (298, 321, 323) if x86 else (241, 280, 282)
# perf_event_attr: PERF_TYPE_SOFTWARE (1), its size (128 bytes), PERF_COUNT_SW_CPU_CLOCK (0), exclude_kernel and
# exclude_hv (flags at byte 40): what any process may open at the usual perf_event_paranoid (2). Outside the
# sandbox an unprivileged process gets a descriptor; inside, whatever the host allows, EPERM.
perf_event = ctypes.create_string_buffer(128)
perf_event[0:8] = (1).to_bytes(4, "little") + (128).to_bytes(4, "little")
perf_event[40:48] = (0x60).to_bytes(8, "little")
said = {}
for name, args in {
    "session_id": (KEYCTL, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "search": (KEYCTL, 10, -3, b"user", b"grader-secret", 0),  # KEYCTL_SEARCH
    "request_key": (REQUEST_KEY, b"user", b"grader-secret", None, 0),
    "add_key": (ADD_KEY, b"user", b"planted", b"for the next kernel", 19, -3),
    "io_uring_setup": (425, 4, ctypes.create_string_buffer(120)),
    "perf_event_open": (PERF_EVENT_OPEN, perf_event, 0, -1, -1, 0),  # this process, any CPU
    "bpf": (BPF, 0, ctypes.create_string_buffer(128), 128),  # BPF_MAP_CREATE of an empty map
    "userfaultfd": (USERFAULTFD, 1),  # UFFD_USER_MODE_ONLY: what an unprivileged process may ask for
    "x32_unshare": (0x40000000 | 272 if x86 else 97, 0x10000000),
}.items():
    result = libc.syscall(*args)
    said[name] = (result, ctypes.get_errno() if result == -1 else 0)
print(said)
"""
GRADERS_KEYRING = """\
import ctypes, subprocess, sys

libc = ctypes.CDLL(None, use_errno=True)
KEYCTL, ADD_KEY = (250, 248) if __import__("os").uname().machine == "x86_64" else (219, 217)
libc.syscall(KEYCTL, 1, None)  # this test's own session keyring: the machine's is left alone
assert libc.syscall(ADD_KEY, b"user", b"grader-secret", b"s3cret", 6, -3) > 0
from helpers import grade

scratch = grade.Scratch("probe.ipynb", b"{}", sandboxed=True)
try:
    done = subprocess.run([*grade.bwrap_command(scratch), sys.executable, "-c", sys.argv[1]], capture_output=True, text=True)
finally:
    scratch.remove()
print(done.stdout, done.stderr, file=sys.stderr if done.returncode else sys.stdout)
"""


def test_the_sandbox_keeps_nothing_of_the_graders():
    """From inside a kernel's sandbox: the grader's session keyring out of reach (a fresh one, and every keyring
    system call refused: no secret read, no key planted for the next kernel), io_uring, perf_event_open, bpf and
    userfaultfd refused, the x32 ABI's unshare refused (by the filter's own test below where this host lacks x32)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", GRADERS_KEYRING, KEYS_AND_RINGS], capture_output=True, text=True, timeout=120
    )
    said = ast.literal_eval(done.stdout.strip() or repr(done.stderr))  # a dict of ints, printed by the code above
    eperm, enosys = 1, 38
    assert {k: v for k, v in said.items() if k != "x32_unshare"} == {
        "session_id": (-1, eperm), "search": (-1, eperm), "request_key": (-1, eperm), "add_key": (-1, eperm),
        "io_uring_setup": (-1, enosys), "perf_event_open": (-1, eperm), "bpf": (-1, eperm), "userfaultfd": (-1, eperm),
    }, said  # fmt: skip
    assert said["x32_unshare"][0] == -1, said


def seccomp_verdict(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """What a classic BPF seccomp filter returns for one system call (the instructions the sandbox uses)."""
    import struct

    data = struct.pack("<iIQQ", nr, arch, 0, arg0)  # seccomp_data: nr, arch, instruction_pointer, args[0]
    steps = [struct.unpack("HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, accumulator = 0, 0
    while True:
        code, true, false, k = steps[pc]
        if code == 0x20:
            accumulator = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:
            return k
        else:
            taken = {0x15: accumulator == k, 0x45: bool(accumulator & k), 0x35: accumulator >= k}[code]
            pc += true if taken else false
        pc += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_filter_refuses_keyrings_io_uring_perf_bpf_userfaultfd_and_every_other_abi(machine):
    from helpers.grading import sandbox

    program = sandbox.no_user_namespaces(machine)
    arch, unshare, clone, clone3 = sandbox.SECCOMP_ARCHES[machine]
    refused = {"x86_64": (250, 248, 249, 298, 321, 323), "aarch64": (219, 217, 218, 241, 280, 282)}[machine]
    allow, eperm, enosys = 0x7FFF0000, 0x00050001, 0x00050026
    expected = {
        (arch, 0, 0): allow,  # read / io_setup
        (arch, unshare, 0x10000000): eperm,
        (arch, unshare, 0x20000): allow,  # a mount namespace alone
        (arch, clone, 0x10000000 | 17): eperm,
        (arch, clone, 17): allow,
        (arch, clone3, 0): enosys,
        **{(arch, nr, 0): eperm for nr in refused},  # keyctl, add_key, request_key, perf_event_open, bpf, userfaultfd
        (arch, refused[-1] + 1, 0): allow,  # the call after userfaultfd (membarrier on both)
        (arch, 425, 0): enosys,
        (arch, 426, 0): enosys,
        (arch, 427, 0): enosys,
        (arch, 0x40000000 | 272, 0x10000000): enosys,  # x32's unshare
        (arch, 0x40000000, 0): enosys,
        (0x40000003, 310, 0x10000000): enosys,  # i386's unshare
        (0x40000028, 337, 0x10000000): enosys,  # 32-bit ARM's
    }
    for (audit, nr, flags), verdict in expected.items():
        assert seccomp_verdict(program, audit, nr, flags) == verdict, (hex(audit), nr, hex(flags))
