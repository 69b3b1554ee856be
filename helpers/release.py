"""Single source: solutions/NN_name.md is the master of each chapter.

    python -m helpers.release            # rebuild every pair from the solutions
    python -m helpers.release 03         # only chapters whose name starts with 03
    python -m helpers.release --check    # exit 1 if anything is stale (what CI runs)

First it renders, in the solution itself, each exercise's badge line from the registry
(`**Exercise `id`**` and whatever follows on that line become `Exercise.badge`): an author
writes `**Exercise `id`**` and the release fills in difficulty, importance, time and points.
From each solution it then makes three files:
  solutions/NN_name.ipynb   the solution, executed, outputs stored (nbval compares them)
  chapters/NN_name.md       the student version: code between the markers
                            `# BEGIN SOLUTION` and `# END SOLUTION` becomes a stub
  chapters/NN_name.ipynb    its pair, without outputs
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a notebook is read, not by `import helpers`
    import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, CHAPTERS = ROOT / "solutions", ROOT / "chapters"

BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)# BEGIN SOLUTION[^\n]*\n.*?^[ \t]*# END SOLUTION[^\n]*\n", re.MULTILINE | re.DOTALL
)
STUB = '{indent}raise NotImplementedError("your code here")\n'
BADGE = re.compile(r"^\*\*Exercise `(\w+)`\*\*.*$", re.MULTILINE)
# Every solution notebook executes with these, so its outputs never depend on the machine.
EXECUTION_ENV = {
    "COURSE_DEVICE": "cpu",
    "PYTHONHASHSEED": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TQDM_DISABLE": "1",
}


def student_source(solution_md: str) -> str:
    """The student's chapter: every marked solution block becomes a stub that raises."""
    if solution_md.count("# BEGIN SOLUTION") != solution_md.count("# END SOLUTION"):
        raise ValueError("unbalanced # BEGIN SOLUTION / # END SOLUTION markers")
    return BLOCK.sub(lambda m: STUB.format(indent=m["indent"]), solution_md)


def with_badges(solution_md: str) -> str:
    """The solution with each exercise's badge line as the registry renders it (Exercise.badge)."""
    from helpers.exercises import get

    return BADGE.sub(lambda m: get(m[1]).badge, solution_md)


def execute(notebook: nbformat.NotebookNode, cwd: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run a notebook top to bottom in a fresh kernel; return it with outputs."""
    import nbclient

    for key, value in EXECUTION_ENV.items():
        os.environ.setdefault(key, value)  # inherited by the kernel
    client = nbclient.NotebookClient(  # streams merged: how a busy machine splits a cell's prints never shows
        notebook,
        timeout=timeout,
        kernel_name="python3",
        coalesce_streams=True,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    for cell in notebook.cells:  # no timestamps or run counters in the diff
        cell.get("metadata", {}).pop("execution", None)
    return notebook


def read_markdown(text: str) -> nbformat.NotebookNode:
    """A MyST notebook with stable cell ids (by position), so regenerated files diff cleanly."""
    import jupytext

    notebook = jupytext.reads(text, fmt="md:myst")
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index:03d}"
    return notebook


def planned(solution: Path) -> dict[Path, str]:
    """What the generated text files must contain (everything but executed outputs)."""
    import jupytext

    chapter_md = student_source(solution.read_text())
    return {
        CHAPTERS / solution.name: chapter_md,
        CHAPTERS / solution.with_suffix(".ipynb").name: jupytext.writes(read_markdown(chapter_md), fmt="ipynb"),
    }


def stale(solution: Path) -> list[str]:
    """Files that are not what the release makes of `solution`."""
    import jupytext

    problems = []
    if with_badges(solution.read_text()) != solution.read_text():
        problems.append(f"{solution.relative_to(ROOT)} has a badge line that is not the registry's")
    problems += [
        f"{path.relative_to(ROOT)} is not what the release makes of {solution.relative_to(ROOT)}"
        for path, text in planned(solution).items()
        if not path.exists() or path.read_text() != text
    ]
    executed = solution.with_suffix(".ipynb")
    if not executed.exists():
        problems.append(f"{executed.relative_to(ROOT)} is missing")
    elif cell_sources(jupytext.read(executed)) != cell_sources(jupytext.read(solution)):
        problems.append(f"{executed.relative_to(ROOT)} is out of sync with {solution.relative_to(ROOT)}")
    return problems


def cell_sources(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def release(solution: Path) -> None:
    import jupytext

    text = solution.read_text()
    if with_badges(text) != text:
        solution.write_text(with_badges(text))
    for path, text in planned(solution).items():
        path.write_text(text)
    executed = execute(read_markdown(solution.read_text()), cwd=SOLUTIONS)
    jupytext.write(executed, solution.with_suffix(".ipynb"), fmt="ipynb")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.release", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("chapters", nargs="*", help="name prefixes, e.g. 01 03_sinusoidal (default: all)")
    parser.add_argument("--check", action="store_true", help="only report stale files; exit 1 if any")
    args = parser.parse_args(argv)
    solutions = [
        s
        for s in sorted(SOLUTIONS.glob("[0-9][0-9]_*.md"))
        if not args.chapters or any(s.name.startswith(p) for p in args.chapters)
    ]
    if not solutions:
        print("no solution notebooks matched", file=sys.stderr)
        return 2
    if args.check:
        problems = [p for s in solutions for p in stale(s)]
        print("\n".join(problems) or f"{len(solutions)} chapters up to date")
        return 1 if problems else 0
    for solution in solutions:
        print(f"releasing {solution.name} ...", flush=True)
        release(solution)
    return 0


if __name__ == "__main__":
    sys.exit(main())
