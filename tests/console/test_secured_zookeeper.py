"""`zkcoord console` on a secured ZooKeeper (SASL DIGEST-MD5 over a
TLS-only client port), all real: with the cluster's credentials it asks
its viewers to log in as a zkcoord user, unasked, and then shows the group;
with none it does not start, and says why."""

from __future__ import annotations

import http.cookiejar
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.e2e.checks import run_a_group
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import LocalCluster, zkcoord_command
from zkcoord.testing.console import ConsoleProcess
from zkcoord.zk import security_store
from zkcoord.zk.ensemble import LocalEnsemble
from zkcoord.zk.security import command_line


@pytest.fixture(scope="module")
def sasl_tls(tmp_path_factory):
    ensemble = LocalEnsemble.create(tmp_path_factory.mktemp("zk-console"), nodes=1, tick_ms=250, auth="sasl",
                                    users=("zkcoord",), tls=True)
    try:
        ensemble.start(timeout=60)
        yield ensemble
    finally:
        ensemble.destroy()


class Browser:
    """Just enough of a browser: cookies kept, redirects not followed."""

    class _NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    def __init__(self, base: str):
        self.base = base
        self._opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
                                                   self._NoRedirects)

    def request(self, path: str, form: dict = None) -> tuple[int, dict, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with self._opener.open(self.base + path, data=data, timeout=30) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read().decode()


def test_a_console_on_a_secured_zookeeper_asks_a_login_and_shows_what_the_cluster_holds(sasl_tls, tmp_path):
    security = sasl_tls.client_security()
    cluster = LocalCluster(sasl_tls.connect_string, tmp_path / "cluster", SERVER_ARGS, zk_security=security)
    try:
        run_a_group(cluster)
        security_store.set_user(cluster.zk, "operator", "operators-password")
        console = ConsoleProcess(sasl_tls.connect_string, tmp_path / "console", command_line(security)).start()
        try:
            browser = Browser(console.url)
            status, headers, _ = browser.request("/api/groups/g")
            assert status == 401
            status, headers, _ = browser.request("/")
            assert status == 302 and headers["Location"].startswith("/login")
            status, _, page = browser.request("/login", {"user": "operator", "password": "wrong"})
            assert status == 401 and "wrong password" in page
            status, _, _ = browser.request("/login", {"user": "operator", "password": "operators-password"})
            assert status == 302
            status, _, body = browser.request("/api/groups/g")
            view = json.loads(body)
            assert status == 200 and view["state"] == "Stable"
            assert [(r["partition"], r["current_offset"], r["lag"]) for r in view["partitions"]] == [(0, 20, 0),
                                                                                                      (1, 20, 0)]
        finally:
            console.terminate(timeout=10)

        # Without the cluster's credentials there is nothing it may read: it does not start, and says why.
        tls_only = command_line(sasl_tls.client_security(user=""))
        refused = subprocess.run(zkcoord_command("console", "--zookeeper", sasl_tls.connect_string, "--port", "0",
                                                 *tls_only), capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1
        assert "requires every session to authenticate, and this one has no credentials" in refused.stderr
    finally:
        cluster.close()
