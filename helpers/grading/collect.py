"""Collecting a class's submissions before any notebook runs, and reading each one."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from helpers.grading.code import code_only, reaches_grader
from helpers.grading.escape import file_stem, path_text
from helpers.grading.limits import SUBMISSION_MB
from helpers.grading.records import Note, Skipped
from helpers.grading.submission import DISPATCH_OFF, ExerciseInfo

# Cells that reach into the machinery are flagged for a person to look at. Nothing they do changes a
# score any more (the checks run outside the kernel): the flags only point a person at odd code.
SUSPICIOUS = [
    (
        re.compile(
            r"\bhelpers\s*\.\s*(checking|probe|safety|registry|exercises|reference|grade|grading)\b|\b_catalogue\b|\bDIAGNOSES\b"
        ),
        "reaches into the course's checking code",
    ),
    (
        re.compile(
            r"\bsys\s*\.\s*(modules|meta_path|path_hooks|_getframe|settrace|setprofile)\b|\bgc\s*\.\s*get_(objects|referrers)\b"
        ),
        "manipulates the interpreter (sys.modules, import hooks, frames or gc)",
    ),
    (
        re.compile(r"\bbuiltins\b|__builtins__|^[ \t]*(__import__|exec|eval)\s*=", re.MULTILINE),
        "changes Python's builtins",
    ),
    (
        re.compile(r"^[ \t]*(torch|F|nn)([ \t]*\.[ \t]*\w+)+[ \t]*=[^=]|\bsetattr\s*\(\s*(torch|F|nn)\b", re.MULTILINE),
        "replaces a torch function",
    ),
    (
        re.compile(r"\b(input_transformers_\w+|ast_transformers|display_formatter|user_ns|shell_handlers)\b"),
        "hooks into IPython",
    ),
    (re.compile(r"_course_grader"), "reaches for the grader's records in the kernel"),
    (DISPATCH_OFF, "switches off torch's function dispatch (what sees the torch functions a check forbids)"),
    (
        re.compile(r"\bimportlib\b|(?<![.\w])(__import__|exec|eval|compile)\s*\("),
        "imports or runs code built at run time",
    ),
    (
        re.compile(
            r"\binspect\s*\.\s*(currentframe|stack|getouterframes)\b|\b(f_back|f_globals|f_locals|tb_frame|gi_frame)\b"
        ),
        "reads the frames of its callers (the grader's server calls the student's code)",
    ),
]
# Each rule: what finds it in a cell's code (a pattern's search, or grading.code's reading), and what it says.
RULES: list[tuple[Callable[[str], object], str]] = [
    *((pattern.search, what) for pattern, what in SUSPICIOUS),
    (reaches_grader, "reaches into the grader's machinery in the kernel (an import of `grading`, `.grading`)"),
]


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


def class_chapters(submissions: list[Found], exercises: list[ExerciseInfo]) -> set[int] | None:
    """The assignment a class's notebooks show: the chapters more than half of its students show, each
    student one vote at most (a folder of their own, whatever it holds, or one file; copies of the same
    code count once), so that one student's copies of a public solution decide nothing for classmates.
    Every notebook that shows others gets a note: one that pastes another chapter's solved cells is graded
    for the assignment, not for that chapter too. None where no chapter is shown by more than half
    (a folder of several assignments): each notebook is then graded for what it shows."""
    shown: dict[int, set[int]] = {}
    voters: dict[str, set[int]] = {}  # a student (Found.owner, else the file's bytes) -> the chapters they show
    for item in submissions:
        if item.data is not None and item.problem is None:
            try:
                sources = read_cells(item.data)[1]
            except Exception:  # not a notebook: its report says so
                continue
            shown[id(item)] = detect_chapters(sources, item.path.name, exercises)
            voter = item.owner or hashlib.sha256("\0".join(sources).encode("utf-8", "surrogatepass")).hexdigest()
            voters.setdefault(voter, set()).update(shown[id(item)])
    votes = collections.Counter(chapter for chapters in voters.values() for chapter in chapters)
    chosen = {chapter for chapter, count in votes.items() if 2 * count > len(voters)}
    if not chosen:
        return None
    for item in submissions:
        own = shown.get(id(item))
        if own is not None and own != chosen:
            said, graded = (", ".join(f"{c:02d}" for c in sorted(cs)) for cs in (own, chosen))
            item.notes.append(
                f"this notebook shows chapter(s) {said}; most of the class shows {graded}: graded for {graded} (--chapter chooses)"
            )
    return chosen


def suspicious(cells: list[tuple[int, str]]) -> list[Note]:
    """The cells whose code (comments and strings dropped: grading.code) matches a pattern above; each pattern
    is linear in the cell (no `\\s*` that could run across a run of blank lines from every line's start)."""
    code = [(index, code_only(source)) for index, source in cells]
    return [
        {"cell": index, "message": f"this cell {what}; that earns nothing in grading, but look at it by hand"}
        for index, source in code
        for found, what in RULES
        if found(source)
    ]


@dataclass
class Found:
    """A submission as collected: its path as named or found (links not followed), its bytes,
    read once before any notebook runs, or the reason it is not graded as anyone's work."""

    path: Path
    data: bytes | None = None
    problem: tuple[str, str] | None = None  # (error type, message)
    notes: list[str] = field(default_factory=list)  # for a person to look at: the warnings of its report
    inode: tuple[int, int] | None = None
    owner: str | None = None  # the student's folder (the first below a folder named), one vote for all it holds


NOT_GRADED = ("SymbolicLink", "NotARegularFile", "SameFile")  # problems that flag a submission


def read_submission(path: Path, owner: str | None = None) -> Found:
    """A submission's bytes, read once, never following a link or blocking on a FIFO."""
    found = Found(path, owner=owner)
    if os.path.islink(path):
        found.problem = (
            "SymbolicLink",
            f"the submission is a symbolic link (to {path_text(os.readlink(path))}), not a file of its own",
        )
        return found
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        found.problem = (
            "NotebookFormatError",
            f"the submission could not be read: {path_text(error.strerror or str(error))}",
        )
        return found
    with open(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):
            found.problem = ("NotARegularFile", "the submission is a folder")
        elif not stat.S_ISREG(status.st_mode):
            found.problem = ("NotARegularFile", "the submission is not a regular file (a FIFO, a socket or a device)")
        else:
            data = file.read(SUBMISSION_MB * 2**20 + 1)
            if len(data) > SUBMISSION_MB * 2**20:
                found.problem = ("TooLarge", f"the submission is larger than {SUBMISSION_MB} MB: not read")
            else:
                found.data, found.inode = data, (status.st_dev, status.st_ino)
    return found


def collect(arguments: list[str], exclude: Path | None = None) -> tuple[list[Found], list[Skipped]]:
    """The submissions named, or found (recursively) in the named folders, each read now; and
    what was skipped (folders named *.ipynb, links to folders). Raises FileNotFoundError."""
    found: dict[str, Found] = {}  # by absolute path, links not resolved: one path named twice is one submission
    skipped: list[Skipped] = []
    excluded = exclude.resolve() if exclude is not None else None
    for argument in arguments:
        top = Path(argument)
        if not os.path.lexists(top):
            raise FileNotFoundError(argument)
        if not top.is_dir() or top.is_symlink() and top.suffix == ".ipynb":
            found.setdefault(os.path.abspath(top), Found(top))
            continue
        # Several folders named (`submissions/*`): each is a student's, one vote for all it holds, loose files included;
        # one folder named is the class, each folder in it a student's and each loose file its own.
        student = os.path.abspath(top) if len(arguments) > 1 else None
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
                        skipped.append({"path": path_text(path), "reason": "a link to a folder: not followed"})
                elif name.endswith(".ipynb"):
                    skipped.append({"path": path_text(path), "reason": "a folder named *.ipynb, not a notebook"})
                else:
                    keep.append(name)
            subfolders[:] = keep
            for name in sorted(files):
                if name.endswith(".ipynb"):
                    parts = Path(folder, name).relative_to(top).parts
                    owner = os.path.abspath(top / parts[0]) if len(parts) > 1 else student
                    found.setdefault(os.path.abspath(Path(folder, name)), Found(Path(folder, name), owner=owner))
    submissions = [read_submission(item.path, item.owner) for item in found.values()]
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
            others = ", ".join(path_text(o.path) for o in group if o is not item)
            item.problem = (
                "SameFile",
                f"the submission is the same file as {others} (a hard link): decide by hand whose work it is",
            )
            item.data = None
    for item in submissions:
        if item.problem and item.problem[0] == "SymbolicLink":
            with contextlib.suppress(OSError):
                target = os.stat(item.path)
                for other in by_inode.get((target.st_dev, target.st_ino), []):
                    other.notes.append(f"{path_text(item.path)} is a symbolic link to this submission")


def report_names(paths: list[Path]) -> list[str]:
    """A file name per submission: its stem, with as many parent folders as it takes to tell
    colliding ones apart (alice/ch01 -> alice__ch01, bob/ch01 -> bob__ch01); made safe by
    escape.file_stem (a hash where it had to change), and never the same for two."""
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
    names: list[str] = []
    seen: collections.Counter[str] = collections.Counter()
    for stem, path in zip(stems, paths):
        name = file_stem(stem, os.path.abspath(path))
        seen[name] += 1
        names.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return names
