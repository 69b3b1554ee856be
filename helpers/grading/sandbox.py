"""The sandbox (Linux, bubblewrap) around every graded kernel, and its private scratch folder."""

from __future__ import annotations

import ast
import functools
import glob
import os
import platform
import secrets
import shutil
import site
import struct
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from helpers.grading.limits import GRADED_ENV, SANDBOX_ENV, SCRATCH_MB, STARTUP_TIMEOUT

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # helpers/
STAND_INS = Path(__file__).resolve().parent / "stand_ins"
INSTALL_BWRAP = (
    "install bubblewrap (Debian, Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install bubblewrap`; "
    "Arch: `sudo pacman -S bubblewrap`), or pass --no-sandbox to grade without one (see the README)"
)


class Scratch:
    """A submission's private folder on the host, removed after grading: `work`, the kernel's
    working directory and HOME, which holds a copy of the notebook (in the sandbox, a
    memory-backed folder of its own, capped in size), `ipc`, the kernel's sockets and
    connection file (locked once the kernel is up: see `lock`), and `ask`, the grader's
    requests (read-only inside). When the grader is root, a sandboxed kernel runs as `uid`,
    a user id of its own: root's processes are exempt from the process limit. `cpus`: the
    cores the sandbox may use (a share of the machine when several are graded at once)."""

    def __init__(
        self,
        notebook_name: str,
        data: bytes,
        sandboxed: bool,
        cpus: list[int] | None = None,
        graded: frozenset[str] | set[str] = frozenset(),
    ):
        self.root = Path(tempfile.mkdtemp(prefix="grade-"))
        self.work, self.ipc, self.notebook = (
            self.root / "work",
            self.root / "ipc",
            self.root / "notebook" / notebook_name,
        )
        self.ask, self.cpus, self.reference = self.root / "ask", cpus, self.root / "reference.py"
        self.seccomp = self.root / "no-userns.bpf"
        for folder in (self.work, self.ipc, self.ask, self.notebook.parent):
            folder.mkdir()
        self.reference.write_text(reference_stand_in(graded), encoding="utf-8")
        self.seccomp.write_bytes(no_user_namespaces())
        self.notebook.write_bytes(data)
        if not sandboxed:
            shutil.copy(self.notebook, self.work / notebook_name)
        self.uid = 2**20 + secrets.randbelow(2**30) if sandboxed and os.geteuid() == 0 else None

    def unlock(self) -> None:
        """Before a kernel starts: an empty `ipc` that the kernel's user may make its sockets in."""
        for path in self.ipc.iterdir():
            path.unlink()
        if self.uid is not None:
            os.chown(self.ipc, self.uid, self.uid)

    def lock(self) -> None:
        """Once the kernel has made its sockets, it may write nothing more on the host: the
        folder and the connection file go back to root (as root; otherwise the kernel runs
        as the grader's own user, and only the file size limit bounds what it writes there)."""
        if self.uid is not None:
            for path in self.ipc.iterdir():
                if path.is_file():
                    os.chown(path, 0, 0)
                    os.chmod(path, 0o644)
            os.chown(self.ipc, 0, 0)
            os.chmod(self.ipc, 0o755)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def reference_stand_in(graded: frozenset[str] | set[str]) -> str:
    """helpers/reference.py for one sandbox: the reference of each exercise it grades removed,
    text and all, and a stub that raises in its place; the rest stays, for the cells that draw or
    train with it (chapter 06 trains on the sinusoidal table while its ALiBi is graded)."""
    from helpers.exercises import get

    hidden = {get(exercise_id).reference.__name__ for exercise_id in graded}
    tree = ast.parse((PACKAGE_DIR / "reference.py").read_text(encoding="utf-8"))
    tree.body = [node for node in tree.body if getattr(node, "name", None) not in hidden]
    stubs = "".join(f"\n{name} = unavailable({name!r})" for name in sorted(hidden))
    return ast.unparse(tree) + "\n\n" + (STAND_INS / "reference.py").read_text(encoding="utf-8") + stubs + "\n"


# The seccomp filter (classic BPF over struct seccomp_data) that keeps a sandbox from making user
# namespaces: root in a child namespace opens much of the host kernel's attack surface. bubblewrap's
# --disable-userns would do it, but needs --unshare-user, which run as root maps the kernel's user to
# the host's root; this filter works for every user, from bubblewrap 0.1 on.
SECCOMP_ARCHES = {  # machine: (AUDIT_ARCH_*, unshare, clone, clone3)
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}
# Refused with EPERM: the kernel's keyrings (the grader's session keyring, a key planted for the next kernel),
# and three calls Docker's default profile refuses too, each a large surface no check needs: perf_event_open
# (hardware counters: a side channel on other kernels), bpf and userfaultfd (both common in kernel exploits).
REFUSED = {
    "x86_64": {"keyctl": 250, "add_key": 248, "request_key": 249, "perf_event_open": 298, "bpf": 321, "userfaultfd": 323},
    "aarch64": {"keyctl": 219, "add_key": 217, "request_key": 218, "perf_event_open": 241, "bpf": 280, "userfaultfd": 282},
}  # fmt: skip
IO_URING = (425, 426, 427)  # io_uring_setup, _enter, _register: the same on both
X32_BIT = 0x40000000  # x86-64's x32 ABI: the native arch, its system call numbers offset by this bit
CLONE_NEWUSER = 0x10000000
EPERM, ENOSYS = 1, 38
# What starts bwrap: a new session keyring (keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)), the filter opened as fd 9.
LAUNCH = (
    "import ctypes, os, sys; ctypes.CDLL(None).syscall({keyctl}, 1, None); "
    "os.dup2(os.open(sys.argv[1], os.O_RDONLY), 9); os.execvp(sys.argv[2], sys.argv[2:])"
)


def no_user_namespaces(machine: str | None = None) -> bytes:
    """The filter, for this machine: unshare() and clone() with CLONE_NEWUSER fail with EPERM;
    clone3() with ENOSYS (its flags lie in memory BPF cannot read; libc then falls back to clone);
    what REFUSED lists with EPERM, io_uring (a large surface of its own) with ENOSYS; a system call of any
    other ABI (i386, x32) with ENOSYS; everything else is allowed."""
    machine = machine or platform.machine()
    arch, unshare, clone, clone3 = SECCOMP_ARCHES[machine]
    load, jump_if, jump_if_set, jump_ge, ret = 0x20, 0x15, 0x45, 0x35, 0x06  # LD|W|ABS, JMP|JEQ|JSET|JGE|K, RET|K
    allow, refuse = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | errno
    refused = [(nr, EPERM) for nr in REFUSED[machine].values()] + [(nr, ENOSYS) for nr in (clone3, *IO_URING)]
    program = [  # (code, jump if true, jump if false, constant)
        (load, 0, 0, 4),  # seccomp_data.arch
        (jump_if, 1, 0, arch),
        (ret, 0, 0, refuse | ENOSYS),
        (load, 0, 0, 0),  # seccomp_data.nr
        (jump_ge, 0, 1, X32_BIT),  # x32 (the native arch, its own numbers): no namespaces of its own either
        (ret, 0, 0, refuse | ENOSYS),
        *[step for nr, errno in refused for step in ((jump_if, 0, 1, nr), (ret, 0, 0, refuse | errno))],
        (jump_if, 1, 0, unshare),
        (jump_if, 0, 3, clone),
        (load, 0, 0, 16),  # the low half of args[0]: the flags of both
        (jump_if_set, 0, 1, CLONE_NEWUSER),
        (ret, 0, 0, refuse | EPERM),
        (ret, 0, 0, allow),
    ]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


def _python_paths() -> set[str]:
    """Where this Python, its standard library and its packages live."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(sys.executable),
        *sysconfig.get_paths().values(),
    }
    if site.ENABLE_USER_SITE:
        paths.add(site.getusersitepackages())
    return {p for path in paths if path for p in (os.path.abspath(path), os.path.realpath(path)) if os.path.isdir(p)}


def _font_lists() -> list[Path]:
    """matplotlib's font list from the grader's own cache: without it, every sandboxed kernel
    that draws a figure would spend half a second building it again."""
    cache = os.environ.get("MPLCONFIGDIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "matplotlib"
    )
    return sorted(Path(cache).glob("fontlist-*.json"))


def sandbox_env(scratch: Scratch) -> dict[str, str]:
    """A sandboxed kernel's whole environment: named variables only, and nothing secret (the
    sandbox's command line, these values included, can be read inside it)."""
    env = {k: v for k, v in os.environ.items() if k in SANDBOX_ENV}
    if scratch.cpus:
        env.update(OMP_NUM_THREADS=str(len(scratch.cpus)), MKL_NUM_THREADS=str(len(scratch.cpus)))
    home = str(scratch.work)
    env.update(
        GRADED_ENV, HOME=home, TMPDIR="/tmp", MPLCONFIGDIR=f"{home}/.matplotlib", PYTHONPATH=str(PACKAGE_DIR.parent)
    )
    # Run as root, the kernel's user has no passwd entry: getpass.getuser() (torch's compile caches
    # ask it on a GPU machine) reads these first, instead of failing in pwd.getpwuid().
    env.update(USER="student", LOGNAME="student")
    env.setdefault("PATH", os.defpath)
    return env


def bwrap_command(scratch: Scratch) -> list[str]:
    """The command line that starts a sandbox around the command that follows it."""
    share = (
        ["taskset", "--cpu-list", ",".join(map(str, scratch.cpus))] if scratch.cpus and shutil.which("taskset") else []
    )
    # bwrap reads the filter from a file descriptor, 9; and the sandbox starts in a session keyring of its own
    # (an empty, anonymous one): the grader's is out of its reach, and so is the next sandbox's.
    seccomp = [
        sys.executable,
        "-S",
        "-I",
        "-c",
        LAUNCH.format(keyctl=REFUSED[platform.machine()]["keyctl"]),
        str(scratch.seccomp),
    ]
    args = [
        *seccomp,
        *share,
        "bwrap",
        "--seccomp",
        "9",
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
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
    readonly = [
        "/usr",
        "/etc",
        "/opt",
        "/nix",
        "/sys",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        str(PACKAGE_DIR),
    ]
    bound: list[str] = []
    for path in sorted({p for p in readonly if os.path.lexists(p)} | _python_paths()):
        if any(path.startswith(b + "/") for b in bound):
            continue  # inside a folder already bound
        bound.append(path)
        if os.path.islink(path):  # /bin -> usr/bin on merged-/usr systems
            mount("--symlink", os.readlink(path), path=path)
        else:
            mount("--ro-bind", path, path=path)
    # No reference, no catalogue of probes and mistakes: what the grader compares with stays outside.
    mount("--ro-bind", str(scratch.reference), path=PACKAGE_DIR / "reference.py")
    mount("--ro-bind", str(STAND_INS / "exercises"), path=PACKAGE_DIR / "exercises")
    mount("--bind", str(scratch.ipc), path=scratch.ipc)
    mount("--ro-bind", str(scratch.ask), path=scratch.ask)
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
    become = [
        "setpriv",
        f"--reuid={scratch.uid}",
        f"--regid={scratch.uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ]
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
    if platform.machine() not in SECCOMP_ARCHES:
        return f"the sandbox's seccomp filter knows {' and '.join(SECCOMP_ARCHES)} only, not {platform.machine()}: grade in containers (see the README), or pass --no-sandbox"
    scratch = Scratch("probe.ipynb", b"{}", sandboxed=True)
    trial = "import ipykernel, os; open('probe.ipynb').close(); open('written', 'w').close(); os.listdir('/proc')"
    try:
        result = subprocess.run(
            [*bwrap_command(scratch), sys.executable, "-c", trial],
            capture_output=True,
            text=True,
            timeout=STARTUP_TIMEOUT,
        )
        if result.returncode == 0:
            return None
        reason = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired) as error:
        reason = str(error)
    finally:
        scratch.remove()
    return f"bubblewrap cannot make a sandbox here ({reason}); allow user namespaces (see the README), or pass --no-sandbox"
