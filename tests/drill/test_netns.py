"""Network namespaces for partition drills, for real: a process in its own
namespace reaches a server on the host's 127.0.0.1, a cut stops that both
ways until healed, a dropped port stops only that port, and removing the
namespace leaves nothing behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from zkcoord.testing import netns

WHY_NOT = netns.unavailable_reason()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

CONNECT = ("import socket, sys\n"
           "try:\n"
           "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1.5).close()\n"
           "except OSError as exc:\n"
           "    sys.exit(f'no: {exc}')\n")


def echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)

    def accept_forever():
        while True:
            try:
                conn, _ = server.accept()
                conn.close()
            except socket.timeout:
                continue
            except OSError:
                return

    threading.Thread(target=accept_forever, daemon=True).start()
    return server, server.getsockname()[1]


def reaches(namespace: netns.NetworkNamespace, port: int) -> bool:
    result = subprocess.run(namespace.command(sys.executable, "-c", CONNECT, str(port)), capture_output=True,
                            text=True, timeout=30)
    return result.returncode == 0


def test_a_namespace_reaches_the_hosts_loopback_until_cut():
    first, first_port = echo_server()
    second, second_port = echo_server()
    namespace = netns.NetworkNamespace(249).create()
    try:
        assert reaches(namespace, first_port) and reaches(namespace, second_port)
        namespace.cut()
        assert namespace.is_cut and not reaches(namespace, first_port)
        namespace.heal()
        assert reaches(namespace, first_port)
        namespace.drop_port(first_port)
        assert not reaches(namespace, first_port) and reaches(namespace, second_port)
        namespace.heal()
        assert reaches(namespace, first_port)
    finally:
        namespace.remove()
        first.close()
        second.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert namespace.name not in listed
    rules = subprocess.run(["iptables", "-t", "nat", "-S", "PREROUTING"], capture_output=True, text=True).stdout
    assert namespace.host_link not in rules


def test_a_namespace_takes_a_link_block_nobody_else_on_the_machine_holds():
    """Two drills side by side both numbered their namespaces from 1 and
    routed into each other's: a block held by another process's link is
    passed over."""
    foreign = f"{netns.PREFIX}f{os.getpid() % 100000}"  # link names: at most 15 characters
    held = netns.free_block()
    subprocess.run(["ip", "link", "add", foreign + "a", "type", "veth", "peer", "name", foreign + "b"], check=True)
    server, port = echo_server()
    namespace = netns.NetworkNamespace(1)
    try:
        subprocess.run(["ip", "addr", "add", f"10.250.{held}.1/30", "dev", foreign + "a"], check=True)
        namespace.create()
        assert namespace.block != held
        assert reaches(namespace, port)
    finally:
        namespace.remove()
        subprocess.run(["ip", "link", "del", foreign + "a"], check=False)
        server.close()
