"""The console's application through Flask's test client, over a real
cluster: one zkcoord server (with its broker) on the shared ZooKeeper
ensemble, a `zkcoord consume` member of group g, records produced so there
is lag to show. Bad input (unknown groups, a ZooKeeper cut off, directories
that hold no drill) gets a page with its status, never a stack trace."""

from __future__ import annotations

import html
import re
from functools import partial
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.console.drill_history import A, B, write_drill
from tests.e2e.checks import wait_whole
from zkcoord.admin.groups import log_end_offsets
from zkcoord.admin.live import live_members
from zkcoord.console.access import Access
from zkcoord.console.app import create_app
from zkcoord.console.config import ConsoleConfig
from zkcoord.security import acl
from zkcoord.security.checks import LoginChecks
from zkcoord.security.config import SecurityConfig
from zkcoord.testing import cluster_in_chroot, partitions_of, wait_until
from zkcoord.zk import security_store
from zkcoord.zk import client as zk_client
from zkcoord.zk import layout
from zkcoord.zk.cluster_hosts import ClusterHosts

SETTLE_S = 30
PARTITIONS = 4
RECORDS = 40


@pytest.fixture(scope="module")
def cluster(zk_ensemble, tmp_path_factory):
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("console-app")) as cluster:
        cluster.start_servers(1)
        cluster.create_topic("t", PARTITIONS)
        consumer = cluster.add_consumer("g", topics=["t"])
        wait_whole(cluster.zk, "g", [consumer], partitions_of(cluster.zk, ["t"]), timeout=SETTLE_S)
        cluster.produce("t", ((n % PARTITIONS, None, f"m-{n}".encode()) for n in range(RECORDS)))
        # Group h: only committed offsets, as a Kafka 0.8 consumer leaves them; nobody consumes.
        cluster.zk.create(layout.offset_path("h", "t", 0), b"3", makepath=True)
        cluster.consumer = consumer
        yield cluster


@pytest.fixture(scope="module")
def drills(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("drills")
    write_drill(root / "finished")
    write_drill(root / "stopped", reports=False)
    (root / "not-a-drill").mkdir()
    (root / "not-a-drill" / "notes.txt").write_text("nothing of a drill")
    return root


def console(zk, drills: Path = None, login: bool = False, authorizing: bool = False, lag: bool = True,
            members=None):
    """A console over ``zk``; its group pages ask the coordinators for their members (``members``: how)."""
    config = ConsoleConfig(drills=str(drills) if drills else None)
    logins = LoginChecks(security_store.CredentialStore(zk), SecurityConfig(failed_authentication_delay_ms=0),
                         ClusterHosts(zk)) if login else None
    access = Access(zk, login, logins, authorizing)
    app = create_app(zk, config, access, log_end_offsets(zk) if lag else None,
                     members=members or partial(live_members, zk))
    app.testing = False  # errors go through the console's own pages, as they do when it serves
    return app.test_client()


def text(response) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.get_data(as_text=True))))


def no_trace(response) -> None:
    body = response.get_data(as_text=True)
    assert "Traceback" not in body and 'File "' not in body


def test_the_overview_shows_slots_servers_brokers_and_groups(cluster):
    client = console(cluster.zk)
    view = wait_until(lambda: (v := client.get("/api/overview").get_json())
                      and next(g for g in v["groups"] if g["group"] == "g")["lag"] == 0 and v,
                      timeout=SETTLE_S, message="group g consumed everything")
    assert [s["server"] for s in view["slots"]] == ["1"] and view["slots"][0]["since_ms"] > 0
    assert [s["server"] for s in view["servers"]] == ["1"] and view["servers"][0]["slots"] == [0]
    assert [b["broker"] for b in view["brokers"]] == [1]
    g = next(g for g in view["groups"] if g["group"] == "g")
    assert (g["state"], g["members"], g["partitions"]) == ("Stable", 1, PARTITIONS)
    assert (g["last_rebalance"]["generation"], g["last_rebalance"]["outcome"]) == (1, "completed")
    assert [(h["group"], h["state"], h["lag"]) for h in view["groups"] if h["group"] == "h"] == [("h", "Empty", 7)]
    assert view["problems"] == []
    page = client.get("/")
    assert page.status_code == 200
    assert re.search(r"\bg Stable\b", text(page)) and "None: every slot has a coordinator" in text(page)
    assert re.search(r"UTC, completed\b", text(page))  # g's last rebalance; h has none


def test_a_member_that_stops_answering_is_shown_close_to_expiry_before_it_expires(cluster):
    """SIGSTOP past two thirds of its session: the member has let a request
    of its coordinator go unanswered, and the overview says so while its
    lease still runs (from its coordinator: ZooKeeper knows no lease)."""
    client = console(cluster.zk)
    member = cluster.add_consumer("x", topics=["t"], session_timeout_ms=9000)
    try:
        wait_until(lambda: member.status() and member.status().get("assignment"), timeout=SETTLE_S,
                   message="the member of group x to hold partitions")
        member.pause()
        problem = wait_until(lambda: next((p for p in client.get("/api/overview").get_json()["problems"]
                                           if p["kind"] == "member-expiring" and p["group"] == "x"), None),
                             timeout=9, interval=0.2, message="the paused member shown close to expiry")
        assert f"member {member.status()['consumer_id']}'s lease runs out in" in problem["text"]
    finally:
        member.resume()
        member.terminate()


def test_a_group_page_shows_owners_offsets_lag_and_members(cluster):
    client = console(cluster.zk)
    member = cluster.consumer.status()["consumer_id"]
    view = wait_until(lambda: (v := client.get("/api/groups/g").get_json()) and v["lag"] == 0 and v,
                      timeout=SETTLE_S, message="group g consumed everything")
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["consumer_id"], r["owner"])
            for r in view["partitions"]] == [(p, RECORDS // PARTITIONS, RECORDS // PARTITIONS, 0, member, member)
                                             for p in range(PARTITIONS)]
    assert view["ownership"] == {f"t-{p}": member for p in range(PARTITIONS)}
    for path in ("/groups/g", "/fragments/groups/g"):
        page = client.get(path)
        assert page.status_code == 200
        assert f"t 0 {RECORDS // PARTITIONS} {RECORDS // PARTITIONS} 0 {member} = 127.0.0.1" in text(page)
    assert [(m["consumer_id"], m["static"], m["session_timeout_ms"], m["kind"], m["client_id"])
            for m in view["members"]] == [(member, False, 4000, "thin", "zkcoord-consumer")]
    assert re.search(rf"{member} dynamic 127.0.0.1 zkcoord-consumer thin consumer \d\.\d s 4000 ms {PARTITIONS} ",
                     text(page))
    first = view["history"][0]
    assert (first["generation"], first["trigger"], first["outcome"], first["moved"]) == (
        1, f"member {member} joined", "completed", PARTITIONS)
    assert f"1 completed {first['duration_ms']} ms 1 {PARTITIONS} 0 0.0 member {member} joined" in text(page)


def test_a_group_page_shows_each_members_kind_client_id_and_lease_as_its_coordinator_says(cluster):
    stock = cluster.add_consumer("s", topics=["t"], kafka_brokers=cluster.broker_list)
    try:
        client = console(cluster.zk, lag=False)
        view = wait_until(lambda: (v := client.get("/api/groups/s").get_json()) and v["members"] and v,
                          timeout=SETTLE_S, message="the stock member described by its coordinator")
        (described,) = view["members"]
        assert view["members_from"] == "coordinator"
        assert (described["kind"], described["client_id"]) == ("classic-eager", f"zkcoord-consume-{stock.pid}")
        assert 0 < described["lease_remaining_ms"] < described["session_timeout_ms"] == 4000
        page = text(client.get("/groups/s"))
        assert "As the group's coordinator holds them now" in page
        assert re.search(rf"zkcoord-consume-{stock.pid} stock, classic protocol \(eager\) \d\.\d s 4000 ms", page)
    finally:
        stock.terminate()


def test_a_group_page_falls_back_to_zookeepers_members_and_says_so_when_the_coordinator_cannot_say(cluster):
    # A coordinator that refuses the console (a credential it does not know) is one that cannot say.
    client = console(cluster.zk, lag=False, members=partial(live_members, cluster.zk, credential=("nobody", "x")))
    member = cluster.consumer.status()["consumer_id"]
    view = client.get("/api/groups/g").get_json()
    assert view["members_from"] == "zookeeper" and "AuthenticationFailed" in view["members_unavailable"]
    assert [(m["consumer_id"], m["kind"], m["lease_remaining_ms"]) for m in view["members"]] == [
        (member, "thin", None)]  # the kind as the group's state recorded it; the lease only its coordinator knows
    page = text(client.get("/fragments/groups/g"))
    assert "The coordinator could not be asked" in page and "without their leases" in page
    assert re.search(rf"{member} dynamic 127.0.0.1 zkcoord-consumer thin consumer - 4000 ms", page)


def test_a_console_without_lag_still_shows_the_group(cluster):
    view = console(cluster.zk, lag=False).get("/api/groups/g").get_json()
    assert {r["lag"] for r in view["partitions"]} == {None} and view["lag"] is None
    assert {r["current_offset"] for r in view["partitions"]} == {RECORDS // PARTITIONS}


@pytest.mark.parametrize("path, status, says", [
    ("/groups/nobody", 404, "There is no group 'nobody'"),
    ("/fragments/groups/nobody", 404, "There is no group 'nobody'"),
    ("/groups/..", 400, "is no group name"),
    ("/api/groups/nobody", 404, "There is no group 'nobody'"),
    ("/no/such/page", 404, "Not Found"),
])
def test_bad_input_gets_a_page_with_its_status(cluster, path, status, says):
    response = console(cluster.zk).get(path)
    assert response.status_code == status and says in text(response)
    no_trace(response)


def test_zookeeper_going_away_is_a_503_page_and_coming_back_heals_it(zk_proxies):
    zk = zk_client.open_client(zk_proxies.connect_string, connection_retry={"max_delay": 0.5})
    zk_client.start(zk, timeout=30)
    try:
        client = console(zk)
        assert client.get("/").status_code == 200
        zk_proxies.cut()
        wait_until(lambda: not zk.connected, timeout=30, message="the console's session cut off")
        for path in ("/", "/fragments/overview", "/groups/g"):
            response = client.get(path)
            assert response.status_code == 503 and "ZooKeeper unavailable" in text(response), path
            no_trace(response)
        zk_proxies.heal()
        wait_until(lambda: client.get("/").status_code == 200, timeout=30, message="the console back")
    finally:
        zk.stop()
        zk.close()


def test_drills_show_their_report_with_the_violations_marked(cluster, drills):
    client = console(cluster.zk, drills)
    listing = client.get("/drills")
    assert listing.status_code == 200
    assert "finished FAIL" in text(listing) and "stopped no report" in text(listing)
    assert "not-a-drill" not in text(listing)
    page = client.get("/drills/view/finished")
    body = page.get_data(as_text=True)
    assert page.status_code == 200 and 'id="verdict">FAIL' in body.replace('class="verdict fail" ', "")
    assert re.search(r'<tr class="violated"><td>double ownership</td><td class="num">1</td>', body)
    assert '<mark class="trouble">  [VIOLATED] double ownership: 1</mark>' in body
    assert f"orders-0: {A} kept delivering" in body and f"after {B} started it" in body
    timeline = client.get("/drills/timeline/finished")
    assert timeline.status_code == 200 and "<svg" in timeline.get_data(as_text=True)
    assert timeline.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_a_drill_stopped_before_its_report_is_checked_by_the_drills_own_checker(cluster, drills):
    client = console(cluster.zk, drills)
    page = client.get("/drills/view/stopped")
    assert page.status_code == 200 and "wrote no report" in text(page)
    assert '<mark class="trouble">  [VIOLATED] double ownership: 1</mark>' in page.get_data(as_text=True)
    assert "<svg" in client.get("/drills/timeline/stopped").get_data(as_text=True)
    assert not (drills / "stopped" / "report.txt").exists(), "the console writes nothing into a drill"


@pytest.mark.parametrize("name, says", [
    ("not-a-drill", "is not a drill's history directory"),
    ("missing", "is not a drill's history directory"),
    ("../..", "is not under the console's drill directory"),
    ("finished/../../..", "is not under the console's drill directory"),
])
def test_a_directory_that_is_no_drill_is_a_404_page(cluster, drills, name, says):
    response = console(cluster.zk, drills).get(f"/drills/view/{name}")
    assert response.status_code == 404 and says in text(response)
    no_trace(response)


def test_without_drills_the_drills_page_says_how_to_get_one(cluster):
    response = console(cluster.zk).get("/drills")
    assert response.status_code == 404 and "start it with --drills DIR" in text(response)


def test_a_secured_console_asks_a_login_and_refuses_a_wrong_password(cluster):
    security_store.set_user(cluster.zk, "alice", "right-password")
    client = console(cluster.zk, login=True)
    response = client.get("/groups/g")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login?next=/groups/g")
    assert client.get("/api/overview").status_code == 401
    refused = client.post("/login", data={"user": "alice", "password": "wrong"})
    assert refused.status_code == 401 and "alice" in text(refused) and 'id="login-error"' in refused.get_data(True)
    assert client.get("/").status_code == 302
    accepted = client.post("/login?next=/groups/g", data={"user": "alice", "password": "right-password"})
    assert accepted.status_code == 302 and accepted.headers["Location"] == "/groups/g"
    assert client.get("/groups/g").status_code == 200
    client.post("/logout")
    assert client.get("/").status_code == 302
    for elsewhere in ("//evil.example/", "/\\evil.example/", "https://evil.example/"):
        sent = client.post("/login?" + urlencode({"next": elsewhere}),
                           data={"user": "alice", "password": "right-password"})
        assert sent.headers["Location"] == "/", "a login never sends its viewer elsewhere"
    security_store.delete_user(cluster.zk, "alice")  # a user deleted is logged out at once
    assert client.get("/api/overview").status_code == 401
    assert client.get("/").status_code == 302


def test_with_the_authorizer_a_viewer_sees_only_what_its_acls_let_it_describe(cluster, drills):
    security_store.set_user(cluster.zk, "bob", "bobs-password")
    security_store.add_acls(cluster.zk, acl.group("g"), [acl.AclEntry("User:bob", acl.ALLOW, acl.READ, "*")])
    security_store.add_acls(cluster.zk, acl.topic("t"), [acl.AclEntry("User:bob", acl.ALLOW, acl.DESCRIBE, "*")])
    client = console(cluster.zk, drills, login=True, authorizing=True)
    assert client.post("/login", data={"user": "bob", "password": "bobs-password"}).status_code == 302
    assert [g["group"] for g in client.get("/api/overview").get_json()["groups"]] == ["g"]
    assert client.get("/groups/g").status_code == 200
    for path in ("/groups/h", "/groups/nobody"):  # refused before existence: no telling which groups exist
        response = client.get(path)
        assert response.status_code == 403 and "User:bob may not describe group" in text(response)
    assert client.get("/drills").status_code == 403
    security_store.remove_acls(cluster.zk, acl.topic("t"))
    view = client.get("/api/groups/g").get_json()
    assert view["partitions"] == [] and all(m["partitions"] == [] for m in view["members"])

