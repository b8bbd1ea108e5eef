"""The web console as a process, and a headless browser to look at it.

:class:`ConsoleProcess` is `zkcoord console` on a free port of 127.0.0.1.
:func:`headless_chromium` is the system's Chromium (Debian's ``chromium``,
scripts/install.sh) driven through Playwright, started with the flags that
let it run without a network, a display or a sandbox: Playwright never
downloads a browser of its own here.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Iterator, Optional, Sequence

from zkcoord.testing.process import ClusterError, ManagedProcess, zkcoord_command

# Where Debian installs it; ZKCOORD_CHROMIUM is not needed on a Debian machine.
CHROMIUM_NAMES = ("chromium", "chromium-browser")
# No sandbox (tests may run as root), no GPU, no shared memory beyond /tmp,
# and nothing that phones home (updates, sync, safe browsing, metrics).
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-default-apps", "--disable-features=Translate,MediaRouter",
                  "--metrics-recording-only", "--safebrowsing-disable-auto-update")


class ConsoleProcess(ManagedProcess):
    """`zkcoord console` over ``zookeeper``, with ``args`` on top (``--drills``, ``--require-login``...)."""

    def __init__(self, zookeeper: str, directory: Path, args: Sequence[str] = ()):
        directory = Path(directory)
        super().__init__("console", directory, [], port_file=directory / "ports.json")
        self.command = zkcoord_command("console", "--zookeeper", zookeeper, "--port", "0",
                                       "--port-file", str(self.port_file), *args)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['port']}"


def chromium_path() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise ClusterError("no Chromium found (Debian: apt-get install chromium; scripts/install.sh test does)")


@contextlib.contextmanager
def headless_chromium(viewport: Optional[dict] = None) -> Iterator:
    """A Playwright browser context on the system's headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                             args=list(CHROMIUM_FLAGS))
        try:
            context = browser.new_context(viewport=viewport or {"width": 1400, "height": 900})
            yield context
        finally:
            browser.close()
