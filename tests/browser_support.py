"""Helpers for tests/test_browser.py: a throwaway JupyterLab server, and a
Playwright page that works it the way a student does (file browser, menus,
keyboard).

Nothing here writes into the repository except `screenshots/` (ignored by
git): the server serves a temporary copy of chapters/ and solutions/, with
throwaway Jupyter config, data, runtime, settings and workspace folders.
The kernel imports the real `helpers` through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "screenshots"
FOLDERS = ("chapters", "solutions")

# Debian's chromium, headless; nothing is downloaded (never `playwright install`).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

# JupyterLab user settings for the test server: every cell stays in the DOM
# (no windowing), no blank page after the last cell (so a screenshot can be
# exactly as tall as the notebook), and no news/update pop-ups cover the notebook.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none", "scrollPastEnd": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")
CHECK_PANEL = re.compile(r'class="course-check (check-pass|check-fail)" data-diagnosis="([^"]*)"')
# Chapters 06 and 07 spend most of their run training small models. nbval runs the solutions with the
# seeds and steps they were written with; the chapters run here with fewer, set at the end of the
# cell tagged `parameters` (papermill's convention): every cell still runs, in a fraction of the time.
FEWER = {"SEEDS": "[0]", "STEPS": "20", "TUNE_STEPS": "5"}
PARAMETERS_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n:tags: \[parameters\]\n.*?(?=^```$)", re.MULTILINE | re.DOTALL)


def discover() -> list[str]:
    """Every chapter and solution notebook, .ipynb and .md, relative to ROOT."""
    return sorted(
        str(p.relative_to(ROOT))
        for folder in FOLDERS
        for ext in ("ipynb", "md")
        for p in (ROOT / folder).glob(f"[0-9][0-9]_*.{ext}")
    )


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# What each notebook must show, read from the files (not from the browser)
# ---------------------------------------------------------------------------


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


@dataclass
class Expected:
    """Per code cell (indexed by position among ALL cells): what must appear."""

    n_cells: int
    cell_types: list[str]
    figures: set[int] = field(default_factory=set)  # cells that must show an image
    sliders: dict[int, int] = field(default_factory=dict)  # cell -> number of sliders
    checks: dict[int, list[tuple[bool, str]]] = field(
        default_factory=dict
    )  # cell -> its check panels as the solution shows them: (passed, diagnosis)
    oracle: str = ""  # where the figure/slider expectations come from


def _widget_tree(state: dict, model_id: str, seen: set[str]) -> list[dict]:
    if model_id in seen or model_id not in state:
        return []
    seen.add(model_id)
    model = state[model_id]
    found = [model]
    for value in model.get("state", {}).values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.startswith("IPY_MODEL_"):
                found += _widget_tree(state, item[len("IPY_MODEL_") :], seen)
    return found


def expectations(notebook_path: Path) -> Expected:
    """What the notebook must show once run.

    The oracle is the solution's stored, executed .ipynb (written by
    `helpers.release`, regression-tested by nbval): a cell that stored an
    image must show one, a cell whose stored widget tree holds a slider must
    render that many sliders. A chapter is generated cell by cell from its
    solution, so cells match by position. Without a usable solution (cell
    counts differ) the oracle is the course's conventions: `plots.*(` draws a
    figure, `widgets.*(` shows a slider with a figure.
    Check panels: those the solution stored (a solution may show a failing
    check on purpose, to demonstrate a diagnosis), plus one passing panel for
    every cell whose last line is a `check(...)` call.
    """
    notebook = json.loads(notebook_path.read_text(encoding="utf-8"))
    cells = notebook["cells"]
    exp = Expected(n_cells=len(cells), cell_types=[c["cell_type"] for c in cells])
    for i, cell in enumerate(cells):
        lines = [line for line in _source(cell).splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if cell["cell_type"] == "code" and lines and lines[-1].startswith("check("):
            exp.checks[i] = [(True, "")]

    solution = ROOT / "solutions" / (notebook_path.stem + ".ipynb")
    oracle = json.loads(solution.read_text(encoding="utf-8")) if solution.exists() else None
    if oracle and len(oracle["cells"]) == len(cells) and [c["cell_type"] for c in oracle["cells"]] == exp.cell_types:
        exp.oracle = f"stored outputs of solutions/{solution.name}"
        state = oracle.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE_MIME, {}).get("state", {})
        for i, cell in enumerate(oracle["cells"]):
            html = "".join(
                _source({"source": output.get("data", {}).get("text/html", "")}) for output in cell.get("outputs", [])
            )
            panels = [(cls == "check-pass", diagnosis) for cls, diagnosis in CHECK_PANEL.findall(html)]
            if panels:
                exp.checks[i] = panels
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if any(m in data for m in IMAGE_MIMES):
                    exp.figures.add(i)
                if WIDGET_MIME in data:
                    tree = _widget_tree(state, data[WIDGET_MIME]["model_id"], set())
                    n_sliders = sum(
                        1 for m in tree if m.get("model_name", "").endswith("SliderModel")
                    )  # not SliderStyleModel
                    if n_sliders:
                        exp.sliders[i] = exp.sliders.get(i, 0) + n_sliders
                    if any(
                        any(k in o.get("data", {}) for k in IMAGE_MIMES)
                        for m in tree
                        for o in m.get("state", {}).get("outputs", []) or []
                    ):
                        exp.figures.add(i)
    else:
        exp.oracle = "the source (plots.* and widgets.* calls)"
        for i, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            if re.search(r"\bplots\.\w+\(", _source(cell)):
                exp.figures.add(i)
            if re.search(r"\bwidgets\.\w+\(", _source(cell)):
                exp.figures.add(i)
                exp.sliders[i] = 1
    return exp


def with_fewer_steps(source: str) -> str:
    """A parameters cell's source with `FEWER` set again at its end, for the names it sets."""
    names = [name for name in FEWER if re.search(rf"^\s*(\w+\s*,\s*)*{name}\b[^=\n]*=", source, re.MULTILINE)]
    if not names:
        return source
    line = f"{', '.join(names)} = {', '.join(FEWER[name] for name in names)}  # the browser suite: fewer, faster"
    return source.rstrip("\n") + "\n" + line + "\n"


def run_with_fewer_steps(chapter: Path) -> None:
    """The served copy of a chapter (.ipynb and its paired .md alike) with `with_fewer_steps` applied."""
    notebook = json.loads(chapter.read_text(encoding="utf-8"))
    tagged = [cell for cell in notebook["cells"] if "parameters" in cell.get("metadata", {}).get("tags", [])]
    for cell in tagged:
        cell["source"] = with_fewer_steps(_source(cell))
    chapter.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    markdown = chapter.with_suffix(".md")
    text, found = PARAMETERS_CELL.subn(lambda m: with_fewer_steps(m[0]), markdown.read_text(encoding="utf-8"))
    # JupyterLab reads a paired .ipynb's inputs from its .md: both must change, or neither.
    assert found == len(tagged), f"{markdown.name}: {found} parameters cell(s) found, its .ipynb has {len(tagged)}"
    markdown.write_text(text, encoding="utf-8")


def saved_problems(notebook_path: Path) -> list[str]:
    """Error outputs and stderr streams in a notebook file saved by JupyterLab."""
    problems = []
    for i, cell in enumerate(json.loads(notebook_path.read_text(encoding="utf-8"))["cells"]):
        for output in cell.get("outputs", []):
            if output["output_type"] == "error":
                problems.append(f"cell {i}: {output['ename']}: {output['evalue']}")
            elif output["output_type"] == "stream" and output.get("name") == "stderr":
                text = output.get("text", "")
                problems.append(f"cell {i}: stderr: {''.join(text) if isinstance(text, list) else text}"[:800])
    return problems


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------


class LabServer:
    """`jupyter lab` on 127.0.0.1, a free port, a random known token, serving
    a temporary copy of the notebooks, with throwaway settings."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.root = workdir / "root"
        self.token = secrets.token_hex(16)
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.log_path = workdir / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _prepare(self) -> dict[str, str]:
        self.root.mkdir(parents=True)
        stamp = time.time()
        for folder in FOLDERS:
            shutil.copytree(
                ROOT / folder, self.root / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
            )
        shutil.copy(ROOT / "jupytext.toml", self.root / "jupytext.toml")  # the .md/.ipynb pairing
        for chapter in (self.root / "chapters").glob("*.ipynb"):
            run_with_fewer_steps(chapter)
        # Same mtime for every copied file: jupytext refuses a paired .ipynb
        # much newer than its .md; a fresh clone has equal times too.
        for path in self.root.rglob("*"):
            os.utime(path, (stamp, stamp))
        dirs = {
            name: self.workdir / name for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")
        }
        for path in dirs.values():
            path.mkdir()
        for name, value in LAB_SETTINGS.items():
            target = dirs["settings"] / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(value))
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("JUPYTER", "JPY_")) and k not in ("MPLBACKEND", "COURSE_CHECK_TIMEOUT", "IPYTHONDIR")
        }
        env.update(
            # Throwaway user dirs; the venv's labextensions (ipywidgets,
            # jupytext) and server config are still found via sys.prefix.
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
            JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
            IPYTHONDIR=str(dirs["ipython"]),
            # The kernel inherits these: the real helpers package, offline model.
            PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYDEVD_DISABLE_FILE_VALIDATION="1",
        )
        return env

    def start(self, timeout: float = 90) -> None:
        env = self._prepare()
        last_error = ""
        for _attempt in range(3):  # a free port can be taken between our probe and the bind
            self.port = free_port()
            cmd = [
                sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
                "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly", "--ServerApp.jpserver_extensions={'jupyter_lsp': False}",
            ]  # fmt: skip
            log = self.log_path.open("ab")
            self.process = subprocess.Popen(
                cmd, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            log.close()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    self.api("GET", "/api/status")
                    return
                except OSError as error:
                    last_error = str(error)
                    time.sleep(0.2)
            self.stop()
        raise RuntimeError(f"JupyterLab did not start ({last_error}). Its log:\n{self.log()}")

    def api(self, method: str, path: str, timeout: float = 10):
        request = urllib.request.Request(
            self.url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def kernel_state(self, path: str) -> str | None:
        for session in self.api("GET", "/api/sessions"):
            if session.get("path") == path and session.get("kernel"):
                return session["kernel"].get("execution_state")
        return None

    def kernel_names(self, path: str) -> list[str]:
        return [
            s["kernel"]["name"] for s in self.api("GET", "/api/sessions") if s.get("path") == path and s.get("kernel")
        ]

    def wait_idle(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.kernel_state(path)
            if state == "idle":
                return
            if state == "dead":
                raise AssertionError(f"{path}: the kernel died")
            time.sleep(0.1)
        raise AssertionError(f"{path}: the kernel is still {state!r} after {timeout:.0f} s")

    def shutdown_kernels(self) -> None:
        try:
            for session in self.api("GET", "/api/sessions"):
                self.api("DELETE", f"/api/sessions/{session['id']}")
            for kernel in self.api("GET", "/api/kernels"):
                self.api("DELETE", f"/api/kernels/{kernel['id']}")
        except (OSError, urllib.error.URLError):
            pass

    def log(self, tail: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.shutdown_kernels()
            os.killpg(self.process.pid, signal.SIGTERM)  # the server and the kernels it started
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None


# ---------------------------------------------------------------------------
# The page: JupyterLab as a student uses it
# ---------------------------------------------------------------------------

# Everything the tests look at, per cell of the notebook shown in the main area.
CELLS_JS = """
() => {
  // CodeMirror 6 draws only the lines near the viewport: read its document, not its DOM.
  const cellSource = cell => {
    const content = cell.querySelector('.jp-InputArea-editor .cm-content');
    const view = content && content.cmView && content.cmView.view;
    return view ? view.state.doc.toString() : [...cell.querySelectorAll('.jp-InputArea-editor .cm-line')].map(l => l.textContent).join('\\n');
  };
  const panel = document.querySelector('#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  return [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].map(cell => {
    const prompt = cell.querySelector('.jp-InputPrompt');
    const errors = [...cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')];
    const images = [...cell.querySelectorAll('.jp-OutputArea-output img')];
    return {
      type: cell.classList.contains('jp-CodeCell') ? 'code' : cell.classList.contains('jp-MarkdownCell') ? 'markdown' : 'raw',
      prompt: prompt ? prompt.innerText.trim() : '',
      source: cell.classList.contains('jp-CodeCell') ? cellSource(cell) : '',
      errors: errors.map(e => e.innerText.slice(0, 1500)),
      images: images.length,
      imagesLoaded: images.filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0).length,
      widgets: cell.querySelectorAll('.jp-OutputArea-output .jupyter-widgets').length,
      sliders: cell.querySelectorAll('.widget-slider').length,
      widgetText: [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText).filter(t => /Error displaying widget|Loading widget|interactive\\(children=/.test(t)),
      checks: [...cell.querySelectorAll('div.course-check')].map(c => ({cls: c.className, diagnosis: c.dataset.diagnosis, text: c.innerText})),
    };
  });
}
"""

# Run finished: nothing queued or running, and either every code cell ran
# or JupyterLab stopped at an error; or a dialog asks for attention.
RUN_DONE_JS = """
() => {
  const panel = document.querySelector('#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)');
  if (document.querySelector('.jp-Dialog')) return true;  // e.g. "the kernel died": reported by run_all
  const prompts = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')].map(p => p.innerText.trim());
  if (prompts.some(p => p.includes('*'))) return false;
  if (prompts.every(p => /\\[\\d+\\]/.test(p))) return true;
  return panel.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]') !== null;
}
"""

# A slider's value, and a fingerprint of what it drives.
SLIDER_STATE_JS = """
([cellIndex, sliderIndex]) => {
  const panel = document.querySelector('#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)');
  const cell = panel.querySelectorAll('.jp-Notebook .jp-Cell')[cellIndex];
  const slider = cell.querySelectorAll('.widget-slider')[sliderIndex];
  const handle = slider.querySelector('.noUi-handle');
  // What it drives: the Output widgets (plots, prints) of the widget it
  // belongs to, else those anywhere in its cell, else its widget's other
  // text (labels, HTML).
  const box = slider.closest('.jp-OutputArea-output') || cell;
  let outputs = [...box.querySelectorAll('.widget-output')];
  if (!outputs.length) outputs = [...cell.querySelectorAll('.widget-output')];
  const scope = outputs.length ? outputs : [box];
  const images = scope.flatMap(o => [...o.querySelectorAll('img')]);
  const text = o => { const c = o.cloneNode(true); c.querySelectorAll('.widget-slider, .widget-readout').forEach(e => e.remove()); return c.textContent; };
  return {
    value: handle ? handle.getAttribute('aria-valuenow') : null,
    min: handle ? handle.getAttribute('aria-valuemin') : null,
    max: handle ? handle.getAttribute('aria-valuemax') : null,
    readout: (slider.querySelector('.widget-readout') || {}).innerText || '',
    driven: scope.map(text).join('|') + images.map(i => i.src).join('|'),
    images: images.length,
    imagesLoaded: images.filter(i => i.complete && i.naturalWidth > 0).length,
    errors: scope.flatMap(o => [...o.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')]).map(e => e.innerText.slice(0, 1500)),
  };
}
"""


class Lab:
    """One JupyterLab page for the whole session; one notebook at a time."""

    def __init__(self, page, server: LabServer):
        self.page = page
        self.server = server
        self.phases: list[tuple[str, float]] = []  # (what, seconds) for the current notebook
        self._clock = time.monotonic()

    def phase(self, name: str) -> None:
        """Record how long the step that just ended took."""
        now = time.monotonic()
        self.phases.append((name, now - self._clock))
        self._clock = now

    def start_clock(self) -> None:
        self.phases, self._clock = [], time.monotonic()

    def phase_report(self) -> str:
        return ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.phases)

    # -- navigation ---------------------------------------------------------

    def boot(self, first: str, timeout: float = 120) -> None:
        """Open JupyterLab at a notebook, as `python3 course.py lab` does."""
        self.page.goto(f"{self.server.url}/lab/tree/{first}?reset&token={self.server.token}")
        self.page.wait_for_function(
            "path => { const t = document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current'); return t && t.title.includes('Path: ' + path); }",
            arg=first,
            timeout=timeout * 1000,
        )

    def current_path(self) -> str | None:
        """The path of the notebook in the current tab (its title says "Path: ...")."""
        title = self.page.evaluate(
            "() => { const t = document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current'); return t ? t.title : null; }"
        )
        match = re.search(r"^Path: (.+)$", title or "", re.MULTILINE)
        return match[1].strip() if match else None

    def close_everything(self, timeout: float = 60) -> None:
        """No dialog, no open notebook, no kernel: the state a test starts from.
        Unsaved changes are discarded (they live in the temporary copy anyway)."""
        deadline = time.monotonic() + timeout
        while True:
            dialog = self.page.locator(".jp-Dialog")
            if dialog.count():
                discard = dialog.locator("button.jp-Dialog-button", has_text=re.compile(r"^(Discard|Don't Save)$"))
                if discard.count():
                    discard.first.click()
                else:  # e.g. "Select Kernel", left open by a failed test
                    self.page.keyboard.press("Escape")
                    self.page.wait_for_function("() => !document.querySelector('.jp-Dialog')", timeout=5_000)
                    continue
            elif self.page.locator("#jp-main-dock-panel .jp-NotebookPanel").count():
                self.menu("File", "Close All Tabs")
            else:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"JupyterLab's notebook tabs would not close in {timeout:.0f} s")
            try:  # a "save your work?" dialog, or no notebook left (JupyterLab then shows its Launcher)
                self.page.wait_for_function(
                    "() => document.querySelector('.jp-Dialog') || !document.querySelector('#jp-main-dock-panel .jp-NotebookPanel')",
                    timeout=10_000,
                )
            except Exception:  # look again
                pass
        self.server.shutdown_kernels()

    def menu(self, *labels: str) -> None:
        """Click through the menu bar, e.g. menu("Run", "Run All Cells")."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(labels[0])}$")).click()
        for label in labels[1:]:
            item = self.page.locator(
                ".lm-Menu:visible .lm-Menu-item:not(.lm-mod-disabled):not(.lm-mod-hidden) .lm-Menu-itemLabel",
                has_text=re.compile(f"^{re.escape(label)}$"),
            ).last
            item.click()

    def file_browser_open(self, path: str, open_with: str | None = None) -> None:
        """Open a file the way a student does: the file browser, a double
        click (or right click, Open With, e.g. "Jupytext Notebook")."""
        if not self.page.locator(".jp-FileBrowser").is_visible():
            self.page.locator(".jp-SideBar [data-id='filebrowser']").click()
        browser = self.page.locator(".jp-FileBrowser")
        browser.locator(".jp-BreadCrumbs-home").click()
        *folders, name = path.split("/")
        for depth, folder in enumerate(folders):
            entered = f"() => document.querySelector('.jp-FileBrowser .jp-BreadCrumbs').innerText.includes({json.dumps(folder)})"
            for attempt in range(3):  # under load a double click can land while the listing redraws: it is then lost
                if attempt and self.page.evaluate(entered):
                    break  # the earlier click got there, late
                if attempt and depth == 0:  # so can the click on home (the listing stayed in another folder): again
                    browser.locator(".jp-BreadCrumbs-home").click()
                try:  # the item itself can be redrawn away for long (a fresh server's first listing): try again
                    browser.locator(
                        ".jp-DirListing-item",
                        has=self.page.locator(".jp-DirListing-itemText", has_text=re.compile(f"^{re.escape(folder)}$")),
                    ).dblclick(timeout=10_000)
                    self.page.wait_for_function(entered, timeout=10_000)
                    break
                except Exception:  # playwright's TimeoutError
                    if attempt == 2:
                        raise
        item = browser.locator(
            ".jp-DirListing-item",
            has=self.page.locator(".jp-DirListing-itemText", has_text=re.compile(f"^{re.escape(name)}$")),
        )
        if open_with is None:
            item.dblclick()
        else:
            item.click(button="right")
            self.page.locator(".lm-Menu:visible .lm-Menu-itemLabel", has_text=re.compile("^Open With$")).click()
            self.page.locator(
                ".lm-Menu:visible .lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(open_with)}$")
            ).click()

    def wait_loaded(
        self, path: str, n_cells: int, kernel: str = "python3", wait_idle: bool = True, timeout: float = 120
    ) -> None:
        """The notebook's cells are on screen, a session with the kernel its
        metadata names was started with no "Select Kernel" dialog and (unless
        wait_idle is False) that kernel is up and idle."""
        self.page.wait_for_function(
            "([name, n]) => { const t = document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current');"
            " const p = document.querySelector('#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)');"
            " return t && t.title.includes(name) && p && p.querySelectorAll('.jp-Notebook .jp-Cell').length === n; }",
            arg=[path.rsplit("/", 1)[-1], n_cells],
            timeout=timeout * 1000,
        )
        if not wait_idle:
            deadline = time.monotonic() + timeout
            while (names := self.server.kernel_names(path)) != [kernel]:
                if self.dialog_text() or time.monotonic() > deadline:
                    raise AssertionError(
                        f"{path}: no {kernel!r} kernel started (sessions: {names}; dialog: {self.dialog_text()!r})"
                    )
                time.sleep(0.1)
            return
        self.page.wait_for_function(
            "() => document.querySelector('.jp-Dialog') || /\\|\\s*Idle/.test((document.querySelector('.jp-StatusBar-Widget') || {}).innerText || '')",
            timeout=timeout * 1000,
        )
        if self.dialog_text():  # e.g. "Select Kernel": the notebook names no kernel we have
            raise AssertionError(f"{path}: opening it showed a dialog: {self.dialog_text()!r}")
        self.server.wait_idle(path, timeout)
        if self.server.kernel_names(path) != [kernel]:
            raise AssertionError(f"{path}: its kernel is {self.server.kernel_names(path)}, not {kernel!r}")

    # -- running --------------------------------------------------------------

    def dialog_text(self) -> str | None:
        dialog = self.page.locator(".jp-Dialog")
        return " ".join(dialog.first.inner_text().split()) if dialog.count() else None

    def run_all(self, path: str, timeout: float) -> None:
        """Edit > Clear Outputs of All Cells, then Run > Run All Cells; wait
        until nothing is queued or running and the kernel is idle."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        self.menu("Edit", "Clear Outputs of All Cells")
        self.menu("Run", "Run All Cells")
        try:
            self.page.wait_for_function(RUN_DONE_JS, timeout=timeout * 1000, polling=250)
        except PlaywrightTimeout:
            busy = [f"cell {i} {c['prompt']}" for i, c in enumerate(self.cells()) if "*" in c["prompt"]]
            raise AssertionError(
                f"{path}: Run All did not finish in {timeout:.0f} s; still running or queued: {', '.join(busy)}"
            ) from None
        if self.dialog_text():
            raise AssertionError(f"{path}: JupyterLab showed a dialog while running: {self.dialog_text()!r}")
        self.server.wait_idle(path, 60)

    def run_first_code_cell(self, path: str, timeout: float) -> None:
        """Click into the first code cell and press Shift+Enter."""
        cell = self.page.locator(
            "#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell"
        ).first
        cell.locator(".jp-InputPrompt").click()
        self.page.keyboard.press("Shift+Enter")
        cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(timeout=timeout * 1000)
        self.server.wait_idle(path, 60)

    def trust(self, path: str) -> None:
        """Command palette > Trust Notebook > Trust, as a student trusts a notebook
        they opened with outputs: its stored outputs re-render trusted, as live ones do."""
        self.page.keyboard.press("Control+Shift+C")
        palette = self.page.locator(".lm-CommandPalette-input")
        palette.fill("Trust Notebook")
        self.page.locator(
            ".lm-CommandPalette-item",
            has=self.page.locator(".lm-CommandPalette-itemLabel", has_text=re.compile("^Trust Notebook$")),
        ).first.click()
        self.page.locator(".jp-Dialog button.jp-Dialog-button", has_text=re.compile("^Trust$")).click()
        self.page.wait_for_function(
            "() => !document.querySelector('.jp-Dialog') && !document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current.jp-mod-dirty')",
            timeout=30000,
        )

    def wait_rendered(self, figures: set[int], sliders: dict[int, int], timeout: float = 60) -> None:
        """Until the stored outputs are drawn: every image loaded, each figure
        cell shows one, each slider cell its sliders (widgets restored from the
        notebook's saved widget state). On timeout the caller's checks say what is missing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cells = self.cells()
            if (
                all(c["images"] == c["imagesLoaded"] for c in cells)
                and all(cells[i]["imagesLoaded"] for i in figures)
                and all(cells[i]["sliders"] >= n for i, n in sliders.items())
            ):
                return
            time.sleep(0.2)

    def save(self) -> None:
        self.menu("File", "Save Notebook")
        self.page.wait_for_function(
            "() => !document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current.jp-mod-dirty')",
            timeout=30000,
        )

    def cells(self) -> list[dict]:
        return self.page.evaluate(CELLS_JS)

    def slider_state(self, cell: int, slider: int) -> dict:
        return self.page.evaluate(SLIDER_STATE_JS, [cell, slider])

    def move_slider(self, cell: int, slider: int, path: str, timeout: float = 30) -> tuple[dict, dict]:
        """Press an arrow key on the slider's handle; return (before, after)
        once the value AND what it drives (plot, text) have changed."""
        before = self.slider_state(cell, slider)
        at_max = (
            before["value"] is not None and before["max"] is not None and float(before["value"]) >= float(before["max"])
        )
        handle = (
            self.page.locator("#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")
            .nth(cell)
            .locator(".widget-slider")
            .nth(slider)
            .locator(".noUi-handle")
            .first
        )
        handle.scroll_into_view_if_needed()
        handle.focus()
        handle.press("ArrowLeft" if at_max else "ArrowRight")
        try:
            self.page.wait_for_function(
                "([args, before]) => { const s = (" + SLIDER_STATE_JS + ")(args);"
                " return s.value !== before.value && s.driven !== before.driven && s.imagesLoaded >= before.imagesLoaded && s.images === s.imagesLoaded; }",
                arg=[[cell, slider], before],
                timeout=timeout * 1000,
                polling=100,
            )
        except Exception:  # report what did and did not change
            pass
        self.server.wait_idle(path, 60)
        return before, self.slider_state(cell, slider)

    # -- evidence -------------------------------------------------------------

    def screenshot(self, path: Path, max_height: int = 12000) -> None:
        """The whole notebook in one tall image: the viewport grows to the
        notebook's height for the shot, then shrinks back."""
        path.parent.mkdir(parents=True, exist_ok=True)
        size = self.page.viewport_size
        overflow = "() => { const o = document.querySelector('#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer'); return o ? o.scrollHeight - o.clientHeight : 0; }"
        extra = self.page.evaluate(overflow)
        try:
            if extra > 0:
                height = size["height"]
                # The notebook can grow by a few pixels as it lays out anew (seen: 19 px on chapter 02): grow again, at most twice.
                for _ in range(3):
                    height = min(height + extra + 40, max_height)
                    self.page.set_viewport_size({"width": size["width"], "height": height})
                    try:  # the layout follows the new window size
                        self.page.wait_for_function(
                            "() => { const o = document.querySelector('#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');"
                            " return !o || o.scrollHeight - o.clientHeight <= 2 || window.innerHeight >= "
                            + str(max_height)
                            + "; }",
                            timeout=3000,
                        )
                    except Exception:  # a shorter picture is still a picture
                        pass
                    extra = self.page.evaluate(overflow)
                    if extra <= 2 or height >= max_height:
                        break
                self.page.evaluate(
                    "() => { const o = document.querySelector('#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer'); if (o) o.scrollTop = 0; }"
                )
            self.page.screenshot(path=str(path))
        finally:
            self.page.set_viewport_size(size)
