"""Every chapter and solution, as a student meets it: a real JupyterLab server,
a real (headless) Chromium, a real click on Run > Run All Cells.

For each notebook in chapters/ and solutions/ (found by glob, so new chapters
are covered with no change here):
  * open it as the README says (`course.py lab` opens chapters/01 by URL; the
    others from the file browser), and its kernel starts;
  * a chapter: run all cells, wait for the kernel to go idle (chapters that
    train run with fewer seeds and steps, set in their `parameters` cell). A solution is
    executed by nbval (`course.py test` runs it just before this suite: fresh
    kernel, every output compared with the stored one), so here its stored
    outputs are opened, trusted (Trust Notebook) and must render; it runs
    live only if an explorer cell differs from its chapter's;
  * no error output and no stderr, on screen or in the notebook JupyterLab saves;
  * every figure shows an image, every slider renders and, in what ran live,
    moved with the keyboard, changes its value and what it drives (the plot);
    a solution's explorer cells are its chapter's, moved there;
  * check panels: a solution shows the panels its stored outputs show (pass,
    or a failure it demonstrates on purpose); an unfilled chapter shows
    "not implemented yet" (check-fail, not_implemented) where the solution passes;
  * each .md opens as a notebook through jupytext's JupyterLab integration
    (right click > Open With > Jupytext Notebook) with the cells and the code
    of its .ipynb twin, and its kernel starts; in chapters/ (what students
    open) its first code cell, the imports, runs without error too.
    The .md files are not run to the end: their cells are those of the .ipynb
    (checked here), and JupyterLab already reads an .ipynb's inputs from its
    paired .md, so a full run would repeat the .ipynb run and nearly double the
    suite's time; what is specific to the .md is the jupytext route (Open
    With factory, contents manager, MyST reader, kernel from the front matter).
Screenshots, one full-height picture per notebook that fails (per .ipynb too
with COURSE_SCREENSHOTS=1), go to screenshots/ (ignored by git) for a person to look at.

Run it:  PYTHONPATH=$PWD .venv/bin/python -m pytest -q -n 2 --dist worksteal tests/test_browser.py
(each xdist worker has its own JupyterLab server and Chromium; 1 to 2 workers.)
Needs Debian's `chromium` (apt-get install chromium); never `playwright install`.
Without chromium it skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from tests.browser_support import (
    CHROMIUM_ARGS,
    ROOT,
    SCREENSHOTS,
    Lab,
    LabServer,
    chromium_path,
    discover,
    expectations,
    saved_problems,
)

pytestmark = pytest.mark.browser

NOTEBOOKS = discover()
IPYNB = [p for p in NOTEBOOKS if p.endswith(".ipynb")]
MARKDOWN = [p for p in NOTEBOOKS if p.endswith(".md")]
FIRST = next((p for p in IPYNB if p.startswith("chapters/")), IPYNB[0] if IPYNB else None)
RAN = re.compile(r"\[\d+\]:?")  # the input prompt of a cell that ran
RUN_TIMEOUT = float(os.environ.get("COURSE_BROWSER_RUN_TIMEOUT", "180"))  # seconds per notebook
# A full-height screenshot lays the whole notebook out again, a second of Chromium's time each.
EVERY_SCREENSHOT = os.environ.get("COURSE_SCREENSHOTS") == "1"


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: the browser suite is required in CI")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    lab_server = LabServer(tmp_path_factory.mktemp("jupyterlab"))
    lab_server.start()
    yield lab_server
    lab_server.stop()


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium and Playwright, or a skip (a failure under CI=true)."""
    executable = chromium_path()
    if executable is None:
        _unavailable("chromium is not installed (Debian: apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
    return executable


@pytest.fixture(scope="session")
def lab(chromium, server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.set_default_timeout(30_000)
        lab_page = Lab(page, server)
        lab_page.boot(FIRST)
        yield lab_page
        browser.close()


def _screenshot_name(path: str) -> Path:
    return SCREENSHOTS / (path.replace("/", "__") + ".png")


def _open(lab: Lab, path: str, notebook: dict, open_with: str | None = None, wait_idle: bool = True) -> None:
    if open_with is not None or lab.current_path() != path:
        lab.close_everything()
        lab.phase("close the last one")
        lab.file_browser_open(path, open_with=open_with)
    kernel = notebook.get("metadata", {}).get("kernelspec", {}).get("name", "python3")
    lab.wait_loaded(path, len(notebook["cells"]), kernel=kernel, wait_idle=wait_idle)
    lab.phase("open")


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _normalise(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.replace("\u00a0", " ").strip().splitlines())


def _check_panel_problems(where: str, shown: list[dict], expected: list[tuple[bool, str]], unfilled: bool) -> list[str]:
    """A solution shows the panels its stored outputs show. An unfilled
    chapter shows "not implemented yet" where the solution passes, and the
    same diagnosis where the solution fails on purpose (a demonstration)."""
    if len(shown) != len(expected):
        return [f"{where} should show {len(expected)} check panel(s); it shows {len(shown)}"]
    problems = []
    for panel, (passed, diagnosis) in zip(shown, expected):
        text = " ".join(panel["text"].split())
        if "check-fail" in panel["cls"] and len(text.split(" points", 1)[-1]) < 20:
            problems.append(f"{where}: a failing check panel shows no message: {text!r}")
        if unfilled and passed:
            if not (
                "check-todo" in panel["cls"] and panel["diagnosis"] == "not_implemented" and "not started yet" in text
            ):
                problems.append(
                    f"{where}: an unfilled chapter's check should be a neutral 'not started yet' panel; it shows: {text[:300]!r}"
                )
        elif passed and "check-pass" not in panel["cls"]:
            problems.append(f"{where}: the solution's check does not pass: {text[:300]!r}")
        elif not passed and not (
            ("check-fail" in panel["cls"] or "check-todo" in panel["cls"])
            and panel["diagnosis"] in (diagnosis, "not_implemented")
        ):
            problems.append(
                f"{where}: this check should fail with {diagnosis!r}, as the solution shows; it shows: {text[:300]!r}"
            )
    return problems


def _stored_outputs_suffice(path: str, expected) -> bool:
    """A solution is executed by nbval, which runs it in a fresh kernel and
    compares every output with the one stored in its .ipynb: here its stored
    outputs are opened, trusted and must render (figures, check panels, widgets
    from the saved widget state). What needs a live kernel, a slider moving
    what it drives, is checked on its chapter, which runs live and has the
    same explorer cells; a solution whose explorer cell differs runs live."""
    if not path.startswith("solutions/"):
        return False
    chapter = ROOT / "chapters" / Path(path).name
    if not chapter.exists():
        return False
    mine, theirs = (json.loads(p.read_text(encoding="utf-8"))["cells"] for p in (ROOT / path, chapter))
    return len(mine) == len(theirs) and all(_source(mine[i]) == _source(theirs[i]) for i in expected.sliders)


def _server_log(lab: Lab) -> str:
    return "\n--- JupyterLab server log (tail) ---\n" + lab.server.log(3000)


def test_notebooks_are_found():
    assert any(p.startswith("chapters/") for p in IPYNB), "no chapters/NN_*.ipynb found"
    assert any(p.startswith("solutions/") for p in IPYNB), "no solutions/NN_*.ipynb found"
    for path in IPYNB:
        assert path[: -len(".ipynb")] + ".md" in MARKDOWN, f"{path} has no .md twin"


@pytest.mark.parametrize("path", IPYNB)
def test_notebook_runs_in_jupyterlab(lab, path):
    unfilled = path.startswith("chapters/")
    expected = expectations(ROOT / path)
    stored = _stored_outputs_suffice(path, expected)
    problems: list[str] = []
    started = time.monotonic()
    passed = False
    lab.start_clock()
    try:
        _open(lab, path, json.loads((ROOT / path).read_text(encoding="utf-8")))
        if stored:
            lab.trust(path)
            lab.wait_rendered(expected.figures, expected.sliders)
            lab.phase("trust and render stored outputs")
        else:
            lab.run_all(path, RUN_TIMEOUT)
            lab.phase("run all")
            lab.save()
            lab.phase("save")
        cells = lab.cells()
        assert [c["type"] for c in cells] == expected.cell_types, "the cells on screen are not the notebook's cells"

        for i, cell in enumerate(cells):
            where = f"cell {i}"
            if cell["type"] == "code" and not RAN.fullmatch(cell["prompt"]):
                problems.append(f"{where} did not run (prompt {cell['prompt']!r})")
            problems += [f"{where} shows error/stderr output:\n{text}" for text in cell["errors"]]
            problems += [f"{where}: a widget did not render: {text[:200]!r}" for text in cell["widgetText"]]
            if cell["images"] != cell["imagesLoaded"]:
                problems.append(f"{where}: {cell['images'] - cell['imagesLoaded']} image(s) did not load")
            if i in expected.figures and cell["imagesLoaded"] == 0:
                problems.append(f"{where} should show a figure (per {expected.oracle}) and shows no image")
            if cell["sliders"] < expected.sliders.get(i, 0):
                problems.append(
                    f"{where} should show {expected.sliders[i]} slider(s) (per {expected.oracle}); it shows {cell['sliders']}"
                )
            problems += _check_panel_problems(where, cell["checks"], expected.checks.get(i, []), unfilled)

        problems += [f"saved notebook: {p}" for p in saved_problems(lab.server.root / path)]

        for i, cell in enumerate(cells if not stored else []):  # stored: its chapter moves the same sliders live
            for k in range(cell["sliders"]):
                before, after = lab.move_slider(i, k, path)
                what = f"cell {i}, slider {k} ({before['readout']!r} -> {after['readout']!r})"
                if after["value"] == before["value"]:
                    problems.append(f"{what}: the slider did not move when its handle got an arrow key")
                elif after["driven"] == before["driven"]:
                    problems.append(f"{what}: moving the slider changed nothing it drives (plot or text)")
                if after["images"] != after["imagesLoaded"] or after["imagesLoaded"] < before["imagesLoaded"]:
                    problems.append(
                        f"{what}: after the move the figure is missing ({after['imagesLoaded']} of {before['imagesLoaded']} images)"
                    )
                problems += [f"{what}: error output after the move:\n{text}" for text in after["errors"]]
        lab.phase("inspect and sliders")
        passed = not problems
    finally:
        try:
            if EVERY_SCREENSHOT or not passed:
                lab.screenshot(_screenshot_name(path))
                lab.phase("screenshot")
        finally:
            print(f"\n{path}: opened, ran and inspected in {time.monotonic() - started:.1f} s ({lab.phase_report()})")
    assert not problems, f"{path} in JupyterLab:\n- " + "\n- ".join(problems) + _server_log(lab)


@pytest.mark.parametrize("path", MARKDOWN)
def test_markdown_opens_with_jupytext(lab, path):
    """Right click > Open With > Jupytext Notebook: the .md becomes a notebook
    with the cells and code of its .ipynb twin, and its kernel starts. In the
    chapters (what students open) the first code cell, the imports, also runs.
    """
    twin = lab.server.root / (path[: -len(".md")] + ".ipynb")  # the served copy: see `run_with_fewer_steps`
    if not twin.exists():
        pytest.fail(f"{path} has no .ipynb twin")
    expected = expectations(twin)
    twin_notebook = json.loads(twin.read_text(encoding="utf-8"))
    twin_code = [_normalise(_source(c)) for c in twin_notebook["cells"] if c["cell_type"] == "code"]
    student_file = path.startswith("chapters/")
    started = time.monotonic()
    lab.start_clock()
    passed = False
    try:
        # The kernel named in the .md's front matter must start; only the
        # students' files wait for it and run their first cell (time budget).
        _open(lab, path, twin_notebook, open_with="Jupytext Notebook", wait_idle=student_file)
        cells = lab.cells()
        assert [c["type"] for c in cells] == expected.cell_types, (
            f"{path} opened through jupytext does not have the cells of {twin.name}"
        )
        shown_code = [_normalise(c["source"]) for c in cells if c["type"] == "code"]
        for i, (shown, stored) in enumerate(zip(shown_code, twin_code)):
            assert shown == stored, (
                f"{path}: code cell {i} differs from {twin.name}'s:\n--- shown ---\n{shown}\n--- {twin.name} ---\n{stored}"
            )
        if student_file:
            lab.run_first_code_cell(path, RUN_TIMEOUT)
            first = next(c for c in lab.cells() if c["type"] == "code")
            assert RAN.fullmatch(first["prompt"]), f"the first code cell did not run: {first['prompt']!r}"
            assert not first["errors"], (
                f"{path}: the first code cell shows error output:\n" + "\n".join(first["errors"]) + _server_log(lab)
            )
            lab.phase("first cell")
        passed = True
    finally:
        try:
            if not passed:  # the .ipynb runs have their pictures; these are for a failure
                lab.screenshot(_screenshot_name(path))
                lab.phase("screenshot")
        finally:
            print(f"\n{path}: opened through jupytext in {time.monotonic() - started:.1f} s ({lab.phase_report()})")


STAGED = [  # a scratch notebook: one wrong check, one not started, the progress table
    "from helpers import check, progress",
    "def lookup(weight, ids):\n    return weight.T[ids]\n\ncheck('lookup', lookup)",
    "def one_hot_lookup(weight, ids):\n    raise NotImplementedError('your code here')\n\ncheck('one_hot_lookup', one_hot_lookup)",
    "progress()",
]


def test_feedback_is_staged_and_progress_shows(lab):
    """A failing check shows its diagnosis at once; the hint and then the fix unfold
    on click (plain HTML <details>: no extension, no trusted JavaScript); an unfilled
    exercise is neutral, not red; progress() renders its table."""
    path = "chapters/scratch_feedback.ipynb"
    cells = [
        {"cell_type": "code", "metadata": {}, "source": code, "outputs": [], "execution_count": None} for code in STAGED
    ]
    notebook = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (lab.server.root / path).write_text(json.dumps(notebook), encoding="utf-8")
    passed = False
    lab.start_clock()
    try:
        _open(lab, path, notebook)
        lab.run_all(path, RUN_TIMEOUT)
        page = lab.page
        failing = page.locator("div.course-check.check-fail").first
        assert failing.get_attribute("data-diagnosis") == "transposed_weight"
        assert "rows" in failing.inner_text()  # the diagnosis is visible at once
        hint, fix = failing.locator("details.check-hint"), failing.locator("details.check-fix")
        assert hint.get_attribute("open") is None and not fix.is_visible()  # both folded
        hint.locator("summary").first.click()
        assert hint.get_attribute("open") is not None and fix.is_visible() and fix.get_attribute("open") is None
        fix.locator("summary").click()
        assert fix.get_attribute("open") is not None and "weight[" in fix.inner_text()
        todo = page.locator("div.course-check.check-todo").first
        assert todo.get_attribute("data-diagnosis") == "not_implemented" and "not started yet" in todo.inner_text()
        colour = todo.evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour == "rgb(238, 241, 244)", f"a not-started panel should be grey, not {colour}"
        table = page.locator("div.course-progress")
        assert "failing: transposed_weight" in table.inner_text() and "not started" in table.inner_text()
        passed = True
    finally:
        if EVERY_SCREENSHOT or not passed:
            lab.screenshot(SCREENSHOTS / "staged_feedback.png")
        print(f"\n{path}: staged feedback checked ({lab.phase_report()})")
