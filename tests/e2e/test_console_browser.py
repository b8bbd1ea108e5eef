"""The console as an operator uses it: headless Chromium (Debian's, through
Playwright) against `zkcoord console` processes over a real cluster (a
zkcoord server with its broker, two `zkcoord consume` members of group g).
One browser and one cluster for the module."""

from __future__ import annotations

import pytest

from tests.console.drill_history import write_drill
from tests.e2e.checks import wait_whole
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import LocalCluster, ProxiedEnsemble, fresh_chroot, partitions_of, wait_until
from zkcoord.testing.console import ConsoleProcess, headless_chromium
from zkcoord.zk import security_store

PARTITIONS = 6
SETTLE_S = 30
# A member killed -9 is found dead within its session timeout (4 s here), then its partitions move.
MOVED_S = 20
WAIT_MS = 20_000


@pytest.fixture(scope="module")
def cluster(zk_ensemble, tmp_path_factory):
    with fresh_chroot(zk_ensemble.connect_string, "console") as (chrooted, _client), \
            LocalCluster(chrooted, tmp_path_factory.mktemp("console-cluster"), SERVER_ARGS) as cluster:
        cluster.start_servers(1)
        cluster.create_topic("t", PARTITIONS)
        members = [cluster.add_consumer("g", topics=["t"]) for _ in range(2)]
        wait_whole(cluster.zk, "g", members, partitions_of(cluster.zk, ["t"]), timeout=SETTLE_S)
        cluster.produce("t", ((n % PARTITIONS, None, f"m-{n}".encode()) for n in range(60)))
        security_store.set_user(cluster.zk, "operator", "the-right-one")
        yield cluster


@pytest.fixture(scope="module")
def zk_proxies(zk_ensemble, cluster):
    """The cluster's ZooKeeper behind proxies that can cut it off."""
    chroot = cluster.zookeeper[cluster.zookeeper.index("/"):]
    proxies = ProxiedEnsemble([zk_ensemble.client_port(k) for k in zk_ensemble.node_ids], chroot)
    yield proxies
    proxies.close()


@pytest.fixture(scope="module")
def consoles(cluster, zk_proxies, tmp_path_factory):
    """An open console (with drills), a secured one, and one that reaches ZooKeeper through the proxies."""
    drills = tmp_path_factory.mktemp("drills")
    write_drill(drills / "nightly")
    directory = tmp_path_factory.mktemp("consoles")
    started = [ConsoleProcess(cluster.zookeeper, directory / "open", ["--drills", str(drills), "--refresh-ms", "500"]),
               ConsoleProcess(cluster.zookeeper, directory / "secured",
                              ["--require-login", "--failed-authentication-delay-ms", "0"]),
               ConsoleProcess(zk_proxies.connect_string, directory / "proxied", ["--refresh-ms", "500"])]
    for console in started:
        console.start()
    yield started
    for console in started:
        console.terminate(timeout=10)


@pytest.fixture(scope="module")
def browser():
    with headless_chromium() as context:
        yield context


@pytest.fixture
def page(browser):
    page = browser.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    page.close()


def test_the_overview_lists_the_groups(consoles, page):
    page.goto(consoles[0].url)
    row = page.locator('#groups tr[data-group="g"]')
    row.wait_for()
    assert row.locator("td").nth(1).inner_text() == "Stable"
    assert row.locator("td").nth(4).inner_text() == "2"
    assert page.locator("#slots tbody tr").count() == 1 and "VACANT" not in page.locator("#slots").inner_text()


def test_a_member_killed_shows_its_partitions_moving_without_a_reload(cluster, consoles, page):
    victim, survivor = (m.status()["consumer_id"] for m in cluster.consumers[:2])
    page.goto(f"{consoles[0].url}/groups/g")
    owners = page.locator("#partitions td.owner")
    wait_until(lambda: sorted(set(owners.all_inner_texts())) == sorted([victim, survivor]), timeout=SETTLE_S,
               message="both members owning partitions on the page")
    page.evaluate("window.sameDocument = true")  # gone if the page reloads

    cluster.consumers[0].kill()
    # Both together: one reading may catch the round between its state's write and its owners'.
    wait_until(lambda: set(owners.all_inner_texts()) == {survivor}
               and page.locator(f'#members tr[data-member="{victim}"]').count() == 0, timeout=MOVED_S,
               message="the killed member gone and its partitions shown moving to the survivor")
    assert page.evaluate("window.sameDocument") is True, "the page followed the group without reloading"
    # The live timeline saw both: the victim's cells before, only the survivor's in the latest column.
    assert page.locator(f'#timeline .cell[data-member="{victim}"]').count() > 0
    latest = page.locator("#timeline .cells").evaluate_all(
        "rows => rows.map(row => row.lastElementChild.dataset.member)")
    assert set(latest) == {survivor}
    # The rebalance history gains the round the kill asked for, on the same page: newest first, with its reason.
    history = page.locator("#history td.trigger")
    wait_until(lambda: f"member {victim} left: its connection closed" in history.first.inner_text(),
               timeout=MOVED_S, message="the kill's round at the top of the rebalance history")
    assert any(f"member {victim} joined" in text for text in history.all_inner_texts())
    assert page.locator("#history tbody tr").first.locator("td.outcome").inner_text() == "completed"
    assert page.evaluate("window.sameDocument") is True


def test_a_drills_report_opens_with_its_violations_marked(consoles, page):
    page.goto(f"{consoles[0].url}/drills")
    page.get_by_role("link", name="nightly").click()
    page.wait_for_url("**/drills/view/nightly")
    assert page.locator("#verdict").inner_text() == "FAIL"
    assert page.locator("#invariants tr.violated").all_inner_texts() == ["double ownership\t1"]
    marked = [line.strip() for line in page.locator("#report mark.trouble").all_inner_texts()]
    assert "[VIOLATED] double ownership: 1" in marked and "FAIL" in marked
    timeline = page.frame_locator("iframe.drill-timeline")
    timeline.locator("svg").first.wait_for()


def test_a_secured_console_refuses_a_wrong_password(consoles, page):
    secured = consoles[1]
    page.goto(f"{secured.url}/groups/g")
    page.wait_for_url(lambda url: "/login?next=" in url)
    page.fill("input[name=user]", "operator")
    page.fill("input[name=password]", "a-wrong-one")
    page.click("button[type=submit]")
    assert "wrong password" in page.locator("#login-error").inner_text()
    assert "/login" in page.url and page.locator("#partitions").count() == 0
    page.fill("input[name=user]", "operator")
    page.fill("input[name=password]", "the-right-one")
    page.click("button[type=submit]")
    page.wait_for_url("**/groups/g")
    page.locator("#partitions").wait_for()


def test_a_zookeeper_gone_keeps_the_last_view_under_a_banner_until_it_is_back(cluster, consoles, zk_proxies, page):
    page.goto(f"{consoles[2].url}/groups/g")
    page.locator("#partitions").wait_for()
    page.evaluate("window.sameDocument = true")
    stale = page.locator("#stale")
    zk_proxies.cut()
    try:
        stale.wait_for(state="visible")
        assert "ZooKeeper unavailable" in stale.inner_text()
        assert page.locator("#partitions tbody tr").count() == PARTITIONS, "the last reading stays"
    finally:
        zk_proxies.heal()
    stale.wait_for(state="hidden")
    assert page.evaluate("window.sameDocument") is True
    page.goto(f"{consoles[2].url}/groups/g")  # and a page opened now is whole
    page.locator("#partitions").wait_for()
