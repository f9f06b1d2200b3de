"""How the built site lays out in a real browser: what scrolls sideways, measured by headless Chromium.

:func:`measure_site` serves a built MkDocs site over HTTP, opens every page at each width in one
headless Chromium (driven over the DevTools protocol on a pipe, so nothing but the browser is needed),
and returns per page and width what :data:`MEASURE` finds: the page's own sideways scroll, and every box
in the content that scrolls sideways (a table, a ``pre`` block, an API signature) with how many pixels
it hides. ``python tests/pagefit.py SITE_DIR`` prints the counts and every overflow.
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

# Runs in the page once it has loaded (Material's script wraps the tables first). A box overflows where
# it scrolls sideways (its content wider than its box by more than a pixel) or sticks out of the
# content column. Each overflow is described by its kind and its first words, to find it on the page.
MEASURE = r"""
(() => {
  const content = document.querySelector(".md-content") || document.body;
  const right = content.getBoundingClientRect().right;
  const kind = (el) =>
    el.closest(".doc-signature") ? "signature"
    : (el.matches("table") || el.querySelector("table")) ? "table"
    : (el.closest("pre") || el.querySelector("pre")) ? "pre" : el.tagName.toLowerCase();
  const found = new Map();
  for (const el of content.querySelectorAll("*")) {
    const style = getComputedStyle(el);
    const scrolls = ["auto", "scroll"].includes(style.overflowX) && el.scrollWidth - el.clientWidth > 1;
    const sticksOut = el.matches("table, pre") && el.getBoundingClientRect().right > right + 1;
    if (!scrolls && !sticksOut) continue;
    const box = el.closest("table, pre, .doc-signature") || el.querySelector("table, pre") || el;
    if (found.has(box)) continue;
    found.set(box, {
      kind: kind(el),
      hidden: Math.max(el.scrollWidth - el.clientWidth, Math.round(el.getBoundingClientRect().right - right)),
      text: (box.innerText || "").replace(/\s+/g, " ").trim().slice(0, 60),
    });
  }
  const page = document.documentElement.scrollWidth - document.documentElement.clientWidth;
  return { width: window.innerWidth, page: page, overflows: [...found.values()] };
})()
"""


def find_chromium() -> str | None:
    """A Chromium on the PATH (or ``$CHROMIUM``), or None."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on a free local port, for the duration; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class Browser:
    """One headless Chromium, driven over ``--remote-debugging-pipe`` (JSON messages ending in NUL, on the
    child's file descriptors 3 and 4)."""

    def __init__(self, chromium: str) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def pipes_as_3_and_4() -> None:  # in the child: moved out of the way first, as either may be 3 or 4
            read, write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_read, from_browser_write))
            os.dup2(read, 3)
            os.dup2(write, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        flags += ["--disable-component-update", "--no-first-run", "--hide-scrollbars", "--remote-debugging-pipe"]
        self._process = subprocess.Popen(
            [chromium, *flags, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=pipes_as_3_and_4,
            pass_fds=(3, 4),
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, wait_for: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; with ``wait_for``, also wait for that event after it."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        self._send(message)
        result: dict[str, Any] | None = None
        seen = wait_for is None
        while result is None or not seen:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result = reply["result"]
            elif reply.get("method") == wait_for:
                seen = True
        return result

    def layout(self, url: str, width: int, height: int = 900) -> dict[str, Any]:
        """Open ``url`` in a viewport ``width`` px wide and return what :data:`MEASURE` finds."""
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", session=True, wait_for="Page.loadEventFired", url=url)
        found = self.call("Runtime.evaluate", session=True, expression=MEASURE, returnByValue=True)
        return found["result"]["value"]

    def close(self) -> None:
        os.close(self._to_browser)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._from_browser)


def pages_of(site: Path) -> list[str]:
    """The site's pages as URL paths (``""``, ``"guide/"``, ...), the 404 page left out."""
    pages = [page.parent.relative_to(site).as_posix() for page in site.rglob("index.html")]
    return sorted("" if page == "." else page + "/" for page in pages)


def measure_site(site: Path, widths: Sequence[int], chromium: str) -> dict[str, dict[int, dict[str, Any]]]:
    """Every page of the built ``site`` at every width: ``{page: {width: measurement}}``."""
    browser = Browser(chromium)
    try:
        with serve(site) as base:
            return {page: {width: browser.layout(base + page, width) for width in widths} for page in pages_of(site)}
    finally:
        browser.close()


def overflow_counts(results: dict[str, dict[int, dict[str, Any]]]) -> dict[int, dict[str, int]]:
    """Per width: boxes that overflow, by kind, and pages that scroll sideways (``"pages"``)."""
    counts: dict[int, dict[str, int]] = {}
    for widths in results.values():
        for width, found in widths.items():
            tally = counts.setdefault(width, {"pages": 0})
            tally["pages"] += found["page"] > 0
            for overflow in found["overflows"]:
                tally[overflow["kind"]] = tally.get(overflow["kind"], 0) + 1
    return counts


def main(argv: Sequence[str]) -> int:
    chromium = find_chromium()
    if chromium is None:
        print("no Chromium found (apt-get install chromium, or set CHROMIUM)", file=sys.stderr)
        return 2
    results = measure_site(Path(argv[0]), [int(w) for w in argv[1:]] or [1280, 390], chromium)
    for page, widths in results.items():
        for width, found in widths.items():
            if found["page"] > 0 or found["overflows"]:
                print(f"{page or '/'} at {width} px: page scrolls {found['page']} px")
                for overflow in found["overflows"]:
                    print(f"    {overflow['kind']} hides {overflow['hidden']} px: {overflow['text']}")
    print(json.dumps(overflow_counts(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
