"""Network namespaces for partition drills: a process in a namespace of its
own whose traffic to 127.0.0.1 reaches the host's loopback through a veth
pair, so cutting that pair (or dropping some of its traffic) partitions the
process from the cluster while every server still binds 127.0.0.1 only.

How the traffic flows, for a namespace whose link is 10.250.s.0/30 (s: the
lowest block no other link on the machine holds, chosen under a machine-wide
lock, so that drills run side by side do not route into each other's
namespaces; 10.250.s.1 on the host's end, 10.250.s.2 inside):

- inside, a connection to 127.0.0.1:P is rewritten to 10.250.s.1:P and its
  source to 10.250.s.2 (nat OUTPUT and POSTROUTING);
- on the host, what arrives on the veth is rewritten to 127.0.0.1:P
  (nat PREROUTING, with route_localnet on that interface), and the answers
  find their way back through connection tracking.

Only the namespaces and links this module creates carry that traffic, and
``remove`` takes them away again. It needs root, `ip` and `iptables`;
``unavailable_reason()`` says why not when it cannot work.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from zkcoord.testing.process import ClusterError

PREFIX = "zkd"  # every namespace and link name starts so: zkd<pid>n<k>, its links ...a (host) and ...b
BLOCKS = range(1, 251)  # the third octet of a namespace's 10.250.s.0/30 link
# Held while a namespace picks its block and takes it, by every process on the machine.
LOCK_PATH = Path(tempfile.gettempdir()) / "zkcoord-netns.lock"


def _run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(command)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def unavailable_reason() -> Optional[str]:
    """None when namespaces can be made here; otherwise why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"network namespaces need `{tool}` (Debian: iproute2, iptables)"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


class NetworkNamespace:
    """Namespace number ``index`` (1..250) of this process."""

    def __init__(self, index: int):
        if not 1 <= index <= 250:
            raise ClusterError(f"namespace index {index} out of 1..250")
        self.index = index
        self.name = f"{PREFIX}{os.getpid()}n{index}"
        self.host_link = self.name + "a"
        self.inner_link = self.name + "b"
        self.block: Optional[int] = None  # chosen by create()
        self._dropped: list[tuple[str, ...]] = []
        self.created = False
        self.is_cut = False

    # -- life -----------------------------------------------------------------------------------

    @property
    def host_address(self) -> str:
        return f"10.250.{self.block}.1"

    @property
    def inner_address(self) -> str:
        return f"10.250.{self.block}.2"

    def create(self) -> "NetworkNamespace":
        inside = ("ip", "netns", "exec", self.name)
        _run("ip", "netns", "add", self.name)
        self.created = True
        _run("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", self.inner_link)
        _run("ip", "link", "set", self.inner_link, "netns", self.name)
        with open(LOCK_PATH, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            self.block = free_block()
            _run("ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_link)
        _run("ip", "link", "set", self.host_link, "up")
        _run("sysctl", "-qw", f"net.ipv4.conf.{self.host_link}.route_localnet=1")
        _run("iptables", "-t", "nat", "-A", "PREROUTING", *self._host_dnat())
        _run(*inside, "ip", "addr", "add", f"{self.inner_address}/30", "dev", self.inner_link)
        _run(*inside, "ip", "link", "set", self.inner_link, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "route", "add", "default", "via", self.host_address)
        _run(*inside, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1")
        _run(*inside, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "127.0.0.1", "-p", "tcp",
             "-j", "DNAT", "--to-destination", self.host_address)
        _run(*inside, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", self.inner_link,
             "-j", "SNAT", "--to-source", self.inner_address)
        return self

    def _host_dnat(self) -> tuple[str, ...]:
        return ("-i", self.host_link, "-p", "tcp", "-j", "DNAT", "--to-destination", "127.0.0.1")

    def remove(self) -> None:
        """Take the namespace, its links and the host's rules for it away (idempotent)."""
        self.heal()
        _run("iptables", "-t", "nat", "-D", "PREROUTING", *self._host_dnat(), check=False)
        if self.created:
            # The pair goes with the namespace, but only once the kernel frees
            # it, later; deleted here, it is gone before the next namespace of
            # this name (the same process's next test) asks for the same links.
            _run("ip", "link", "del", self.host_link, check=False)
            _run("ip", "netns", "del", self.name, check=False)
            self.created = False

    def command(self, *command: str) -> list[str]:
        """``command`` run inside the namespace (`ip netns exec` execs it: the pid stays the same)."""
        return ["ip", "netns", "exec", self.name, *command]

    # -- faults ---------------------------------------------------------------------------------

    def cut(self) -> None:
        """A partition: the link down, nothing passes either way until ``heal``."""
        _run("ip", "link", "set", self.host_link, "down")
        self.is_cut = True

    def drop_port(self, port: int) -> None:
        """Silently drop everything between this namespace and the host's ``port``, both ways."""
        for rule in (("INPUT", "-i", self.host_link, "-p", "tcp", "--dport", str(port), "-j", "DROP"),
                     ("OUTPUT", "-o", self.host_link, "-p", "tcp", "--sport", str(port), "-j", "DROP")):
            _run("iptables", "-I", *rule)
            self._dropped.append(rule)

    def local_ports(self, port: int) -> list[int]:
        """The local ports of this namespace's established connections to the host's ``port``."""
        listed = _run("ip", "netns", "exec", self.name, "ss", "-Htn", "state", "established",
                      f"( dport = :{port} )").stdout
        # Each line: Recv-Q Send-Q Local:Port Peer:Port (the socket's own view, before any NAT).
        return sorted({int(line.split()[2].rsplit(":", 1)[1]) for line in listed.splitlines() if line.split()})

    def drop_one_way(self, port: int, inbound: bool) -> list[int]:
        """On the connections open now between this namespace and the host's
        ``port``, drop every packet one way only: to the host's ``port``
        (``inbound``: the server hears nothing, its answers still arrive) or
        from it. New connections pass, as after a reset only one side saw, or
        a route lost one way. Returns the local ports it applies to."""
        ports = self.local_ports(port)
        for local in ports:
            if inbound:
                rule = ("INPUT", "-i", self.host_link, "-p", "tcp", "--sport", str(local), "--dport", str(port),
                        "-j", "DROP")
            else:
                rule = ("OUTPUT", "-o", self.host_link, "-p", "tcp", "--sport", str(port), "--dport", str(local),
                        "-j", "DROP")
            _run("iptables", "-I", *rule)
            self._dropped.append(rule)
        return ports

    def heal(self) -> None:
        if self.created:
            _run("ip", "link", "set", self.host_link, "up", check=False)
        self.is_cut = False
        while self._dropped:
            _run("iptables", "-D", *self._dropped.pop(), check=False)


def free_block() -> int:
    """The lowest link block no address on the host's interfaces is in."""
    listed = _run("ip", "-o", "-4", "addr", "show").stdout
    taken = {int(octet) for octet in re.findall(r"inet 10\.250\.(\d+)\.\d+/", listed)}
    block = next((b for b in BLOCKS if b not in taken), None)
    if block is None:
        raise ClusterError(f"no free link block: 10.250.{BLOCKS[0]}-{BLOCKS[-1]}.0/30 are all in use")
    return block


def remove_stale() -> list[str]:
    """Remove namespaces (and host rules) left by processes that died without
    cleaning up (kill -9 of a drill); returns their names."""
    listed = _run("ip", "netns", "list", check=False).stdout.split()
    removed = []
    for name in (n for n in listed if n.startswith(PREFIX) and "n" in n[len(PREFIX):]):
        pid = name[len(PREFIX):].split("n", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _run("ip", "netns", "del", name, check=False)
            _run("iptables", "-t", "nat", "-D", "PREROUTING", "-i", name + "a", "-p", "tcp", "-j", "DNAT",
                 "--to-destination", "127.0.0.1", check=False)
            removed.append(name)
    return removed
