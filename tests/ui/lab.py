"""Driving a notebook the way a person does: a real JupyterLab server, headless Chromium, clicks.

``JupyterLab`` starts ``jupyter lab`` on 127.0.0.1 (a free port, a token, ``--no-browser``) over a
temporary root holding a copy of the notebook, with this checkout first on the kernel's
``PYTHONPATH``; ``LabPage`` opens the notebook in Chromium, runs all cells from the Run menu, waits
for the kernel to go idle, finds a widget by its description, changes it and reads what the
widget's output shows (text, tables, figure images).

Chromium is Debian's (``/usr/bin/chromium``, or ``$AGENTLAB_CHROMIUM``), driven by playwright with
its ``executable_path``: playwright's own browser download is not needed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("AGENTLAB_CHROMIUM", "/usr/bin/chromium")
#: Set by ``make test-ui``: a missing playwright or Chromium fails the test instead of skipping it.
REQUIRE_ENV = "AGENTLAB_REQUIRE_UI"

#: JupyterLab settings for the test: no news or update pop-ups over the notebook, every cell rendered.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def copy_notebook(source: Path, root: Path, parameters: Mapping[str, Any]) -> Path:
    """``source`` copied into ``root``, with a cell after its parameter cell setting ``parameters``.

    The injected cell also prints where ``agentlab`` was imported from, so the test can check that
    the kernel runs this checkout.
    """
    nb = nbformat.read(source, as_version=4)
    lines = ["# Injected by tests/ui: parameters of the test run"]
    lines += [f"{name} = {value!r}" for name, value in parameters.items()]
    lines += ["import agentlab as _agentlab", "print('agentlab imported from', _agentlab.__file__)"]
    first = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")
    nb.cells.insert(first + 1, nbformat.v4.new_code_cell("\n".join(lines)))
    target = root / source.name
    nbformat.write(nb, target)
    return target


class JupyterLab:
    """A ``jupyter lab`` server over ``root`` on a free port of 127.0.0.1, stopped by :meth:`close`."""

    def __init__(self, root: Path, home: Path, *, timeout: float = 180.0) -> None:
        self.root = root
        self.port = free_port()
        self.token = secrets.token_hex(16)
        settings = home / "lab-settings"
        for name, values in LAB_SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(values))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        env.update({"JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
                    "IPYTHONDIR": str(home / "ipython"), "JUPYTERLAB_SETTINGS_DIR": str(settings),
                    "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces")})
        self.log_path = home / "jupyterlab.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={root}", "--LabApp.news_url=", "--ServerApp.terminals_enabled=False",
             *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI runs as root
            cwd=root, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=5) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"jupyter lab did not answer on {self.url} within {timeout:.0f} s: {self.log()}")

    def log(self) -> str:
        """The server's output so far (its last 3,000 characters)."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def notebook_url(self, name: str) -> str:
        """Where the browser opens notebook ``name`` of the root."""
        return f"{self.url}/lab/tree/{name}?token={self.token}"

    def close(self) -> None:
        """Stop the server (its kernels with it) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self._log.close()


@dataclass
class Shown:
    """What an output area shows a person: its text, its tables (rows of cell texts), its images."""

    text: str
    tables: list[list[list[str]]] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list)

    def column(self, table: int, name: str) -> list[str]:
        """The cells of column ``name`` (by its header) of table number ``table``."""
        header, *rows = self.tables[table]
        index = header.index(name)
        return [row[index] for row in rows]


#: Reads an element's tables (header row first; the index column included) and <img> sources.
_READ_OUTPUT = """(node) => ({
  text: node.innerText,
  tables: [...node.querySelectorAll('table')].map(t => [...t.querySelectorAll('tr')]
      .map(r => [...r.children].map(c => c.innerText.trim()))),
  images: [...node.querySelectorAll('img')].map(i => i.getAttribute('src') || ''),
})"""

#: True once the status bar names the kernel and says it is idle.
_KERNEL_IDLE = """() => /\\| Idle/.test(document.querySelector('#jp-main-statusbar')?.innerText || '')"""

#: True once some cell is queued, running or has run.
_STARTED = """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
  .some(p => /\\[(\\*|\\d+)\\]/.test(p.innerText))"""

#: True once no cell waits or runs and the kernel says it is idle.
_ALL_DONE = """() => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.innerText.trim());
  const status = document.querySelector('.jp-Notebook-ExecutionIndicator');
  return prompts.length > 0 && !prompts.some(p => p.includes('*'))
      && (!status || status.getAttribute('data-status') === 'idle');
}"""


class LabPage:
    """One notebook open in Chromium, with the steps a person takes on it."""

    def __init__(self, page: Any, lab: JupyterLab, artifacts: Path) -> None:
        self.page = page
        self.lab = lab
        self.artifacts = artifacts

    def open(self, name: str, *, timeout: float = 120.0) -> None:
        """Open notebook ``name`` and wait until the status bar says its kernel is idle."""
        self.page.goto(self.lab.notebook_url(name), timeout=timeout * 1000)
        self.page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=timeout * 1000)
        self.page.wait_for_function(_KERNEL_IDLE, timeout=timeout * 1000, polling=500)

    def run_all(self, *, timeout: float = 240.0) -> None:
        """Run > Run All Cells from the menu bar, then wait until every cell ran and the kernel is idle.

        A click that lands while the kernel's connection is still being set up starts nothing; then
        the menu is used again (at most three times).
        """
        for attempt in range(3):
            self.page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
            self.page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            try:
                self.page.wait_for_function(_STARTED, timeout=30_000, polling=250)
                break
            except Exception:  # playwright's TimeoutError
                if attempt == 2:
                    raise
        self.page.wait_for_function(_ALL_DONE, timeout=timeout * 1000, polling=500)

    def saved_notebook(self, name: str) -> nbformat.NotebookNode:
        """Save from the File menu (Ctrl+S) and read the notebook back as the server wrote it."""
        path = self.lab.root / name
        before = path.stat().st_mtime_ns
        self.page.locator(".jp-NotebookPanel").first.click(position={"x": 5, "y": 5})
        self.page.keyboard.press("Control+s")
        deadline = time.monotonic() + 60
        while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
            time.sleep(0.2)
        return nbformat.read(path, as_version=4)

    def widget(self, description: str) -> Any:
        """The ipywidgets control whose description label reads ``description``."""
        label = self.page.locator("label.widget-label").filter(
            has_text=re.compile(rf"^{re.escape(description)}$"))
        control = self.page.locator(".jupyter-widgets.widget-inline-hbox").filter(has=label)
        control.first.wait_for(state="visible", timeout=60_000)
        return control.first

    def output_of(self, control: Any) -> Any:
        """The ipywidgets Output that belongs to ``control`` (the one in the same cell's widget)."""
        area = self.page.locator(".jp-OutputArea-output").filter(has=control)
        return area.locator(".widget-output").first

    def read(self, node: Any) -> Shown:
        """What ``node`` shows: its text, tables and decoded images."""
        raw = node.evaluate(_READ_OUTPUT)
        images = [base64.b64decode(src.split(",", 1)[1]) for src in raw["images"] if src.startswith("data:")]
        return Shown(text=raw["text"], tables=raw["tables"], images=images)

    def change(self, control: Any, value: str | list[str]) -> None:
        """Pick ``value`` (a label, or several for a multi-select) in the control's <select>, as a click would."""
        control.locator("select").select_option(label=value)

    def wait_changed(self, node: Any, before: Shown, *, timeout: float = 60.0) -> Shown:
        """What ``node`` shows once it differs from ``before`` (and has a figure again if it had one
        before: a redraw clears the output first); fails after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            now = self.read(node)
            if (now.text, now.images) != (before.text, before.images) and (now.images or not before.images):
                return now
            if time.monotonic() > deadline:
                raise AssertionError(f"the output did not change within {timeout:.0f} s after the widget "
                                     f"changed; it still shows: {now.text[:500]!r}")
            self.page.wait_for_timeout(500)

    def screenshot(self, node: Any, name: str) -> Path:
        """A PNG of ``node`` into the artifacts folder."""
        path = self.artifacts / name
        node.screenshot(path=str(path))
        return path


@contextlib.contextmanager
def chromium_page() -> Iterator[Any]:
    """A page of headless Debian Chromium (closed, with the browser, on leaving)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            yield page
        finally:
            browser.close()


def require_ui() -> None:
    """Skip (or, under ``AGENTLAB_REQUIRE_UI=1``, fail) when playwright or Chromium is missing."""
    import pytest

    problems = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("the playwright package is not installed (pip install -e '.[ui]')")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        problems.append(f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set AGENTLAB_CHROMIUM)")
    if problems:
        reason = "; ".join(problems) + ": run `make test-ui`"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
