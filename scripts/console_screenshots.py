#!/usr/bin/env python3
"""Take the README's screenshots of `zkcoord console`: the overview, and a
group's page while the group rebalances, into docs/ (PNG).

It brings up a throw-away cluster on 127.0.0.1 (a one-node ZooKeeper, two
zkcoord servers sharing two coordinator slots, two groups consuming), then
holds a rebalance open on purpose: one member of group "billing" is paused
(SIGSTOP) and a new member joins, so the coordinator waits for the paused
member to stop its partitions until its session times out. Both pictures
are taken in that window; then everything stops and is deleted.

Usage: python3 scripts/console_screenshots.py [OUT_DIR]   (default docs/)
Needs Chromium and Playwright (scripts/install.sh test). Runs about a minute.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

from zkcoord.testing import LocalCluster, scratch_ensemble, wait_until
from zkcoord.testing.console import ConsoleProcess, headless_chromium

SERVER_ARGS = ("--zk-session-timeout-ms", "4000", "--coordinator-slots", "2", "--rebalance-timeout-ms", "20000",
               "--offset-flush-interval-ms", "500")
SESSION_MS = 12_000  # the paused member's: the rebalance waits this long for it
SETTLE_S = 60


def group_state(console: ConsoleProcess, group: str) -> dict:
    with urllib.request.urlopen(f"{console.url}/api/groups/{group}", timeout=10) as response:
        return json.loads(response.read())


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with scratch_ensemble("zkcoord-screens-") as (work, ensemble), \
            LocalCluster(ensemble.connect_string, work / "cluster", SERVER_ARGS) as cluster:
        cluster.start_servers(2)
        cluster.create_topic("orders", 8)
        cluster.create_topic("payments", 4)
        billing = [cluster.add_consumer("billing", topics=["orders"], session_timeout_ms=SESSION_MS)
                   for _ in range(3)]
        cluster.add_consumer("audit", topics=["orders", "payments"])
        cluster.produce("orders", ((n % 8, None, b"order-%d" % n) for n in range(4000)))
        cluster.produce("payments", ((n % 4, None, b"payment-%d" % n) for n in range(1000)))
        console = ConsoleProcess(ensemble.connect_string, work / "console", ["--refresh-ms", "500"]).start()
        wait_until(lambda: group_state(console, "billing")["state"] == "Stable"
                   and len(group_state(console, "billing")["members"]) == 3, SETTLE_S, message="billing stable")
        with headless_chromium(viewport={"width": 1280, "height": 860}) as browser:
            page = browser.new_page()
            page.goto(f"{console.url}/groups/billing")
            time.sleep(4)  # a few columns of the live timeline before the change: a picture, not a test
            billing[1].pause()
            cluster.add_consumer("billing", topics=["orders"], session_timeout_ms=SESSION_MS)
            wait_until(lambda: group_state(console, "billing")["state"] == "PreparingRebalance", SETTLE_S,
                       message="billing rebalancing")
            time.sleep(3)  # the timeline shows the partitions paused while it waits
            page.screenshot(path=str(out / "console-group.png"), full_page=True)
            overview = browser.new_page()
            overview.goto(console.url)
            overview.locator("#groups").wait_for()
            overview.screenshot(path=str(out / "console-overview.png"), full_page=True)
            billing[1].resume()
        console.terminate()
    print(f"wrote {out / 'console-overview.png'} and {out / 'console-group.png'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "docs")
