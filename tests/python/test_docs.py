"""The documentation site builds without warnings and works in a real browser.

Builds the site (Sphinx, -W: any warning fails) into build/docs-test/html, serves it
on loopback (as any static host would: the search page fetches pages for its
snippets, which browsers refuse from file:// URLs), then drives headless Chromium
(Debian's ``chromium``) over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: NUL-separated JSON on fds 3 and 4, no websocket library
needed): every page loads without console errors or failed requests, every internal
link resolves (the file exists and so does its ``#fragment``), and the search page
finds FeatureStore. Screenshots of the home page and an API page go to
build/docs-artefacts/ (git-ignored). Every wait is for a condition, with a deadline.
Skipped, with the reason, only where no Chromium is installed (``make test``
installs it where it can: the ``chromium`` target).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import html
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "docs-test" / "html"
ARTEFACTS = ROOT / "build" / "docs-artefacts"
# make docs's flags: warnings are errors (all reported), nitpicky references.
SPHINX_FLAGS = ["-W", "--keep-going", "-n", "-q", "-b", "html"]
DEADLINE_S = 60  # for any one condition; a generous bound, not a timing assumption


def chromium() -> str | None:
    """The Chromium binary: $MMAPKIT_CHROMIUM, else Debian's chromium on PATH."""
    for name in (os.environ.get("MMAPKIT_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (path := shutil.which(name)):
            return path
    return None


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe, one page."""

    def __init__(self, binary: str, profile: str) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds() -> None:  # the child's fd 3 reads commands, fd 4 writes replies
            # Copies first: either end may itself be fd 3 or 4.
            commands, replies = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless=new",
                "--remote-debugging-pipe",
                "--no-sandbox",  # root in CI containers
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                f"--user-data-dir={profile}",
                "--window-size=1200,900",
                "about:blank",
            ],
            preexec_fn=fds,  # noqa: PLW1509 (dup2 only; the test starts no threads before)
            pass_fds=(3, 4),  # kept open past close_fds, which runs after preexec_fn
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    def _read(self) -> None:
        buf = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for raw in messages:
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    self._events.put(msg)
        with self._cond:
            self._replies[-1] = {}  # the browser went away
            self._cond.notify_all()

    def call(
        self, method: str, session: bool = False, tolerate: bool = False, **params: Any
    ) -> dict[str, Any]:
        """Sends one command and waits for its reply; returns its result (with
        ``tolerate``, an error reply gives ``{}``: a page being replaced may refuse)."""
        self._next_id += 1
        n = self._next_id
        msg: dict[str, Any] = {"id": n, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        with self._cond:
            ok = self._cond.wait_for(
                lambda: n in self._replies or -1 in self._replies, timeout=DEADLINE_S
            )
        assert ok and n in self._replies, f"no reply to {method} (browser gone or stuck)"
        reply = self._replies.pop(n)
        if tolerate and "error" in reply:
            return {}
        assert "error" not in reply, (method, reply["error"])
        return reply["result"]

    def events(self) -> list[dict[str, Any]]:
        """The events received since the last call."""
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def evaluate(self, expression: str, tolerate: bool = False) -> Any:
        """The value of a JavaScript expression in the page (a promise's, once settled).
        With ``tolerate``, None where it could not run (the page is being replaced)."""
        r = self.call(
            "Runtime.evaluate",
            session=True,
            tolerate=tolerate,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        if tolerate and ("exceptionDetails" in r or "result" not in r):
            return None
        assert "exceptionDetails" not in r, (expression, r["exceptionDetails"])
        return r["result"].get("value")

    def wait_for(self, expression: str) -> Any:
        """Polls a JavaScript condition until it is truthy (fails after DEADLINE_S)."""
        deadline = time.monotonic() + DEADLINE_S
        while not (value := self.evaluate(expression, tolerate=True)):
            assert time.monotonic() < deadline, f"never true: {expression}"
            time.sleep(0.05)
        return value

    def open(self, url: str) -> list[str]:
        """Loads `url` and waits until it is complete; returns its console errors."""
        self.events()
        self.call("Page.navigate", session=True, url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")
        # One task later: what the page's load handlers logged has arrived.
        self.evaluate("new Promise(r => setTimeout(r, 0))")
        return [e for e in map(console_error, self.events()) if e]

    def screenshot(self, path: Path) -> None:
        """Writes a PNG of the viewport to `path`."""
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        """Closes the browser (and waits for it)."""
        with contextlib.suppress(AssertionError):  # it may close before it replies
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)


def console_error(event: dict[str, Any]) -> str | None:
    """The text of an event that is an error in the page's console, else None."""
    method, p = event.get("method"), event.get("params", {})
    if method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
        return " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
    if method == "Runtime.exceptionThrown":
        return p["exceptionDetails"].get("exception", {}).get("description") or str(p)
    if method == "Log.entryAdded" and p["entry"]["level"] == "error":
        return f"{p['entry']['text']} {p['entry'].get('url', '')}"
    if method == "Network.loadingFailed" and not p.get("canceled"):
        return f"request failed: {p.get('errorText')}"
    return None


@pytest.fixture(scope="module")
def site() -> Path:
    """Builds the site once for this module (warnings are errors)."""
    shutil.rmtree(SITE, ignore_errors=True)
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", *SPHINX_FLAGS, "docs", str(SITE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return SITE


class QuietHandler(SimpleHTTPRequestHandler):
    """Serves the site's files without logging each request."""

    def log_message(self, format: str, *args: Any) -> None:
        """Logs nothing (pytest shows failures, not access logs)."""


@pytest.fixture(scope="module")
def server(site: Path) -> Any:
    """The site over HTTP on a free loopback port; yields its base URL."""
    handler = functools.partial(QuietHandler, directory=str(site))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}/"
        finally:
            httpd.shutdown()
            thread.join()


@pytest.fixture(scope="module")
def browser(site: Path) -> Any:
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium installed (apt-get install chromium, or set MMAPKIT_CHROMIUM)")
    with tempfile.TemporaryDirectory(prefix="mmapkit-chromium-") as profile:
        b = Browser(binary, profile)
        try:
            yield b
        finally:
            b.close()


def site_pages(site: Path) -> list[Path]:
    """Sphinx's pages (not the copied rustdoc), and the crates' rustdoc front pages."""
    pages = sorted(p for p in site.rglob("*.html") if "rust" not in p.relative_to(site).parts)
    rust = sorted((site / "rust").glob("*/index.html"))
    return pages + rust


def anchors(page: Path, cache: dict[Path, set[str]]) -> set[str]:
    """The ids and names a page defines (what a #fragment may point at)."""
    if page not in cache:
        text = page.read_text(errors="replace")
        cache[page] = {html.unescape(m) for m in re.findall(r'\b(?:id|name)="([^"]+)"', text)}
    return cache[page]


def test_the_site_has_its_parts(site):
    cli = (site / "cli.html").read_text()
    for command in ("mmapkit count", "mmapkit log follow", "mmapkit kmers", "mmapkit grep"):
        assert f'id="{command.replace(" ", "-")}"' in cli, command
    api = (site / "api" / "mmapkit.html").read_text()
    assert 'id="mmapkit.FeatureStore"' in api and 'id="mmapkit.MappedFile.read_byte"' in api
    for plot in ("arrays", "features", "files", "kmers", "log", "pyio", "replication"):
        assert (site / "_images" / f"{plot}.png").is_file(), plot
    for crate in ("mmapkit", "mmapkit_replicate", "mmapkit_raft"):
        assert (site / "rust" / crate / "index.html").is_file(), crate


def test_every_page_loads_cleanly_and_every_internal_link_resolves(site, server, browser):
    pages = site_pages(site)
    assert len(pages) > 30
    errors, broken = {}, []
    ids: dict[Path, set[str]] = {}
    for page in pages:
        name = page.relative_to(site).as_posix()
        if found := browser.open(server + name):
            errors[name] = found
        if name.startswith("rust/"):
            continue  # rustdoc's own links are rustdoc's business; ours into it are checked
        hrefs = browser.evaluate("Array.from(document.querySelectorAll('a[href]'), a => a.href)")
        for href in hrefs:
            if not href.startswith(server):
                continue  # external: not fetched (the test needs no network)
            parts = urlsplit(href)
            target = site / unquote(parts.path).lstrip("/")
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{name} → {href}")
            elif (
                parts.fragment
                and target.suffix == ".html"
                and "rust" not in target.parts
                and unquote(parts.fragment) not in anchors(target, ids)
            ):
                broken.append(f"{name} → {href} (no such anchor)")
    assert not errors, errors
    assert not broken, broken


def test_search_finds_a_symbol_and_screenshots(server, browser):
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    assert not browser.open(server + "index.html")
    browser.screenshot(ARTEFACTS / "home.png")
    assert not browser.open(server + "api/mmapkit.html#mmapkit.FeatureStore")
    browser.screenshot(ARTEFACTS / "api-mmapkit.png")
    assert not browser.open(server + "search.html?q=FeatureStore")
    hits = browser.wait_for(
        "(() => { const a = Array.from(document.querySelectorAll('#search-results li a'),"
        " a => a.textContent); return a.length ? a : null })()"
    )
    assert any("FeatureStore" in h for h in hits), hits
    for shot in ("home.png", "api-mmapkit.png"):
        assert (ARTEFACTS / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
