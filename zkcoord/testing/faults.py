"""Fault injection on real ZooKeeper: expire sessions, drop or cut connections;
and a loaded machine (:class:`CpuLoad`), under which every process is slow.

A ``TcpProxy`` sits between a client and one ZooKeeper node on 127.0.0.1. It
forwards bytes both ways until told to ``drop()`` (close every connection: the
client sees a disconnect and reconnects, its session intact) or to ``cut()``
(hold every connection open but forward nothing, and accept new ones the same
way: a network partition, after which the session expires once the server's
session timeout passes). ``heal()`` undoes a cut. With ``source_host`` (any
address of 127.0.0.0/8: Linux routes them all to the loopback), its
connections to ZooKeeper come from there, so that ZooKeeper's ``ip`` ACLs
tell the proxied client from others on the same machine.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
from typing import Iterable, Optional

from kazoo.client import KazooClient


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", source_host: Optional[str] = None):
        self.target = (target_host, target_port)
        self.source = (source_host, 0) if source_host else None
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    # -- control -----------------------------------------------------------------------

    def drop(self) -> None:
        """Close every proxied connection now."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            _close(a)
            _close(b)

    def cut(self) -> None:
        """Stop forwarding anything, in either direction, until ``heal``."""
        self._cut = True

    def heal(self) -> None:
        self._cut = False

    def close(self) -> None:
        self._closed = True
        self.drop()
        _close(self._listener)
        self._thread.join(timeout=5)

    # -- forwarding --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                pairs = list(self._pairs)
            readable = [self._listener]
            if not self._cut:
                readable += [s for pair in pairs for s in pair]
            try:
                ready, _, _ = select.select(readable, [], [], 0.05)
            except (OSError, ValueError):
                continue  # a socket was closed under us by drop(); look again
            for sock in ready:
                if sock is self._listener:
                    self._accept()
                else:
                    self._forward(sock, pairs)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(self.target, timeout=2, source_address=self.source)
        except OSError:
            _close(client)
            return
        with self._lock:
            self._pairs.append((client, upstream))

    def _forward(self, sock: socket.socket, pairs: Iterable[tuple[socket.socket, socket.socket]]) -> None:
        for a, b in pairs:
            if sock is a or sock is b:
                peer = b if sock is a else a
                try:
                    data = sock.recv(65536)
                    if data:
                        peer.sendall(data)
                        return
                except OSError:
                    pass
                with self._lock:
                    if (a, b) in self._pairs:
                        self._pairs.remove((a, b))
                _close(a)
                _close(b)
                return


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


class ProxiedEnsemble:
    """One ``TcpProxy`` per ZooKeeper node, and a connect string through them."""

    def __init__(self, client_ports: Iterable[int], chroot: str = "", source_host: Optional[str] = None):
        self.proxies = [TcpProxy(port, source_host=source_host) for port in client_ports]
        self.connect_string = ",".join(f"127.0.0.1:{p.port}" for p in self.proxies) + chroot

    def drop(self) -> None:
        for proxy in self.proxies:
            proxy.drop()

    def cut(self) -> None:
        for proxy in self.proxies:
            proxy.cut()

    def heal(self) -> None:
        for proxy in self.proxies:
            proxy.heal()

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()


# A CPU-bound loop that ends once its parent has gone, even killed with -9:
# a load never outlives what started it.
_BURN = ("import os, sys\n"
         "parent = int(sys.argv[1])\n"
         "while os.getppid() == parent:\n"
         "    for _ in range(200_000):\n"
         "        pass\n")


class CpuLoad:
    """``processes`` busy loops beside whatever runs here, at normal priority,
    until ``stop``: with one or two per core, every process of a cluster
    waits for a core (a load average well above the core count)."""

    def __init__(self, processes: int):
        self.processes = processes
        self._running: list[subprocess.Popen] = []

    def start(self) -> "CpuLoad":
        parent = str(os.getpid())
        self._running = [subprocess.Popen([sys.executable, "-c", _BURN, parent], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                         for _ in range(self.processes)]
        return self

    def stop(self) -> None:
        for process in self._running:
            process.kill()
        for process in self._running:
            process.wait(timeout=10)
        self._running = []


def expire_session(client: KazooClient, connect_string: str, timeout: float = 10.0) -> None:
    """Expire ``client``'s session for real: a second client attaches to the same
    session id and password, then closes it, so ZooKeeper ends the session and
    the first client learns of it as an expiry."""
    session_id, password = client.client_id
    # No chroot: kazoo's start() would read the chroot's root, and the first
    # client, reconnecting to its session meanwhile, can drop the thief's
    # connection under that read. Attaching is all the thief has to do.
    hosts = connect_string.split("/", 1)[0]
    from zkcoord.zk.client import open_client

    # As the victim connects (TLS, credentials), or ZooKeeper would not let the thief in.
    thief = open_client(hosts, getattr(client, "security", None), client_id=(session_id, password),
                        timeout=timeout)
    thief.start(timeout=timeout)
    thief.stop()
    thief.close()
