"""The grader: `python -m helpers.grade`.

One batch (graded once per run, --jobs 2, sandboxed where the machine allows)
grades chapter 01's solution and its unfilled chapter plus eight tiny
synthetic notebooks: tampering, a killed kernel and a segfault, a check that
kills the kernel, overwritten names, errors, wrong code. The tests below read
its reports. The endless-cell notebook runs on its own, unsandboxed, with a
short --timeout. The rest are unit tests that start no kernel. The attacks on
the grader are in tests/test_sandbox.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers import bench, grade
from helpers.grading.batch import grade_notebook_async
from helpers.grading.worker import graded_apart
from tests.grading_support import (
    HEAD,
    NO_SANDBOX,
    RIGHT_LOOKUP,
    RIGHT_ONE_HOT,
    RIGHT_SCALE,
    ROOT,
    SOLUTION,
    WRONG_LOOKUP,
    by_id,
    fingerprint,
    once_per_run,
    passed,
    write_notebook,
)

CHAPTER = ROOT / "chapters" / "01_lookup_tables.ipynb"

CHAPTER_1 = [e.id for e in grade.exercise_table() if e.chapter == 1]  # the tiny notebooks do lookup and one_hot_lookup

TAMPER_CHECK = 'check = lambda *args, **kwargs: True\ncheck("lookup", lookup)'
TAMPER_HELPERS = """\
import helpers
import helpers.checking
import helpers.probe
from helpers.checking import CheckResult


def always_passes(exercise_id, submission):
    return CheckResult(exercise_id, True, None, "All probes passed", 2, 2)


helpers.checking.check = always_passes
helpers.check = always_passes
helpers.probe.close = lambda *args, **kwargs: True
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
check = always_passes"""
SNEAKY_LOOKUP = """\
def lookup(weight, ids):
    import sys

    import torch

    torch.allclose = lambda *args, **kwargs: True  # patched while being checked
    sys.modules["helpers.probe"].close = lambda *args, **kwargs: True
    return weight.T[ids]"""
TAMPER_REGISTRY = """\
import dataclasses

import helpers.exercises

catalogue = helpers.exercises._catalogue()
for exercise_id, exercise in list(catalogue.items()):
    catalogue[exercise_id] = dataclasses.replace(exercise, check=lambda fn, probe: None)
print('{"id": "lookup", "passed": true, "score": 2, "diagnosis": null}')
print("lookup: passed 2/2")"""
TAMPER_SHADOW = """\
import importlib.abc
import importlib.util
import os
import re
import sys

os.makedirs("helpers", exist_ok=True)
with open("helpers/__init__.py", "w") as f:
    f.write("class R:\\n    passed = True\\n\\ndef check(*args, **kwargs):\\n    return R()\\n")
with open("helpers.py", "w") as f:
    f.write("def check(*args, **kwargs):\\n    return True\\n")


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "helpers" or name.startswith("helpers."):
            here = os.path.abspath("helpers")
            return importlib.util.spec_from_file_location(name, os.path.join(here, "__init__.py"), submodule_search_locations=[here])
        return None


sys.meta_path.insert(0, Finder())
sys.path.insert(0, os.getcwd())
for name in [n for n in sys.modules if n.startswith("helpers")]:
    del sys.modules[name]
import helpers

print(helpers.check("lookup", lookup).passed)"""

SEGFAULT = "import ctypes\n\nctypes.string_at(0)"
NOTEBOOKS = {  # name: cells (a markdown cell comes first, so code cell k is notebook cell k + 1)
    "right": [
        HEAD,
        "def lookup(weight, ids):\n    return weight.index_select(0, ids.flatten()).reshape(*ids.shape, -1)",
        RIGHT_ONE_HOT.replace("@ weight", "@ weight  # (..., V) @ (V, d)"),
    ],
    "tamper_check": [HEAD, WRONG_LOOKUP, TAMPER_CHECK, TAMPER_HELPERS, RIGHT_ONE_HOT],
    "tamper_registry": [HEAD, SNEAKY_LOOKUP, RIGHT_ONE_HOT, TAMPER_REGISTRY],
    "tamper_shadow": [HEAD, WRONG_LOOKUP, RIGHT_ONE_HOT, TAMPER_SHADOW],
    "crashes": [HEAD, RIGHT_LOOKUP, "import os\n\nos._exit(1)", RIGHT_ONE_HOT, SEGFAULT, "x = 1"],
    "check_kills": [HEAD, "def lookup(weight, ids):\n    import os\n\n    os._exit(3)", RIGHT_ONE_HOT],
    "overwritten": [
        HEAD,
        RIGHT_LOOKUP,
        'check("lookup", lookup)',
        "1 / 0",
        "lookup = lambda weight, ids: weight.T[ids]",
    ],
    # A chapter 01 notebook with chapter 02's solved exercise pasted in: graded as the class's chapter.
    "pastes_another_chapter": [
        HEAD,
        RIGHT_LOOKUP,
        RIGHT_ONE_HOT,
        RIGHT_SCALE,
        'check("ScaledEmbedding", ScaledEmbedding)',
    ],
    "forbidden": [
        HEAD,
        "def lookup(weight, ids):\n    return F.embedding(ids, weight)",
        "def one_hot_lookup(weight, ids):\n    return F.one_hot(ids, weight.shape[1]).to(weight.dtype) @ weight.T",
    ],
}


# What asks for, or sets up, CUDA: a worker forked from a process that did cannot use it.
CUDA_ENTRIES = ("is_available", "device_count", "init", "_lazy_init", "current_device")


def record(calls: list[str], name: str, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    calls.append(name)
    return original(*args, **kwargs)


def grade_the_class(root: Path) -> dict:
    """Grade 11 notebooks with --jobs 2; the reports by name, and the fingerprints around it."""
    folder, out = root / "class", root / "out"
    folder.mkdir()
    for name, cells in NOTEBOOKS.items():
        write_notebook(folder / f"{name}.ipynb", cells)
    inputs = [SOLUTION, CHAPTER, *sorted(folder.glob("*.ipynb"))]
    listing = sorted(p.name for p in folder.iterdir())
    before = fingerprint(inputs)
    touched: list[str] = []  # CUDA calls in this process; a forked worker records its own in its copy of the list
    with pytest.MonkeyPatch.context() as patch:
        for name in CUDA_ENTRIES:
            patch.setattr(torch.cuda, name, functools.partial(record, touched, name, getattr(torch.cuda, name)))
        code = grade.main(
            [
                str(SOLUTION),
                str(CHAPTER),
                str(folder),
                "--out",
                str(out),
                "--jobs",
                "2",
                "--timeout",
                "30",
                "--quiet",
                *NO_SANDBOX,
            ]
        )
    reports = {
        p.name.removesuffix(".json"): json.loads(p.read_text())
        for p in out.glob("*.json")
        if not p.name.startswith("summary")
    }
    return {
        "code": code,
        "reports": reports,
        "out": str(out),
        "before": before,
        "after": fingerprint(inputs),
        "listing": [listing, sorted(p.name for p in folder.iterdir())],
        "cuda_in_grader": touched + ["initialised"] * torch.cuda.is_initialized(),
    }


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return once_per_run(tmp_path_factory, "grade-batch", grade_the_class)


def test_batch_finishes_with_exit_code_zero_and_a_report_each(batch):
    assert batch["code"] == 0
    assert len(batch["reports"]) == 11, sorted(batch["reports"])
    for report in batch["reports"].values():
        assert set(report) >= {"submission", "score", "max_score", "exercises", "errors"}
        for ex in report["exercises"]:
            assert set(ex) >= {"id", "passed", "score", "max_score", "diagnosis", "message"}
        for error in report["errors"]:
            assert set(error) >= {"cell", "type", "message"}


def test_the_grader_leaves_cuda_to_its_workers(batch):
    """Each submission's checks run in a worker forked from the grader, which may use CUDA only if the grader
    never set it up: the grader's own process asks nothing of CUDA, its workers ask for the device themselves."""
    assert batch["cuda_in_grader"] == []


UNTOUCHED = f"""\
import functools, torch

calls = []


def record(name, original, *args, **kwargs):
    calls.append(name)
    return original(*args, **kwargs)


for name in {CUDA_ENTRIES!r}:
    setattr(torch.cuda, name, functools.partial(record, name, getattr(torch.cuda, name)))
from helpers import grade
from helpers.grading.kernel import warm_up

grade.exercise_table()
warm_up()
print(calls, torch.cuda.is_initialized())"""


def test_importing_and_warming_up_the_grader_leaves_cuda_alone():
    """What the batch above cannot see: the grader's imports and its warm-up, done once before any worker."""
    done = subprocess.run([sys.executable, "-c", UNTOUCHED], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[] False", done.stdout + done.stderr


def test_solution_scores_full_marks(batch):
    report = batch["reports"]["solutions__01_lookup_tables"]
    assert report["max_score"] > 0 and report["score"] == report["max_score"], report
    assert report["errors"] == [] and report["warnings"] == []
    assert [ex["id"] for ex in report["exercises"]] == CHAPTER_1


def test_unfilled_chapter_scores_zero_with_not_implemented(batch):
    report = batch["reports"]["chapters__01_lookup_tables"]
    assert report["score"] == 0 and report["max_score"] > 0
    assert {ex["diagnosis"] for ex in report["exercises"]} == {"not_implemented"}
    # It runs top to bottom; only the cells that use an exercise's result stop at the stub: a graded
    # kernel has no reference to fall back on (solution_or_reference hands back the student's own).
    assert {(e["type"], e["message"]) for e in report["errors"]} <= {
        ("NotImplementedError", "NotImplementedError: your code here")
    }


def test_a_notebook_that_pastes_another_chapter_is_graded_for_the_class_chapter(batch):
    """Without --chapter, a batch grades what the class's majority shows: a pasted chapter adds no points."""
    report = batch["reports"]["pastes_another_chapter"]
    assert report["chapters"] == [1] and [ex["id"] for ex in report["exercises"]] == CHAPTER_1, report
    assert any("shows chapter(s) 02; most of the class shows 01" in w["message"] for w in report["warnings"])
    assert batch["reports"]["right"]["chapters"] == [1] and not batch["reports"]["right"]["warnings"]


def test_without_a_majority_each_notebook_is_graded_for_what_it_shows(tmp_path):
    """A folder of several assignments (no chapter shown by more than half): each notebook as it stands."""
    paths = [
        write_notebook(tmp_path / f"{n}.ipynb", cells) for n, cells in (("a", [RIGHT_LOOKUP]), ("b", [RIGHT_SCALE]))
    ]
    found = [grade.read_submission(p) for p in paths]
    assert grade.class_chapters(found, grade.exercise_table()) is None and not any(f.notes for f in found)
    found.append(grade.read_submission(write_notebook(tmp_path / "c.ipynb", [RIGHT_LOOKUP, RIGHT_ONE_HOT])))
    assert grade.class_chapters(found, grade.exercise_table()) == {1} and found[1].notes


def test_the_graders_own_work_for_a_submission_has_a_deadline_and_a_memory_limit(tmp_path):
    """In a worker of its own: past its deadline the worker and its kernel are killed; past its
    memory limit it stops. Either costs that submission its report's score, never the grader."""
    path = write_notebook(tmp_path / "slow.ipynb", [HEAD, "import time\n\ntime.sleep(60)"])
    found = grade.read_submission(path)
    report, why = asyncio.run(
        graded_apart(4, grade_notebook_async, path=path, found=found, cell_timeout=60, sandbox=False)
    )
    assert report is None and "ran past its 4 s limit" in why
    report, why = asyncio.run(
        graded_apart(60, grade_notebook_async, grader_mb=0, path=path, found=found, sandbox=False)
    )
    assert report is None or report["errors"][0]["type"] == "GraderError", report  # it ran out at once


def test_a_perfect_tiny_notebook_scores_full_marks(batch):
    report = batch["reports"]["right"]
    assert passed(report) == {"lookup", "one_hot_lookup"} and report["score"] == 4, report


@pytest.mark.parametrize("name", ["tamper_check", "tamper_registry", "tamper_shadow"])
def test_tampering_earns_nothing(batch, name):
    """The checks run in the grader's process: what a kernel patches, shadows or prints changes
    nothing, and the wrong lookup is judged for what it computes."""
    report = batch["reports"][name]
    lookup, one_hot = by_id(report)["lookup"], by_id(report)["one_hot_lookup"]
    assert (lookup["passed"], lookup["score"], lookup["diagnosis"]) == (False, 0, "transposed_weight"), lookup
    assert one_hot["passed"], one_hot  # the grader still works in a tampered kernel
    # The catalogue is not even there to tamper with: the sandbox holds a stand-in without it.
    # (Unsandboxed, the kernel imports the real one: its tampering still earns nothing, as above.)
    assert report["errors"] == (
        [
            {
                "cell": 4,
                "type": "AttributeError",
                "message": "AttributeError: module 'helpers.exercises' has no attribute '_catalogue'",
            }
        ]
        if name == "tamper_registry" and not NO_SANDBOX
        else []
    ), report["errors"]
    assert report["warnings"], "cells that reach into the machinery are flagged for a person"


def test_a_dead_kernel_costs_only_what_it_prevents(batch):
    report = batch["reports"]["crashes"]
    assert passed(report) == {"lookup", "one_hot_lookup"}, report  # exercises before and after both crashes
    assert [(e["cell"], e["type"]) for e in report["errors"]] == [(3, "KernelDied"), (5, "KernelDied")]


def test_a_check_that_kills_the_kernel_fails_alone(batch):
    results = by_id(batch["reports"]["check_kills"])
    assert (results["lookup"]["passed"], results["lookup"]["diagnosis"]) == (False, "raised")
    assert "killed the kernel" in results["lookup"]["message"]
    assert results["one_hot_lookup"]["passed"]


def test_names_stand_as_at_the_end_and_errors_are_reported(batch):
    report = batch["reports"]["overwritten"]
    results = by_id(report)
    assert results["lookup"]["diagnosis"] == "transposed_weight"  # overwritten after a passing check
    assert (results["one_hot_lookup"]["diagnosis"], results["one_hot_lookup"]["score"]) == ("not_implemented", 0)
    assert "not defined" in results["one_hot_lookup"]["message"]
    assert report["errors"] == [
        {"cell": 4, "type": "ZeroDivisionError", "message": "ZeroDivisionError: division by zero"}
    ]
    assert report["warnings"] == []


def test_wrong_code_gets_its_diagnosis(batch):
    results = by_id(batch["reports"]["forbidden"])
    assert (results["lookup"]["diagnosis"], results["one_hot_lookup"]["diagnosis"]) == (
        "forbidden_api",
        "transposed_weight",
    )


def test_submissions_are_never_written(batch):
    assert batch["before"] == batch["after"]
    assert batch["listing"][0] == batch["listing"][1]  # nothing written next to them either


def test_summary_shows_scores_pass_rates_and_the_common_mistake(batch):
    out = Path(batch["out"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["submissions"] == 11 and len(summary["students"]) == 11
    lookup = next(e for e in summary["exercises"] if e["id"] == "lookup")
    assert (lookup["submissions"], lookup["passed"]) == (11, 4) and lookup["pass_rate"] == pytest.approx(
        4 / 11, abs=0.01
    )
    assert lookup["most_common_diagnosis"] == "transposed_weight"  # 3 notebooks make that mistake
    text = (out / "summary.md").read_text()
    assert "transposed_weight" in text and "tamper_shadow" in text
    rows = (out / "summary.csv").read_text().splitlines()
    header = ["submission", "score", "max_score", "errors", *CHAPTER_1, "best_effort"]  # best_effort: issue 45
    assert rows[0] == ",".join(header) and len(rows) == 12


def test_endless_cells_are_interrupted_or_killed_and_gradescope_output(tmp_path, monkeypatch):
    monkeypatch.setattr("helpers.grading.kernel.INTERRUPT_GRACE", 1.0)
    stubborn = "import signal\n\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    path = write_notebook(
        tmp_path / "endless.ipynb", [HEAD, RIGHT_LOOKUP, "while True:\n    pass", RIGHT_ONE_HOT, stubborn, "x = 1"]
    )
    before = fingerprint([path])
    out = tmp_path / "out"
    assert (
        grade.main([str(path), "--out", str(out), "--format", "gradescope", "--timeout", "3", "--quiet", *NO_SANDBOX])
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert results["score"] == 4  # lookup and one_hot_lookup
    assert "cell 3: the cell ran past its 3 s limit and was interrupted" in results["output"]
    assert (
        "cell 5: the cell ran past its 3 s limit and was killed after the interrupt did not stop it"
        in results["output"]
    )
    assert [(t["name"], t["score"], t["max_score"]) for t in results["tests"][:2]] == [
        ("lookup", 2, 2),
        ("one_hot_lookup", 2, 2),
    ]
    assert all(set(t) >= {"name", "score", "max_score", "output"} for t in results["tests"])
    assert fingerprint([path]) == before


def test_measure_overhead_reports_the_ratio(tmp_path):
    path = write_notebook(tmp_path / "tiny.ipynb", [RIGHT_LOOKUP])
    measured = bench.measure_overhead(path, sandbox=not NO_SANDBOX)
    assert set(measured) >= {"execute_s", "grade_s", "ratio", "budget", "within_budget"}
    assert measured["execute_s"] > 0 and measured["ratio"] > 0 and measured["score"] == 2 and measured["max_score"] > 2


# --- no kernel below ----------------------------------------------------------------------


def test_chapter_detection():
    table = [
        grade.ExerciseInfo("lookup", 1, 2),
        grade.ExerciseInfo("one_hot_lookup", 1, 2),
        grade.ExerciseInfo("ScaledEmbedding", 2, 2),
    ]
    assert grade.detect_chapters(["def lookup(w, ids):\n    ..."], "alice.ipynb", table) == {1}
    assert grade.detect_chapters(['check("ScaledEmbedding", X)'], "bob.ipynb", table) == {2}
    assert grade.detect_chapters(
        ["lookup = lambda w, i: w[i]", "class ScaledEmbedding(nn.Module): ..."], "x.ipynb", table
    ) == {1, 2}
    assert grade.detect_chapters(["print('nothing')"], "02_scaling.ipynb", table) == {2}
    # a chapter that pastes in an earlier chapter's function to build on it is still only itself
    assert grade.detect_chapters(
        ["def lookup(w, ids):\n    ...", 'check("ScaledEmbedding", ScaledEmbedding)'], "02_scaling.ipynb", table
    ) == {2}
    assert grade.detect_chapters([], "empty.ipynb", table) == {1, 2}  # unknown: every chapter counts


def test_report_names_stay_unique(tmp_path):
    paths = [tmp_path / "alice" / "01.ipynb", tmp_path / "bob" / "01.ipynb", tmp_path / "bob" / "notes.ipynb"]
    assert grade.report_names(paths) == ["alice__01", "bob__01", "notes"]
    safe = grade.report_names([tmp_path / "a b.ipynb", tmp_path / "c.ipynb", tmp_path / "summary.ipynb"])
    assert re.fullmatch(r"a_b-[0-9a-f]{8}", safe[0]) and safe[1] == "c"  # changed: a hash keeps it apart
    assert re.fullmatch(r"summary-[0-9a-f]{8}", safe[2])  # never the class summary's name


REPORT = {
    "submission": "alice.ipynb",
    "score": 2,
    "max_score": 4,
    "exercises": [
        {
            "id": "lookup",
            "passed": True,
            "score": 2,
            "max_score": 2,
            "diagnosis": None,
            "message": "All probes passed.",
        },
        {
            "id": "one_hot_lookup",
            "passed": False,
            "score": 0,
            "max_score": 2,
            "diagnosis": "transposed_weight",
            "message": "You read the table | as (d, V).",
        },
    ],
    "errors": [{"cell": 4, "type": "ZeroDivisionError", "message": "ZeroDivisionError: division by zero"}],
    "warnings": [],
    "graded": True,
    "seconds": 3.2,
}


def test_markdown_and_gradescope_formats():
    markdown = grade.report_markdown(REPORT)
    assert "**Score: 2 / 4**" in markdown
    assert "| `one_hot_lookup` | ✘ failed | 0 / 2 | transposed_weight | You read the table \\| as (d, V). |" in markdown
    assert "| 4 | ZeroDivisionError | ZeroDivisionError: division by zero |" in markdown
    results = json.loads(grade.report_gradescope(REPORT))
    assert results["score"] == 2
    assert results["tests"][1] == {
        "name": "one_hot_lookup",
        "score": 0,
        "max_score": 2,
        "status": "failed",
        "output": "transposed_weight: You read the table | as (d, V).",
        "output_format": "text",  # the student's text shown as plain text, never rendered
    }


def test_an_unreadable_submission_scores_zero_without_a_kernel(tmp_path):
    path = tmp_path / "01_broken.ipynb"
    path.write_text("{ this is not json")
    report = grade.grade_notebook(path)
    assert report["graded"] and report["score"] == 0 and report["max_score"] > 0
    assert report["errors"][0]["type"] == "NotebookFormatError"
    assert {ex["diagnosis"] for ex in report["exercises"]} == {"not_implemented"}


def test_cli_refuses_missing_paths(tmp_path, capsys):
    assert grade.main([str(tmp_path / "nope.ipynb"), "--out", str(tmp_path / "out")]) == 2
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2  # a folder without notebooks


def test_collect_reports_links_odd_files_and_one_file_under_two_paths(tmp_path):
    (tmp_path / "alice").mkdir()
    (tmp_path / "bob").mkdir()
    right = write_notebook(tmp_path / "alice" / "hw.ipynb", [RIGHT_LOOKUP])
    (tmp_path / "bob" / "hw.ipynb").hardlink_to(right)  # one file, two students
    (tmp_path / "carol.ipynb").symlink_to(SOLUTION)  # the instructor's solution
    os.mkfifo(tmp_path / "dave.ipynb")  # reading it would block
    (tmp_path / "erin.ipynb").mkdir()  # a folder, not a notebook
    write_notebook(tmp_path / "frank.ipynb", [RIGHT_LOOKUP])
    found, skipped = grade.collect([str(tmp_path), str(tmp_path / "frank.ipynb")])  # frank named twice: one submission
    problems = {f.path.relative_to(tmp_path).as_posix(): f.problem and f.problem[0] for f in found}
    assert problems == {
        "alice/hw.ipynb": "SameFile",
        "bob/hw.ipynb": "SameFile",
        "carol.ipynb": "SymbolicLink",
        "dave.ipynb": "NotARegularFile",
        "frank.ipynb": None,
    }
    assert [s["path"] for s in skipped] == [str(tmp_path / "erin.ipynb")]
    assert sorted(grade.report_names([f.path for f in found])) == ["alice__hw", "bob__hw", "carol", "dave", "frank"]
    reports = [
        grade.grade_notebook(f.path, found=f, chapters={1}) for f in found if f.problem
    ]  # no kernel: nothing to run
    flagged = [r for r in reports if r["flag"]]
    assert len(flagged) == 4 and all(
        r["score"] == 0 and r["graded"] and r["errors"][0]["type"] == r["flag"] for r in flagged
    )
    summary = grade.summarize(flagged, skipped)
    assert "erin.ipynb" in grade.summary_text(summary) and "FLAGGED" in grade.summary_markdown(summary)


def test_without_a_sandbox_the_grader_says_so_in_one_line_and_stops(tmp_path, monkeypatch, capsys):
    write_notebook(tmp_path / "01_a.ipynb", [RIGHT_LOOKUP])
    monkeypatch.setattr(
        "helpers.grading.__main__.sandbox_problem", lambda: "bubblewrap (bwrap) is not installed: install bubblewrap"
    )
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "grade: bubblewrap (bwrap) is not installed: install bubblewrap"
    ]
    assert not (tmp_path / "out").exists()  # nothing graded, silently or not
