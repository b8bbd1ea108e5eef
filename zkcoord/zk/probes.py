"""A local ZooKeeper node's ports, and what the node says about itself.

Where an ensemble's ports lie (a block from a base port) and whether a block
is free now; the four-letter words a node answers, and what they tell (its
mode, its data directory); which port its log says it could not bind; and
whether a pid is still the node's process. :class:`~zkcoord.zk.ensemble.
LocalEnsemble` starts and watches its nodes with these.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from zkcoord.errors import EnsembleError

if TYPE_CHECKING:  # ssl is loaded only when TLS is used: gevent patches it first in servers
    import ssl

# Offsets from the base port: node K (1-based) listens for clients on
# base+K-1, for followers on base+100+K-1 and for leader election on
# base+200+K-1.
QUORUM_PORT_OFFSET = 100
ELECTION_PORT_OFFSET = 200
# Where a base port is drawn from when none is given: below Linux's ephemeral
# range (32768 up), from which the kernel takes the local port of every
# outgoing connection, so that none of those takes a port of ours between the
# probe and the node's bind. Blocks 7 apart leave a 5-node block's client ports
# clear of the next one's.
PORT_RANGE = (21000, 32000)
PORT_STEP = 7
# What a node's log says when a port of its is taken, and how it names a port.
BIND_FAILURE = "java.net.BindException"
LOGGED_ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")


def port_free(port: int) -> bool:
    """Whether a ZooKeeper node could bind ``port`` now. With SO_REUSEADDR, as
    ZooKeeper binds its ports: a port whose last connections linger in
    TIME_WAIT is free to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def block_ports(base_port: int, nodes: int) -> list[int]:
    """Every port an ensemble of ``nodes`` from ``base_port`` listens on."""
    return [base_port + offset + k for offset in (0, QUORUM_PORT_OFFSET, ELECTION_PORT_OFFSET) for k in range(nodes)]


def find_free_base_port(nodes: int, start: int = PORT_RANGE[0], stop: int = PORT_RANGE[1],
                        step: int = PORT_STEP) -> int:
    """A base port between ``start`` and ``stop`` whose client, quorum and
    election ports are all free now. The search begins at a block drawn at
    random, so two ensembles choosing at the same moment seldom draw the same
    one (both scanning from ``start`` always did); a free port is not a
    reserved one, so whoever starts the nodes still checks that they bound."""
    bases = range(start, stop, step)
    first = secrets.randbelow(len(bases))
    for i in range(len(bases)):
        base = bases[(first + i) % len(bases)]
        if all(port_free(p) for p in block_ports(base, nodes)):
            return base
    raise EnsembleError(f"no free block of ports for {nodes} ZooKeeper nodes between {start} and {stop}")


def four_letter_word(port: int, word: str, timeout: float = 1.0,
                     tls: Optional[ssl.SSLContext] = None) -> Optional[str]:
    """Send a ZooKeeper four-letter word (over TLS with ``tls``); None if the node did not answer."""
    try:
        with contextlib.ExitStack() as stack:
            conn = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=timeout))
            if tls is not None:
                conn = stack.enter_context(tls.wrap_socket(conn, server_hostname="127.0.0.1"))
            conn.sendall(word.encode("ascii"))
            chunks = []
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


def mode_from_srvr(text: Optional[str]) -> Optional[str]:
    for line in (text or "").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def port_not_bound(log_text: str, ports: Sequence[int]) -> Optional[int]:
    """Which of a node's ``ports`` it could not bind: the last of them its
    log names before its first BindException ("binding to port
    /127.0.0.1:P", "Exception while listening to address /127.0.0.1:P")."""
    before = log_text[:log_text.find(BIND_FAILURE)]
    named = [int(port) for port in LOGGED_ADDRESS.findall(before) if int(port) in ports]
    return named[-1] if named else None


def data_dir_from_conf(text: Optional[str]) -> Optional[Path]:
    """The data directory a server's ``conf`` reports (ZooKeeper's own
    ``version-2`` below the configured one), None if it did not answer."""
    for line in (text or "").splitlines():
        if line.startswith("dataDir="):
            return Path(line.split("=", 1)[1].strip())
    return None


def pid_alive(pid: int, config_path: Path) -> bool:
    """True if ``pid`` is running the node configured by ``config_path``
    (checked by command line, so a recycled pid is not mistaken for the node)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(config_path).encode() in cmdline
