"""The course for the grading tools instructors already run: nbgrader and Gradescope.

    python course.py nbgrader COURSE_DIR                    every chapter as an nbgrader source assignment
    python course.py gradescope OUT.zip --chapters 01,03    a Gradescope autograder (for those chapters)

Both give each exercise the points of the exercise registry, as `helpers.grade`
does. nbgrader grades with the course's own checks, run inside the student's
notebook (a student who redefines `check` can fool it); the Gradescope
autograder runs `helpers.grade` itself, which cannot be fooled that way.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers import release
from helpers.exercises import get
from helpers.grading.escape import plain
from helpers.grading.records import GradescopeResults

if TYPE_CHECKING:  # imported where a notebook is read, not by `import helpers`
    import nbformat

# ---------------------------------------------------------------------------
# nbgrader
# ---------------------------------------------------------------------------

CHECK_CELL = re.compile(
    r'check\("(?P<id>\w+)", (?P<name>\w+)\)\s*'
)  # every check cell of the solutions is exactly this
# nbgrader scores a test cell by whether it raises: the panel is still shown, then a failed check fails the cell.
GRADED_CHECK = """result = check("{id}", {name})
display(result)  # the course's panel: what is wrong, and the hint
assert result.passed, "{id} does not pass its check yet: see the panel above\""""
NBGRADER_CONFIG = f"""# Written by `python course.py nbgrader`; edit at will (it is not overwritten).
c = get_config()  # noqa: F821
c.ClearSolutions.code_stub = {{"python": {release.STUB.format(indent="").strip()!r}}}  # the course's own stub
c.Execute.timeout = 60  # seconds per cell, as helpers.grade's --timeout (nbgrader's default, 30, is short for chapter 06)
"""


def _nbgrader_metadata(grade_id: str, *, solution: bool = False, points: int | None = None) -> dict[str, Any]:
    """nbgrader's cell metadata (schema 3): a solution cell, or a locked test cell worth `points`."""
    graded = points is not None
    metadata = {
        "grade": graded,
        "grade_id": grade_id,
        "locked": graded,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if graded:
        metadata["points"] = points
    return metadata


def nbgrader_source(solution_md: Path) -> nbformat.NotebookNode:
    """The solution as an nbgrader source notebook: the course's `# BEGIN SOLUTION`
    markers are nbgrader's too, so each cell holding them becomes a solution cell,
    and each check cell a test cell worth the exercise's points."""
    notebook = release.read_markdown(solution_md.read_text())
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        check = CHECK_CELL.fullmatch(cell.source)
        if check:
            cell.source = GRADED_CHECK.format(**check.groupdict())
            cell.metadata["nbgrader"] = _nbgrader_metadata(f"check_{check['id']}", points=get(check["id"]).points)
        elif "# BEGIN SOLUTION" in cell.source:
            cell.metadata["nbgrader"] = _nbgrader_metadata(f"solution_{index:03d}", solution=True)
    return notebook


def write_nbgrader_course(course_dir: Path, chapters: list[str] | None = None) -> list[Path]:
    """COURSE_DIR/source/NN_name/NN_name.ipynb for each chapter, and an nbgrader_config.py if there is none."""
    import nbformat

    written = []
    for solution in _solutions(chapters):
        target = course_dir / "source" / solution.stem / f"{solution.stem}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbgrader_source(solution), target)
        written.append(target)
    config = course_dir / "nbgrader_config.py"
    if not config.exists():
        config.write_text(NBGRADER_CONFIG)
    return written


def _solutions(chapters: list[str] | None) -> list[Path]:
    found = [s for s in sorted(release.SOLUTIONS.glob("[0-9][0-9]_*.md")) if not chapters or s.name[:2] in chapters]
    if not found:
        raise SystemExit(f"no chapter matches {','.join(chapters or [])}")
    return found


# ---------------------------------------------------------------------------
# Gradescope
# ---------------------------------------------------------------------------

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image.
set -euo pipefail
apt-get update -qq
apt-get install -y -qq python3 python3-venv bubblewrap
cd /autograder/source
python3 -m venv venv
venv/bin/pip install -q --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt  # the CPU build of torch
# The course's helpers package is not installed: run_autograder puts source/course on PYTHONPATH.
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission, in a container of its own.
# AUTOGRADER_ROOT (default /autograder) and COURSE_PYTHON let a test run it elsewhere.
set -euo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
export PYTHONPATH="$root/source/course"  # the instructor's copy of helpers, whatever else is installed
exec "${{COURSE_PYTHON:-$root/source/venv/bin/python}}" -m helpers.export run-autograder --root "$root" {chapters}
"""


def requirements() -> str:
    """The course's dependencies, pinned to the versions installed here (the ones its tests passed with)."""
    listed = [r for r in importlib.metadata.requires("helpers") or [] if "extra ==" not in r]
    names = [re.split(r"[^A-Za-z0-9_.\-]", r, maxsplit=1)[0] for r in listed]  # each requirement's name
    return "".join(
        f"{name}=={importlib.metadata.version(name).split('+')[0]}\n" for name in names
    )  # 2.13.0+cpu -> 2.13.0


def build_gradescope_zip(out: Path, chapters: list[str] | None = None) -> Path:
    """An autograder zip: setup.sh, run_autograder, requirements.txt and the course's helpers package under course/.
    The assignment is the instructor's: the zip carries its chapters (graded by whatever a notebook shows, a student
    would choose which chapter they are graded for)."""
    if not chapters:
        raise ValueError("a Gradescope autograder grades one assignment: name its chapters (--chapters 01)")
    files = {
        "setup.sh": SETUP_SH,
        "run_autograder": RUN_AUTOGRADER.format(
            chapters=f"--chapters {','.join(chapters)}" if chapters else ""
        ).rstrip()
        + "\n",
        "requirements.txt": requirements(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (
                stat.S_IFREG | (0o755 if name != "requirements.txt" else 0o644)
            ) << 16  # the scripts executable once unpacked
            archive.writestr(info, text)
        for path in sorted((release.ROOT / "helpers").rglob("*.py")):
            archive.write(path, f"course/{path.relative_to(release.ROOT)}")
    return out


def sandbox_works() -> bool:
    """Whether bubblewrap can make a sandbox here. Gradescope runs Docker containers,
    whose default seccomp profile usually forbids the user namespaces it needs."""
    if not shutil.which("bwrap"):
        return False
    probe = subprocess.run(
        ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"], capture_output=True
    )
    return probe.returncode == 0


def run_autograder(root: Path, chapters: list[str] | None = None) -> GradescopeResults:
    """Grade the submission under ROOT/submission into ROOT/results/results.json (Gradescope's schema)."""
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    notebooks = sorted(p for p in (root / "submission").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    report: GradescopeResults
    if not notebooks:
        report = {
            "score": 0,
            "output": "No notebook (.ipynb) in your submission: upload your chapter's notebook.",
            "tests": [],
        }
    else:
        command = [
            sys.executable,
            "-m",
            "helpers.grade",
            str(notebooks[0]),
            "--format",
            "gradescope",
            "--out",
            str(results),
            "--quiet",
        ]
        if chapters:
            command += ["--chapter", ",".join(chapters)]
        if not sandbox_works():
            # Only where the sandbox cannot run: Gradescope already gives each submission a container of its own.
            command.append("--no-sandbox")
        done = subprocess.run(command, capture_output=True, text=True)
        path = results / "results.json"
        if done.returncode != 0 or not path.exists():
            report = {
                "score": 0,
                "output": "The autograder failed on this submission; your instructor has been told.",
                "tests": [],
            }
            print(done.stdout, done.stderr, sep="\n", file=sys.stderr)  # Gradescope shows this log to the instructor
        else:
            report = json.loads(path.read_text(encoding="utf-8"))
        if len(notebooks) > 1:
            graded = plain(notebooks[0].name, 200)  # a student's file name: no escape or bidi override reaches the page
            report["output"] = f"Graded {graded}; your other notebooks were not graded.\n" + report["output"]
    report.setdefault("visibility", "visible")
    for test in report["tests"]:
        test.setdefault("visibility", "visible")  # each exercise's message, as students see it in the course
    (results / "results.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report


# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    nbgrader = commands.add_parser("nbgrader", help="write every chapter as an nbgrader source assignment")
    nbgrader.add_argument("course_dir", type=Path)
    gradescope = commands.add_parser("gradescope", help="build a Gradescope autograder zip")
    gradescope.add_argument("out", type=Path)
    autograder = commands.add_parser("run-autograder", help="what the zip's run_autograder runs")
    autograder.add_argument("--root", type=Path, default=Path(os.environ.get("AUTOGRADER_ROOT", "/autograder")))
    for sub in (nbgrader, autograder):
        sub.add_argument("--chapters", type=lambda text: text.split(","), help="e.g. 01,03 (default: all)")
    gradescope.add_argument(
        "--chapters", type=lambda text: text.split(","), required=True, help="the assignment's chapters, e.g. 01,03"
    )
    args = parser.parse_args(argv)
    if args.command == "nbgrader":
        for path in write_nbgrader_course(args.course_dir, args.chapters):
            print(path)
        print(f"then, in {args.course_dir}: nbgrader generate_assignment NN_name, ... nbgrader autograde NN_name")
    elif args.command == "gradescope":
        print(build_gradescope_zip(args.out, args.chapters))
    else:
        run_autograder(args.root, args.chapters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
