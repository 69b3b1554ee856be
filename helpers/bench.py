"""The course's budgets (README, "Benchmark"), measured on this machine (a benchmark, never a test).

    python -m helpers.bench                  # everything, as a table
    python -m helpers.bench --json out.json  # also write the figures as JSON
    python -m helpers.bench --quick          # skip executing the notebooks
    python -m helpers.bench --grading        # only grading: its overhead and the sandbox's cost
    python -m helpers.bench stalls --runs 3 --load 4 --out stalls.json   # issue 24: does any tool stall under load?
    python -m helpers.bench --json class.json class --chapter 03 --copies 6 --rounds 3   # the grade command vs nbclient, nbgrader
    python -m helpers.bench time -- CI=true bash .ci/run   # any command: wall seconds and its process tree's CPU-seconds

Measures: `import helpers` beyond torch; the median time of one check() of a
correct submission per exercise (the reference, compiled again as a student's
own copy), and its first call; the execution time of every solution notebook;
grading vs executing; and what the sandbox costs: the six solution notebooks
graded with and without it, --jobs 1 and 2, in this one run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from helpers.grading.records import Report

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {
    "import_s": 0.3,
    "check_median_s": 0.5,
    "bert_first_check_s": 5.0,
    "notebook_s": 20.0,
    "notebook_06_s": 60.0,
    "notebook_07_s": 180.0,
    "notebook_08_s": 30.0,  # no training, but transformers' Llama imported and a cache checked inside it
    "grade_ratio": 1.3,
    "sandbox_ratio": 1.1,
}


def import_seconds(repeats: int = 5) -> float:
    """Median time of `import helpers` in a fresh interpreter that has already imported torch."""

    def timed() -> float:
        code = "import torch, time; t = time.perf_counter(); import helpers; print(time.perf_counter() - t)"
        return float(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        )

    timed()  # warm the file cache
    return statistics.median(timed() for _ in range(repeats))


def reference_copies() -> dict[str, Any]:
    """The references compiled again under another file name: what a student who wrote exactly
    the reference submits (checking `helpers.reference` itself fails with uses_reference)."""
    from helpers import reference

    copies: dict[str, Any] = {"__name__": "bench_reference"}
    source = Path(reference.__file__).read_text(encoding="utf-8")
    exec(compile(source, "<a copy of helpers/reference.py>", "exec"), copies)
    return copies


def check_seconds(repeats: int = 7) -> dict[str, dict[str, float]]:
    from helpers import check
    from helpers.exercises import all_exercises

    copies = reference_copies()
    figures = {}
    for exercise_id, exercise in all_exercises().items():
        submission = copies[exercise.reference.__name__]
        start = time.perf_counter()
        first = check(exercise_id, submission)
        first_s = time.perf_counter() - start
        assert first.passed, f"the reference fails its own check: {first}"
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            check(exercise_id, submission)
            times.append(time.perf_counter() - start)
        figures[exercise_id] = {"first_s": first_s, "median_s": statistics.median(times)}
    return figures


def notebook_seconds() -> dict[str, float]:
    import jupytext

    from helpers.release import SOLUTIONS, execute

    figures = {}
    for path in sorted(SOLUTIONS.glob("[0-9][0-9]_*.md")):
        notebook = jupytext.read(path)
        start = time.perf_counter()
        execute(notebook, cwd=SOLUTIONS)
        figures[path.stem] = time.perf_counter() - start
    return figures


OVERHEAD_BUDGET = 1.0  # grading over plain execution of the same notebook, --jobs 1 (shared/COURSE.md)


def execute_plainly(path: str | Path, timeout: float = 600.0) -> float:
    """Seconds to execute a notebook top to bottom with nbclient (kernel start included), as a
    teacher would without the grader: same Python, same environment, errors allowed, no sandbox."""
    import nbclient
    import nbformat

    notebook = nbformat.reads(Path(path).read_bytes().decode("utf-8"), as_version=4)
    cwd = tempfile.mkdtemp(prefix="plain-")
    try:
        started = time.perf_counter()
        client = nbclient.NotebookClient(
            notebook,
            timeout=int(timeout),
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": cwd}},
        )
        from helpers.grading.kernel import kernel_env

        client.execute(env=kernel_env())
        return time.perf_counter() - started
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def measure_overhead(notebook: str | Path, repeats: int = 1, sandbox: bool = True) -> dict[str, Any]:
    """Grading time over plain execution time for one notebook (budget: 1.3x).
    With repeats > 1, the fastest of each is kept (the machine's noise is one-sided)."""
    plain, graded = [], []
    report: Report | None = None
    for _ in range(max(1, repeats)):
        plain.append(execute_plainly(notebook))
        started = time.perf_counter()
        from helpers.grading.batch import grade_notebook

        report = grade_notebook(notebook, sandbox=sandbox)
        graded.append(time.perf_counter() - started)
    assert report is not None  # the loop runs at least once
    ratio = min(graded) / min(plain)
    return {
        "notebook": str(notebook),
        "sandbox": sandbox,
        "execute_s": round(min(plain), 2),
        "grade_s": round(min(graded), 2),
        "ratio": round(ratio, 3),
        "budget": OVERHEAD_BUDGET,
        "within_budget": ratio <= OVERHEAD_BUDGET,
        "score": report["score"],
        "max_score": report["max_score"],
        "timings": report.get("timings"),  # the last graded run: start, execute, grade (the checks alone)
    }


def grading_ratio() -> dict[str, Any]:
    return measure_overhead(ROOT / "solutions" / "01_lookup_tables.ipynb")


def sandbox_cost() -> dict[str, Any]:
    """The six solution notebooks graded with and without the sandbox, --jobs 1 (one notebook at
    a time) and --jobs 2 (two at a time, in pairs), and executed plainly. Each notebook, or pair,
    runs in the order plain, off, on, on, off, plain (plain: --jobs 1 only) and the fastest run of
    each kind counts: interleaved this finely, a machine whose load comes and goes favours none,
    and other work only ever adds time. Grading gives the same scores with the sandbox as without."""
    from helpers import grade

    def timed(kind: str, unit: list[grade.Found], jobs: int) -> tuple[float, tuple[Any, ...]]:
        start = time.perf_counter()
        if kind == "plain":
            execute_plainly(unit[0].path)
            return time.perf_counter() - start, ()
        with tempfile.TemporaryDirectory() as out:
            reports = asyncio.run(grade.grade_many(unit, Path(out), jobs=jobs, sandbox=kind == "on", progress=False))
        return time.perf_counter() - start, tuple((r["submission"], r["score"], r["max_score"]) for r in reports)

    submissions, _ = grade.collect([str(p) for p in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))])
    figures: dict[str, Any] = {"notebooks": len(submissions)}
    for jobs, order in ((1, ("plain", "off", "on", "on", "off", "plain")), (2, ("off", "on", "on", "off"))):
        best = dict.fromkeys(order, 0.0)
        for unit in (submissions[i : i + jobs] for i in range(0, len(submissions), jobs)):
            runs = [(kind, *timed(kind, unit, jobs)) for kind in order]
            assert len({scores for kind, _, scores in runs if kind != "plain"}) == 1, (
                f"the sandbox changed the scores: {runs}"
            )
            for kind in best:
                best[kind] += min(seconds for k, seconds, _ in runs if k == kind)
        figures[f"jobs{jobs}"] = {
            "unsandboxed_s": best["off"],
            "sandboxed_s": best["on"],
            "ratio": best["on"] / best["off"],
        }
        if jobs == 1:
            figures["execute_s"] = best["plain"]
            figures["grade_vs_execute"] = best["on"] / best["plain"]
    return figures


class ProcessTree:
    """CPU-seconds (user + system) of a command and every process it starts, however they end: sampled from
    /proc every `interval` s while it runs. The kernel's own rusage would not do: a kernel in the grader's
    sandbox is reaped inside its PID namespace, outside the tree (two graded notebooks: 10 CPU-s by rusage,
    29 sampled). A lower bound by at most `interval` per process."""

    TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def __init__(self, root: int, interval: float = 0.1):
        self.root, self.interval = root, interval
        self.cpu: dict[tuple[int, int], float] = {}  # (pid, start time): last CPU-seconds seen

    @staticmethod
    def stat(pid: str) -> tuple[int, int, float] | None:
        """(parent pid, start time, CPU ticks) of a process, None when it is gone."""
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12])

    def sample(self, members: set[int]) -> None:
        stats = {int(pid): s for pid in os.listdir("/proc") if pid.isdigit() and (s := self.stat(pid))}
        grown = True
        while grown:  # a parent may be listed after its child
            before = len(members)
            members.update(pid for pid, (parent, _, _) in stats.items() if parent in members)
            grown = len(members) > before
        for pid in members & stats.keys():
            _, started, ticks = stats[pid]
            self.cpu[(pid, started)] = ticks / self.TICK

    def follow(self, process: subprocess.Popen[bytes]) -> float:
        """Sample until `process` ends; its tree's CPU-seconds."""
        members = {self.root}
        while process.poll() is None:
            self.sample(members)
            time.sleep(self.interval)
        return sum(self.cpu.values())


def timed_command(
    command: list[str], cwd: Path, env: dict[str, str] | None = None, show: bool = False
) -> dict[str, Any]:
    """A command as an instructor runs it (its own start included): wall seconds, the CPU-seconds of its whole
    process tree, the load average when it started, and its exit status. `env`: tool_env() unless given;
    its output shown, or kept out of sight (the end of what it printed on stderr shown if it fails)."""
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: nbgrader's log would fill a pipe and block it
        load, start = os.getloadavg()[0], time.perf_counter()
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env or tool_env(),
            stdout=None if show else subprocess.DEVNULL,
            stderr=None if show else stderr,
        )
        cpu = ProcessTree(process.pid).follow(process)
        wall = time.perf_counter() - start
        if process.returncode and not show:
            stderr.seek(0)
            said = stderr.read().decode(errors="replace").strip()[-400:]
            print(f"  {Path(command[0]).name} exited {process.returncode}: {said}", flush=True)
    return {"seconds": round(wall, 1), "cpu_s": round(cpu, 1), "load": round(load, 2), "returncode": process.returncode}


CLASS_BUDGETS = {"grade --jobs 1": 0.85, "grade --jobs 2": 0.55}  # x plain nbclient, wall (shared/COURSE.md)


def class_timing(chapter: str = "03", copies: int = 6, rounds: int = 3) -> dict[str, Any]:
    """A class of `copies` copies of solutions/<chapter>, through the commands an instructor runs, each a fresh
    process, its start-up included: plain nbclient (`jupyter execute --allow-errors`, the class in one command),
    `python -m helpers.grade` (sandboxed) with --jobs 1 and --jobs 2, and `nbgrader autograde` (its source,
    solved). Interleaved: each round runs every command once, starting one further along the list, so that a
    load that comes and goes favours none. Each run's wall seconds, CPU-seconds of its process tree and load
    average at its start; per command the medians, and the grader's against plain nbclient and nbgrader."""
    from helpers import export

    source = next((ROOT / "solutions").glob(f"{chapter}_*.ipynb"))
    work = Path(tempfile.mkdtemp(prefix="class-"))
    folder, course = work / "class", work / "course"
    folder.mkdir()
    [assignment] = export.write_nbgrader_course(course, [chapter])
    name = assignment.stem
    generate_assignment(course, name)
    for i in range(copies):
        shutil.copy(source, folder / f"student{i}.ipynb")
        (course / "submitted" / f"student{i}" / name).mkdir(parents=True)
        shutil.copy(assignment, course / "submitted" / f"student{i}" / name / f"{name}.ipynb")
    notebooks = [str(path) for path in sorted(folder.glob("*.ipynb"))]
    grade = [sys.executable, "-m", "helpers.grade", str(folder), "--quiet", "--out"]
    commands = {
        "nbclient": [str(BIN / "jupyter"), "execute", "--allow-errors", *notebooks],
        "grade --jobs 1": [*grade, str(work / "out-1"), "--jobs", "1"],
        "grade --jobs 2": [*grade, str(work / "out-2"), "--jobs", "2"],
        "nbgrader autograde": [str(BIN / "nbgrader"), "autograde", name, "--force"],
    }
    kinds = list(commands)
    records: list[dict[str, Any]] = []
    try:
        for number in range(rounds):
            for kind in kinds[number % len(kinds) :] + kinds[: number % len(kinds)]:
                record = {"round": number + 1, "kind": kind} | timed_command(commands[kind], cwd=course)
                summary = work / f"out-{kind[-1]}" / "summary.json"
                if kind.startswith("grade") and summary.exists():
                    students = json.loads(summary.read_text())["students"]
                    record["scores"] = [f"{s['score']:g}/{s['max_score']:g}" for s in students]
                    shutil.rmtree(summary.parent)
                records.append(record)
                print(json.dumps(record), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians: dict[str, dict[str, float]] = {
        kind: {
            key: statistics.median(r[key] for r in records if r["kind"] == kind) for key in ("seconds", "cpu_s", "load")
        }
        for kind in kinds
    }
    plain, nbgrader = medians["nbclient"], medians["nbgrader autograde"]
    verdicts = {
        kind: {
            "wall_ratio": round(medians[kind]["seconds"] / plain["seconds"], 3),
            "cpu_ratio": round(medians[kind]["cpu_s"] / plain["cpu_s"], 3),
            "budget": budget,
            "within_budget": medians[kind]["seconds"] <= budget * plain["seconds"]
            and medians[kind]["seconds"] < nbgrader["seconds"],
        }
        for kind, budget in CLASS_BUDGETS.items()
    }
    return {"chapter": chapter, "copies": copies, "rounds": rounds, "runs": records, "medians": medians} | {
        "grader": verdicts
    }


def class_table(report: dict[str, Any]) -> str:
    """The medians as the README's row shows them."""
    medians, grader = report["medians"], report["grader"]
    lines = [
        "| command | wall s (median) | CPU-s (median) | load at start (median) | x nbclient, wall / CPU | budget |"
    ]
    lines.append("|---|---|---|---|---|---|")
    for kind, figures in medians.items():
        verdict_text = ""
        if kind in grader:
            g = grader[kind]
            verdict_text = f"{g['wall_ratio']:.2f}× / {g['cpu_ratio']:.2f}× | ≤ {g['budget']}× and ahead of nbgrader: {'met' if g['within_budget'] else 'NOT MET'}"
        else:
            ratio = figures["seconds"] / medians["nbclient"]["seconds"]
            verdict_text = f"{ratio:.2f}× / {figures['cpu_s'] / medians['nbclient']['cpu_s']:.2f}× | "
        lines.append(
            f"| {kind} | {figures['seconds']:.1f} | {figures['cpu_s']:.1f} | {figures['load']:.2f} | {verdict_text} |"
        )
    return (
        "\n".join(lines)
        + f"\n\n{report['copies']} copies of chapter {report['chapter']}, {report['rounds']} interleaved rounds"
    )


# ---------------------------------------------------------------------------
# Stalls: every chapter and solution through plain nbclient, nbconvert, papermill
# and nbgrader autograde under load (issue 24). A stall is a lost execute_reply
# (nbclient issue 312, see helpers/widgets.py): the cell waits for the cell
# timeout, well beyond the kernel's own work.
# ---------------------------------------------------------------------------

STALL_TOOLS = ("nbclient", "nbconvert", "papermill", "nbgrader")
STALL_CELL_TIMEOUT = 60  # seconds: a lost reply shows as a wait of about this long, and is bounded by it
STALL_SLACK = 3.0  # seconds a cell may wait beyond its own work before it counts as a stall
# From the last cell's reply to a tool's exit: the kernel's shutdown and the notebook written (nbgrader: its
# database too), 2-5 s here; a lost reply to the last cell adds the cell timeout to it.
TAIL_SLACK = STALL_CELL_TIMEOUT / 2
LOAD_SECONDS_PER_EXECUTION = 180  # the busy loops' deadline: this, times the executions of the sweep
TOOL_TIMEOUT = 1200  # seconds for one notebook through one tool, whatever happens
# Each busy loop ends by itself at its deadline, or as soon as the bench that started it is gone.
BUSY_LOOP = "import os, time\nparent, end = os.getppid(), time.monotonic() + {seconds}\nwhile time.monotonic() < end and os.getppid() == parent: pass"
BIN = Path(sys.executable).parent  # jupyter, papermill and nbgrader of this environment


def generate_assignment(course: Path, name: str) -> None:
    """nbgrader's release copy of one assignment of an exported course (what students receive)."""
    subprocess.run(
        [str(BIN / "nbgrader"), "generate_assignment", name],
        cwd=course,
        env=tool_env(),
        check=True,
        capture_output=True,
    )


def tool_env() -> dict[str, str]:
    """Offline, no progress file, this checkout's helpers importable, this environment's tools first."""
    from helpers.grading.kernel import kernel_env

    env = kernel_env()
    env["PATH"] = os.pathsep.join((str(BIN), env.get("PATH", "")))
    return env


def kernel_times(cell: NotebookNode) -> tuple[datetime, datetime] | None:
    """When the kernel began (execute_input) and ended (execute_reply) the cell, by its own clock."""
    times = cell.metadata.get("execution", {})
    if "iopub.execute_input" not in times or "shell.execute_reply" not in times:
        return None
    start, end = (
        datetime.fromisoformat(times[k].replace("Z", "+00:00")) for k in ("iopub.execute_input", "shell.execute_reply")
    )
    return start, end


def waits_between_cells(notebook: NotebookNode, finished: datetime) -> tuple[list[float], float]:
    """Seconds each code cell but the last waited beyond its own work, read from an executed notebook:
    from the kernel's reply to the next cell's start (a lost reply delays the next request by the
    timeout); and the tail, from the last reply to the tool's exit (the kernel's shutdown too)."""
    spans = [t for t in map(kernel_times, notebook.cells) if t]
    waits = [(start - end).total_seconds() for (_, end), (start, _) in zip(spans, spans[1:])]
    return waits, (finished - spans[-1][1]).total_seconds() if spans else 0.0


def notebook_outcome(notebook: NotebookNode) -> dict[str, Any]:
    code = [cell for cell in notebook.cells if cell.cell_type == "code" and cell.source.strip()]
    return {
        "cells": len(code),
        "executed": sum(1 for cell in code if cell.get("execution_count")),
        "error_cells": sum(1 for cell in code if any(o.output_type == "error" for o in cell.outputs)),
    }


def run_nbclient(path: Path, out_dir: Path) -> tuple[Any, list[float], float, int]:
    """Cell by cell, as tests/test_widget_stall.py: each cell's wall time less the kernel's own work."""
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=STALL_CELL_TIMEOUT,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    waits = []
    with client.setup_kernel(env=tool_env()):
        for index, cell in enumerate(notebook.cells):
            start = time.monotonic()
            client.execute_cell(cell, index)
            if spans := kernel_times(cell):
                kernel_start, kernel_end = spans
                waits.append(time.monotonic() - start - (kernel_end - kernel_start).total_seconds())
    nbformat.write(notebook, out_dir / path.name)
    return notebook, waits, 0.0, 0  # the last cell's wait is measured like every other's: no tail


def run_command(command: list[str], cwd: Path, output: Path) -> tuple[Any, list[float], float, int]:
    import nbformat

    done = subprocess.run(command, cwd=cwd, env=tool_env(), capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    finished = datetime.now(timezone.utc)
    if done.returncode:
        print(f"  {command[0]} exited {done.returncode}: {done.stderr.strip()[-400:]}", flush=True)
    if not output.exists():
        return None, [], 0.0, done.returncode
    notebook = nbformat.read(output, as_version=4)
    return notebook, *waits_between_cells(notebook, finished), done.returncode


def prepare_nbgrader(course: Path, notebooks: list[Path]) -> None:
    """A course of every chapter concerned, each released, and two submissions of each: the student
    version as released ("unfilled", for chapters/) and the source, solutions filled ("solved")."""
    from helpers import export

    chapters = sorted({path.name[:2] for path in notebooks})
    export.write_nbgrader_course(course, chapters)
    for source in sorted((course / "source").glob("*/*.ipynb")):
        name = source.stem
        generate_assignment(course, name)
        for student, notebook in (("unfilled", course / "release" / name / f"{name}.ipynb"), ("solved", source)):
            (course / "submitted" / student / name).mkdir(parents=True, exist_ok=True)
            shutil.copy(notebook, course / "submitted" / student / name / f"{name}.ipynb")


def run_tool(tool: str, path: Path, out_dir: Path, course: Path) -> tuple[Any, list[float], float, int]:
    timeout = str(STALL_CELL_TIMEOUT)
    output = out_dir / path.name
    if tool == "nbclient":
        return run_nbclient(path, out_dir)
    if tool == "nbconvert":
        command = [str(BIN / "jupyter"), "nbconvert", "--to", "notebook", "--execute", "--allow-errors"]
        command += [f"--ExecutePreprocessor.timeout={timeout}", "--ExecutePreprocessor.record_timing=True"]
        return run_command([*command, "--output-dir", str(out_dir), str(path)], path.parent, output)
    if tool == "papermill":
        command = [str(BIN / "papermill"), str(path), str(output), "--cwd", str(path.parent), "-k", "python3"]
        return run_command([*command, "--execution-timeout", timeout, "--no-progress-bar"], path.parent, output)
    # nbgrader: the chapter is the student's unfilled submission, the solution the solved one (its cell timeout:
    # nbgrader_config.py, also 60 s).
    student = "solved" if path.parent.name == "solutions" else "unfilled"
    command = [str(BIN / "nbgrader"), "autograde", path.stem, "--student", student, "--force"]
    return run_command(command, course, course / "autograded" / student / path.stem / path.name)


def measure(tool: str, path: Path, run: int, workdir: Path) -> dict[str, Any]:
    """One notebook through one tool: its seconds, whether every cell ran, and how long cells waited."""
    out_dir = workdir / f"{tool}-{run}-{path.parent.name}"
    out_dir.mkdir(exist_ok=True)
    start = time.monotonic()
    try:
        notebook, waits, tail, returncode = run_tool(tool, path, out_dir, workdir / "course")
    except Exception as error:  # a timeout or a crash is a result too
        notebook, waits, tail, returncode = None, [], 0.0, repr(error)  # type: ignore[assignment]
    outcome = notebook_outcome(notebook) if notebook else {"cells": 0, "executed": 0, "error_cells": 0}
    return {
        "notebook": f"{path.parent.name}/{path.name}",
        "tool": tool,
        "run": run,
        "seconds": round(time.monotonic() - start, 2),
        "returncode": returncode,
        **outcome,
        "completed": returncode == 0 and 0 < outcome["executed"] == outcome["cells"],
        "worst_wait_s": round(max(waits, default=0.0), 2),
        "tail_s": round(tail, 2),
        "stalls": sum(1 for wait in waits if wait > STALL_SLACK) + (tail > TAIL_SLACK),
        "waits_s": [round(wait, 2) for wait in waits],
    }


def stall_sweep(notebooks: list[Path], tools: list[str], runs: int, load: int, out: Path) -> dict[str, Any]:
    """Every notebook through every tool, `runs` times, with `load` busy loops running throughout.
    Run by run, so that a sweep cut short (Ctrl-C) has measured every notebook and tool alike."""
    report: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(),
        "load": load,
        "cores": os.cpu_count(),
        "cell_timeout_s": STALL_CELL_TIMEOUT,
        "slack_s": STALL_SLACK,
        "tail_slack_s": TAIL_SLACK,
        "records": [],
    }
    busy = BUSY_LOOP.format(seconds=LOAD_SECONDS_PER_EXECUTION * len(notebooks) * len(tools) * runs)
    workdir = Path(tempfile.mkdtemp(prefix="stalls-"))
    started = time.monotonic()
    load_processes = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(load)]
    try:
        if "nbgrader" in tools:
            prepare_nbgrader(workdir / "course", notebooks)
        for run, tool, path in itertools.product(range(1, runs + 1), tools, notebooks):
            record = measure(tool, path, run, workdir)
            report["records"].append(record)
            report["wall_s"] = round(time.monotonic() - started, 1)
            out.write_text(json.dumps(report, indent=1))  # after every notebook: a sweep cut short keeps its figures
            print(
                f"run {run} {tool:9} {record['notebook']:34} {record['seconds']:6.1f} s  completed={record['completed']}"
                f"  error cells={record['error_cells']}  worst wait {record['worst_wait_s']:.1f} s"
                f"  tail {record['tail_s']:.1f} s  stalls={record['stalls']}",
                flush=True,
            )
    except KeyboardInterrupt:
        report["interrupted"] = True
    finally:
        for process in load_processes:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def stall_table(report: dict[str, Any]) -> str:
    """notebook x tool: runs, completed, cells with an error, worst wait, stalls."""
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in report["records"]:
        rows.setdefault((record["notebook"], record["tool"]), []).append(record)
    lines = [
        "| notebook | tool | runs | completed | error cells | worst wait (s) | worst tail (s) | stalls | seconds (each run) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (notebook, tool), records in rows.items():
        lines.append(
            f"| {notebook} | {tool} | {len(records)} | {sum(r['completed'] for r in records)} "
            f"| {max(r['error_cells'] for r in records)} | {max(r['worst_wait_s'] for r in records):.1f} "
            f"| {max(r['tail_s'] for r in records):.1f} "
            f"| {sum(r['stalls'] for r in records)} | {', '.join(format(r['seconds'], '.0f') for r in records)} |"
        )
    total = sum(r["stalls"] for r in report["records"])
    lines.append(
        f"\n{len(report['records'])} executions, load {report['load']} busy loops on {report['cores']} cores, {report.get('wall_s', 0):.0f} s: {total} stalls{' (interrupted)' if report.get('interrupted') else ''}"
    )
    return "\n".join(lines)


def stalls_main(args: argparse.Namespace) -> int:
    tools = args.tools.split(",")
    unknown = set(tools) - set(STALL_TOOLS)
    if unknown:
        raise SystemExit(f"unknown tools: {', '.join(sorted(unknown))} (known: {', '.join(STALL_TOOLS)})")
    notebooks = [Path(p).resolve() for p in args.notebooks] or sorted(ROOT.glob("chapters/*.ipynb")) + sorted(
        ROOT.glob("solutions/*.ipynb")
    )
    report = stall_sweep(notebooks, tools, args.runs, args.load, args.out)
    print(stall_table(report))
    return 0 if all(r["completed"] and not r["stalls"] for r in report["records"]) else 1


def verdict(value: float, budget: float) -> str:
    return "ok" if value <= budget else "OVER BUDGET"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="skip executing notebooks and grading")
    parser.add_argument("--grading", action="store_true", help="only grading: its overhead and what the sandbox costs")
    commands = parser.add_subparsers(dest="command")
    stalls = commands.add_parser("stalls", help="every chapter and solution through four tools under load: any stall?")
    stalls.add_argument("--runs", type=int, default=3)
    stalls.add_argument("--load", type=int, default=4, help="busy loops running throughout")
    stalls.add_argument("--tools", default=",".join(STALL_TOOLS))
    stalls.add_argument("--notebooks", nargs="*", default=[], help="default: chapters/*.ipynb and solutions/*.ipynb")
    stalls.add_argument("--out", type=Path, default=Path("stalls.json"), help="all runs as JSON, written as they go")
    by_class = commands.add_parser("class", help="a class of copies of one solution: nbclient, grade, nbgrader")
    by_class.add_argument("--chapter", default="03")
    by_class.add_argument("--copies", type=int, default=6)
    by_class.add_argument("--rounds", type=int, default=3)
    any_command = commands.add_parser("time", help="any command: wall seconds and its process tree's CPU-seconds")
    any_command.add_argument(
        "words", nargs="+", help="the command after --, NAME=value words first set its environment"
    )
    args = parser.parse_args(argv)
    if args.command == "time":
        settings = list(itertools.takewhile(lambda word: "=" in word and not word.startswith("-"), args.words))
        env = os.environ | dict(word.split("=", 1) for word in settings)
        figures = timed_command(args.words[len(settings) :], Path.cwd(), env, show=True)
        figures["load_at_end"] = round(os.getloadavg()[0], 2)
        print(json.dumps(figures))
        return int(figures["returncode"])
    if args.command == "stalls":
        return stalls_main(args)
    if args.command == "class":
        timing = class_timing(args.chapter, args.copies, args.rounds)
        print(class_table(timing))
        if args.json:
            args.json.write_text(json.dumps(timing, indent=2))
        return 0 if all(g["within_budget"] for g in timing["grader"].values()) else 1

    import torch

    from helpers.probe import check_device

    report: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, checks on {check_device()}",
        "budgets": BUDGETS,
    }
    if not args.grading:
        report["import_s"] = import_seconds()
        report["checks"] = check_seconds()
    if not args.quick:
        report["notebooks_s"] = {} if args.grading else notebook_seconds()
        report["grading"] = grading_ratio()
        report["sandbox"] = sandbox_cost()

    rows = []
    if "import_s" in report:
        rows.append(
            (
                "import helpers beyond torch",
                f"{report['import_s']:.3f} s",
                f"≤ {BUDGETS['import_s']} s",
                verdict(report["import_s"], BUDGETS["import_s"]),
            )
        )
    for exercise_id, figures in report.get("checks", {}).items():
        ok = verdict(figures["median_s"], BUDGETS["check_median_s"])
        if exercise_id == "BertEmbeddings" and figures["first_s"] > BUDGETS["bert_first_check_s"]:
            ok = "FIRST CALL OVER BUDGET"
        rows.append(
            (
                f"check {exercise_id}",
                f"{figures['median_s']:.3f} s median (first {figures['first_s']:.2f} s)",
                f"≤ {BUDGETS['check_median_s']} s",
                ok,
            )
        )
    for name, seconds in report.get("notebooks_s", {}).items():
        budget = {"06": BUDGETS["notebook_06_s"], "07": BUDGETS["notebook_07_s"], "08": BUDGETS["notebook_08_s"]}.get(
            name[:2], BUDGETS["notebook_s"]
        )  # the chapters that train models, and 08's library checks
        rows.append((f"execute solutions/{name}", f"{seconds:.1f} s", f"≤ {budget:g} s", verdict(seconds, budget)))
    if report.get("grading"):
        ratio = report["grading"]["ratio"]
        rows.append(
            (
                "grading vs executing",
                f"{ratio:.2f}×",
                f"≤ {BUDGETS['grade_ratio']}×",
                verdict(ratio, BUDGETS["grade_ratio"]),
            )
        )
    if report.get("sandbox"):
        sandbox = report["sandbox"]
        for jobs in (1, 2):
            figures = sandbox[f"jobs{jobs}"]
            measured = f"{figures['sandboxed_s']:.1f} s / {figures['unsandboxed_s']:.1f} s = {figures['ratio']:.3f}×"
            rows.append(
                (
                    f"grading 6 notebooks --jobs {jobs}, sandboxed / not",
                    measured,
                    f"≤ {BUDGETS['sandbox_ratio']}×",
                    verdict(figures["ratio"], BUDGETS["sandbox_ratio"]),
                )
            )
        measured = f"{sandbox['jobs1']['sandboxed_s']:.1f} s / {sandbox['execute_s']:.1f} s = {sandbox['grade_vs_execute']:.2f}×"
        rows.append(
            (
                "grading 6 notebooks (sandboxed) / executing them",
                measured,
                "< 1×",
                verdict(sandbox["grade_vs_execute"], 1.0),
            )
        )
    width = max(len(r[0]) for r in rows)
    print(f"Machine: {report['machine']}\n")
    print(f"| {'what'.ljust(width)} | measured | budget | verdict |\n|{'-' * (width + 2)}|---|---|---|")
    for what, measured, limit, ok in rows:
        print(f"| {what.ljust(width)} | {measured} | {limit} | {ok} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
