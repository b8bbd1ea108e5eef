"""A server's ZooKeeper client, on real ZooKeeper: it never gives up quietly."""

from __future__ import annotations

import subprocess
import sys

from zkcoord.coordinator.server import ZK_RECONNECT_MAX_DELAY_S, Server, ServerConfig
from zkcoord.zk import layout

# A real server in its own gevent process. The fault: kazoo's connection loop
# dies (an unhandled error in it closes the client for good, which is how a
# loaded server once ended up answering "Connection has been closed" for ever).
SERVER_WHOSE_CLIENT_CLOSES = """
from gevent import monkey
monkey.patch_all()
import socket, sys
import gevent
from zkcoord.coordinator.server import Server, ServerConfig, ServerError

server = Server(ServerConfig(server_id=1, zookeeper=sys.argv[1]))
server.start()
gevent.wait(timeout=1.0)
connection = server.zk._connection

def failing_attempt(*args, **kwargs):
    raise RuntimeError("injected: the connection loop fails")

connection._connect_attempt = failing_attempt
connection._socket.shutdown(socket.SHUT_RDWR)  # the live connection drops; reconnecting fails
try:
    server.serve_forever()
except ServerError as exc:
    print(f"server error: {exc}", flush=True)
    sys.exit(3)
sys.exit(0)
"""


def test_a_server_whose_zookeeper_client_closes_exits_non_zero_for_its_supervisor(zk_connect):
    result = subprocess.run([sys.executable, "-c", SERVER_WHOSE_CLIENT_CLOSES, zk_connect],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 3, result.stdout + result.stderr[-3000:]
    assert "will not reconnect" in result.stdout


def test_reconnecting_backs_off_to_seconds_not_kazoos_hour():
    # kazoo's default lets the delay between reconnect rounds grow to 3600 s:
    # a server cut off for a few minutes would stay away long after the cut heals.
    server = Server(ServerConfig(server_id=1, zookeeper="127.0.0.1:1"))
    assert server.zk._conn_retry.max_tries == -1
    assert server.zk._conn_retry.max_delay == ZK_RECONNECT_MAX_DELAY_S <= 5


def test_the_server_knows_the_session_timeout_zookeeper_granted_not_the_one_it_asked_for(zk_ensemble, zk_connect):
    # The coordinator dates its office from the granted timeout; ZooKeeper
    # grants at most its maxSessionTimeout (here 120 ticks of 250 ms).
    asked_ms = 60_000
    granted_ms = zk_ensemble.tick_ms * 120
    assert granted_ms < asked_ms
    script = (
        "from gevent import monkey; monkey.patch_all()\n"
        "import sys\n"
        "from zkcoord.coordinator.server import Server, ServerConfig\n"
        "from zkcoord.zk.config import ZooKeeperConfig\n"
        f"server = Server(ServerConfig(server_id=1, zookeeper=sys.argv[1], zk_session=ZooKeeperConfig({asked_ms})))\n"
        "server.start()\n"
        "print(server.zk_session_timeout_ms, flush=True)\n"
        "server.stop()\n"
    )
    result = subprocess.run([sys.executable, "-c", script, zk_connect], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[0]) == granted_ms
    assert f"granted a session timeout of {granted_ms} ms (asked for {asked_ms} ms)" in result.stderr
    assert Server(ServerConfig(server_id=1, zookeeper="127.0.0.1:1")).zk_session_timeout_ms is None  # not connected


def test_a_server_without_a_broker_creates_the_cluster_id_and_will_not_start_on_a_bad_one(zk, zk_connect):
    script = (
        "from gevent import monkey; monkey.patch_all()\n"
        "import sys\n"
        "from zkcoord.coordinator.server import Server, ServerConfig, ServerError\n"
        "server = Server(ServerConfig(server_id=1, zookeeper=sys.argv[1]))\n"
        "try:\n"
        "    server.start()\n"
        "except ServerError as exc:\n"
        "    print('refused:', exc, flush=True)\n"
        "    sys.exit(3)\n"
        "server.stop()\n"
    )
    result = subprocess.run([sys.executable, "-c", script, zk_connect], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    created = layout.decode_cluster_id(zk.get(layout.CLUSTER_ID_PATH)[0])
    # a second start keeps it
    assert subprocess.run([sys.executable, "-c", script, zk_connect], capture_output=True,
                          timeout=60).returncode == 0
    assert layout.decode_cluster_id(zk.get(layout.CLUSTER_ID_PATH)[0]) == created
    zk.set(layout.CLUSTER_ID_PATH, b"not json")
    result = subprocess.run([sys.executable, "-c", script, zk_connect], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3 and "/cluster/id" in result.stdout, (result.stdout, result.stderr[-2000:])
