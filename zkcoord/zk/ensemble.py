"""A local Apache ZooKeeper ensemble: N real QuorumPeerMain processes on 127.0.0.1.

One directory holds everything about an ensemble: ``ensemble.json`` (its size,
ports and the pid of each running node) and, per node, ``node-K/`` with the
node's ``zoo.cfg``, data directory and log. Nodes run detached from the process
that started them, so ``zkcoord zk up`` can return while the ensemble keeps
running, and ``zkcoord zk down`` (or a test harness in another process) can
find and stop it later from the directory alone.

The same class serves the CLI, the test harness and the benchmarks, so the
ensemble a test uses is the one a user gets.

A node is up only when the node itself says so: its own process is running
and the server answering on its client port reports the node's own data
directory (the ``conf`` four-letter word). A port that merely answers may be
another ensemble's, which took the port between the moment this one found it
free and the moment its node tried to bind it (nothing reserves a port). A
node that could not bind a port says so in its log, and stops (at once, or
after retrying for seconds); :meth:`LocalEnsemble.start` then moves an
ensemble whose ports it chose to a fresh block, a bounded number of times,
and otherwise raises :class:`PortInUse` naming the port.

An ensemble with users requires every session to authenticate as one of them
(ZooKeeper's ``enforce.auth``) and closes its root to all but zkcoord's
principal; with TLS and no users, a client certificate is what admits a
client. Its directories are its owner's alone, and so are ZooKeeper's files:
the transaction log holds every node, the users' SCRAM credentials among them.

Its parts: ``ensemble_files.py`` writes what the nodes run from (zoo.cfg, the
users' credentials, TLS, Kerberos); ``probes.py`` finds free ports and asks
a node what it is.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from zkcoord.errors import ConfigError, EnsembleError
from zkcoord.filemodes import OWNER_ONLY_UMASK, open_private_log, private_directory
from zkcoord.settings import check, default, of, setting
from zkcoord.zk.ensemble_files import EnsembleFiles
from zkcoord.zk.probes import (
    BIND_FAILURE, ELECTION_PORT_OFFSET, QUORUM_PORT_OFFSET, data_dir_from_conf, find_free_base_port,
    four_letter_word, mode_from_srvr, pid_alive, port_not_bound,
)
from zkcoord.zk.security import AUTH_SCHEMES, ROOT, SASL_MECHANISMS, ZkSecurity

if TYPE_CHECKING:  # ssl is loaded only when TLS is used: gevent patches it first in servers
    import ssl

log = logging.getLogger(__name__)

VALID_SIZES = (1, 3, 5)
USER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
STATE_FILE = "ensemble.json"
STATE_VERSION = 1

# Where Debian's `zookeeper` package puts the server and its dependencies. The
# jar's manifest names the rest of its class path; slf4j-simple makes the
# server log to stderr, which we send to the node's log file. The manifest
# leaves out two Netty jars the secure client port (NettyServerCnxnFactory)
# needs; Debian packages them in libnetty-java, a dependency of zookeeper's.
DEFAULT_CLASSPATH = ":".join(
    ["/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar",
     "/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar"]
)
CLASSPATH_ENV = "ZKCOORD_ZOOKEEPER_CLASSPATH"
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

SERVING_MODES = ("leader", "follower", "standalone")

# Fresh blocks start() tries when a node finds a port of its chosen block taken.
PORT_ATTEMPTS = 5
# The nodes every ZooKeeper makes, open to all (its configuration node is read-only already).
ZOOKEEPER_OWN_NODES = ("/zookeeper", "/zookeeper/quota")


class PortInUse(EnsembleError):
    """A node could not bind one of its ports: another process holds it."""

    def __init__(self, directory: Path, node: int, port: Optional[int], ports: Sequence[int]):
        self.node, self.port = node, port
        which = f"127.0.0.1:{port}" if port is not None else "one of " + ", ".join(map(str, ports))
        super().__init__(f"node {node} of the ensemble in {directory} could not bind {which}: another process "
                         f"holds it")


@dataclasses.dataclass(frozen=True)
class NodeStatus:
    """What a node said to the ``srvr`` four-letter word. Mode None when it did
    not answer, or when what answered on its port is not the node (``foreign``:
    its process is not running, or the server there has another data directory)."""

    node: int
    client_port: int
    mode: Optional[str]
    pid: Optional[int]
    foreign: bool = False

    @property
    def serving(self) -> bool:
        return self.mode in SERVING_MODES

    @property
    def shown(self) -> str:
        if self.foreign:
            return "down (another server answers on its port)"
        return self.mode or "down"


def validate_size(nodes: int) -> int:
    if nodes not in VALID_SIZES:
        raise ConfigError(f"an ensemble has 1, 3 or 5 nodes, not {nodes}")
    return nodes


def validate_base_port(base_port: int) -> int:
    if not 1024 <= base_port <= 65535 - ELECTION_PORT_OFFSET - max(VALID_SIZES):
        raise ConfigError(
            f"base port {base_port} out of range: it must leave room for "
            f"{ELECTION_PORT_OFFSET + max(VALID_SIZES)} ports above it, from 1024"
        )
    return base_port


DEFAULT_HEAP_MB = 256


@dataclasses.dataclass(frozen=True)
class EnsembleConfig:
    """A local ensemble's shape: how many nodes, their ports and their tick."""

    nodes: int = setting(3, "ZooKeeper servers in the ensemble", choices=VALID_SIZES)
    base_port: Optional[int] = setting(None, "first client port (default: a free block, moved to another "
                                             "if a node finds a port of it taken)",
                                       validate=validate_base_port)
    tick_ms: int = setting(500, "ZooKeeper's tickTime", minimum=50, maximum=10_000)
    auth: str = setting("none", "how clients authenticate: digest (ZooKeeper's built-in user:password "
                                "scheme) or sasl (as the users below)", choices=AUTH_SCHEMES)
    sasl_mechanism: str = setting(default(ZkSecurity, "zk_sasl_mechanism"),
                                  "with sasl: DIGEST-MD5 (passwords) or GSSAPI (Kerberos: a KDC of the "
                                  "ensemble's own, in its kerberos/ directory, with a keytab per user)",
                                  choices=SASL_MECHANISMS)
    users: tuple[str, ...] = setting(("zkcoord",), "users to create, each with a generated password in the "
                                                   "ensemble's credentials/ directory (GSSAPI: a principal "
                                                   "with a keytab in kerberos/keytabs/); the first is zkcoord's",
                                     flag="--user", non_empty=True)
    tls: bool = setting(False, "clients connect over TLS only, with a CA and certificates generated into the "
                               "ensemble's tls/ directory")
    # Small for the tests' ensembles. A group of 20,000 members writes
    # several MB a round, and ZooKeeper keeps its last 500 transactions in
    # memory: 256 MB ran out (bench/RESULTS.md, "big group").
    heap_mb: int = setting(DEFAULT_HEAP_MB, "each node's Java heap, in MB (ZooKeeper's own scripts give 1000)",
                           minimum=64, maximum=65_536)

    def __post_init__(self) -> None:
        check(self)
        for user in self.users:
            if not USER_NAME.fullmatch(user):
                raise ConfigError(f"a user name is 1 to 64 letters, digits, '.', '_' or '-', not {user!r}")
        if self.sasl_mechanism != default(ZkSecurity, "zk_sasl_mechanism") and self.auth != "sasl":
            raise ConfigError(f"sasl_mechanism {self.sasl_mechanism} is for auth sasl, not {self.auth}")


class LocalEnsemble(EnsembleFiles):
    """An N-node ZooKeeper ensemble rooted at one directory.

    >>> ens = LocalEnsemble.create(Path("/tmp/zk"), nodes=3)   # doctest: +SKIP
    >>> ens.start(); ens.connect_string                         # doctest: +SKIP
    '127.0.0.1:21000,127.0.0.1:21001,127.0.0.1:21002'
    """

    def __init__(self, directory: Path, nodes: int, base_port: int, tick_ms: int, pids: dict[int, int],
                 auth: str = "none", users: tuple[str, ...] = (), tls: bool = False,
                 sasl_mechanism: str = default(ZkSecurity, "zk_sasl_mechanism"), ports_chosen: bool = False,
                 heap_mb: int = DEFAULT_HEAP_MB):
        self.directory = Path(directory).resolve()
        self.nodes = validate_size(nodes)
        self.base_port = validate_base_port(base_port)
        # True when no base port was given: start() may then move the ensemble
        # to another block; ports someone asked for stay what they asked.
        self.ports_chosen = ports_chosen
        self.tick_ms = tick_ms
        self._pids = dict(pids)
        # The nodes this object started: their processes, and where their logs stood then.
        self._procs: dict[int, subprocess.Popen] = {}
        self._log_starts: dict[int, int] = {}
        if auth not in AUTH_SCHEMES:
            raise ConfigError(f"auth must be one of {AUTH_SCHEMES}, not {auth!r}")
        self.auth = auth
        self.users = tuple(users) if auth != "none" else ()
        self.tls = tls
        self.sasl_mechanism = sasl_mechanism
        self.heap_mb = heap_mb

    # -- creation and persistence -------------------------------------------------

    @classmethod
    def create(cls, directory: Path, config: Optional[EnsembleConfig] = None, **settings) -> "LocalEnsemble":
        """Lay out a new ensemble in ``directory`` (which must not hold a running
        one), as ``config`` or the :class:`EnsembleConfig` settings given as keywords say."""
        config = of(EnsembleConfig, config, settings)
        nodes, base_port, tick_ms = config.nodes, config.base_port, config.tick_ms
        directory = Path(directory)
        private_directory(directory, "a ZooKeeper ensemble (its nodes' data, passwords, keys)")
        if (directory / STATE_FILE).exists():
            existing = cls.load(directory)
            if existing.running_nodes():
                raise EnsembleError(
                    f"{directory} already holds a running ensemble ({existing.connect_string}); "
                    "take it down first"
                )
        ensemble = cls(directory, nodes, base_port if base_port is not None else find_free_base_port(nodes),
                       tick_ms, pids={}, auth=config.auth, users=config.users, tls=config.tls,
                       sasl_mechanism=config.sasl_mechanism, ports_chosen=base_port is None,
                       heap_mb=config.heap_mb)
        ensemble._write_credentials()
        ensemble._write_configs()
        ensemble._save()
        return ensemble

    @classmethod
    def load(cls, directory: Path) -> "LocalEnsemble":
        path = Path(directory) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise EnsembleError(f"no ensemble in {directory} (no {STATE_FILE})") from None
        except (OSError, ValueError) as exc:
            raise EnsembleError(f"unreadable ensemble state {path}: {exc}") from None
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise EnsembleError(f"{path} is not an ensemble state file of version {STATE_VERSION}")
        try:
            return cls(
                directory,
                int(state["nodes"]),
                int(state["base_port"]),
                int(state["tick_ms"]),
                {int(k): int(v) for k, v in state.get("pids", {}).items()},
                auth=str(state.get("auth", "none")),
                users=tuple(str(u) for u in state.get("users", ())),
                tls=bool(state.get("tls", False)),
                sasl_mechanism=str(state.get("sasl_mechanism", default(ZkSecurity, "zk_sasl_mechanism"))),
                ports_chosen=bool(state.get("ports_chosen", False)),
                heap_mb=int(state.get("heap_mb", DEFAULT_HEAP_MB)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EnsembleError(f"{path} is damaged: {exc!r}") from None

    def _save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        state = {
            "version": STATE_VERSION,
            "nodes": self.nodes,
            "base_port": self.base_port,
            "ports_chosen": self.ports_chosen,
            "tick_ms": self.tick_ms,
            "pids": {str(k): v for k, v in sorted(self._pids.items())},
            "auth": self.auth,
            "users": list(self.users),
            "tls": self.tls,
            "sasl_mechanism": self.sasl_mechanism,
            "heap_mb": self.heap_mb,
        }
        tmp = self.directory / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.directory / STATE_FILE)

    # -- addresses -------------------------------------------------------------------

    def client_port(self, node: int) -> int:
        self._check_node(node)
        return self.base_port + node - 1

    @property
    def connect_string(self) -> str:
        return ",".join(f"127.0.0.1:{self.client_port(k)}" for k in self.node_ids)

    @property
    def node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def node_ports(self, node: int) -> list[int]:
        """The ports node ``node`` binds: its client port, and with peers its quorum and election ports."""
        port = self.client_port(node)
        if self.nodes == 1:
            return [port]
        return [port, port + QUORUM_PORT_OFFSET, port + ELECTION_PORT_OFFSET]

    def node_dir(self, node: int) -> Path:
        return self.directory / f"node-{node}"

    def data_dir(self, node: int) -> Path:
        return self.node_dir(node) / "data"

    def config_path(self, node: int) -> Path:
        return self.node_dir(node) / "zoo.cfg"

    def log_path(self, node: int) -> Path:
        return self.node_dir(node) / "zookeeper.log"

    def _check_node(self, node: int) -> None:
        if node not in self.node_ids:
            raise ConfigError(f"node {node} is not in this {self.nodes}-node ensemble (nodes are 1..{self.nodes})")

    # -- processes -----------------------------------------------------------------------

    def _java_command(self, node: int) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise EnsembleError("no `java` on PATH: install a JRE (Debian: default-jre-headless)")
        classpath = os.environ.get(CLASSPATH_ENV, DEFAULT_CLASSPATH)
        first_jar = classpath.split(":")[0]
        if not Path(first_jar).exists():
            raise EnsembleError(
                f"ZooKeeper is not installed ({first_jar} missing): apt-get install zookeeper, "
                f"or set {CLASSPATH_ENV}"
            )
        return [
            java,
            "-Xms32m",
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # faster start; these nodes are small
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
            "-Dzookeeper.admin.enableServer=false",
            *([f"-Djava.security.auth.login.config={self.jaas_path}"] if self.auth == "sasl" else []),
            *([f"-Djava.security.krb5.conf={self.realm.krb5_conf}"] if self.kerberos else []),
            "-cp",
            classpath,
            QUORUM_MAIN,
            str(self.config_path(node)),
        ]

    def start_node(self, node: int) -> int:
        """Start one node (no-op if it runs already); returns its pid."""
        self._check_node(node)
        if self._running(node):
            return self._pids[node]
        if not self.config_path(node).exists():
            raise EnsembleError(f"node {node} has no configuration in {self.node_dir(node)}")
        self._private_node_directories(node)  # an ensemble laid out before they were
        with open(open_private_log(self.log_path(node)), "ab") as log:
            self._log_starts[node] = log.tell()
            proc = subprocess.Popen(
                self._java_command(node),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.node_dir(node),
                start_new_session=True,  # outlives `zkcoord zk up`
                umask=OWNER_ONLY_UMASK,  # ZooKeeper's snapshots and logs: its owner's alone
            )
        self._pids[node] = proc.pid
        self._procs[node] = proc
        self._save()
        return proc.pid

    def kill_node(self, node: int, sig: int = signal.SIGKILL) -> None:
        """Stop one node with ``sig`` (kill -9 by default) and wait until it is gone."""
        self._check_node(node)
        if self._running(node):
            pid = self._pids[node]
            deadline = time.monotonic() + 10
            try:
                os.kill(pid, sig)
                while self._running(node):
                    if time.monotonic() > deadline:
                        os.kill(pid, signal.SIGKILL)
                        deadline = time.monotonic() + 10
                    time.sleep(0.02)
            except ProcessLookupError:
                pass  # gone meanwhile
        self._pids.pop(node, None)
        self._procs.pop(node, None)
        self._save()

    def _running(self, node: int) -> bool:
        """Whether node ``node``'s process runs. A node this object started is
        asked of its process handle: between exec and the JVM's start, /proc
        shows the process with no command line yet. Another's is found in
        /proc by the pid it recorded and its command line, so a recycled pid
        is not mistaken for the node."""
        pid = self._pids.get(node)
        if pid is None:
            return False
        proc = self._procs.get(node)
        if proc is not None and proc.pid == pid:
            return proc.poll() is None
        # It may still be a child of this process, started by another object:
        # reap it so that it does not linger as a zombie.
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return pid_alive(pid, self.config_path(node))

    def start(self, timeout: float = 60.0) -> None:
        """Start every node and wait, up to ``timeout`` seconds, until each
        one serves. A node that stops because another process holds one of its
        ports ends the wait at once: the nodes this call started are stopped
        and, if the ensemble chose its ports and none of its nodes ran before,
        it moves to a fresh block (up to PORT_ATTEMPTS blocks in all);
        otherwise :class:`PortInUse` names the port."""
        if self.kerberos:
            self.realm.start()  # the nodes log in to it as they start
        deadline = time.monotonic() + timeout
        running_before = set(self.running_nodes())
        for attempt in range(1, PORT_ATTEMPTS + 1):
            for node in self.node_ids:
                self.start_node(node)
            try:
                self.wait_until_whole(max(0.0, deadline - time.monotonic()))
                if self.users:
                    self._close_root(max(1.0, deadline - time.monotonic()))
                return
            except PortInUse as exc:
                for node in self.node_ids:
                    if node not in running_before:
                        self.kill_node(node)
                if running_before or not self.ports_chosen or attempt == PORT_ATTEMPTS:
                    raise
                self._move_to_free_ports()
                log.warning("%s; ensemble in %s moved to ports from %d (block %d of at most %d)",
                            exc, self.directory, self.base_port, attempt + 1, PORT_ATTEMPTS)

    def _close_root(self, timeout: float) -> None:
        """Give the root the ACL zkcoord's policy gives it: only zkcoord's
        principal (the first user) creates or deletes top-level nodes, so no
        other user plants one that zkcoord would adopt; anyone may list them.
        ZooKeeper's own nodes, which it makes open to all, get the same: no
        other user fills them with nodes or sets quotas."""
        from zkcoord.zk import client as zk_client  # loads ssl: not at import, before a server's gevent patches it

        client = zk_client.open_client(self.connect_string, self.client_security())
        try:
            zk_client.start(client, timeout=timeout)
            for path in (ROOT, *ZOOKEEPER_OWN_NODES):
                client.set_acls(path, client.acl_for(ROOT))
        finally:
            client.stop()
            client.close()

    def _move_to_free_ports(self) -> None:
        """Another block of ports for a stopped ensemble, in its configuration and state."""
        self.base_port = find_free_base_port(self.nodes)
        self._write_configs()
        self._save()

    def stop(self) -> None:
        """Stop every node: SIGTERM, then SIGKILL for any that lingers."""
        for node in self.node_ids:
            self.kill_node(node, signal.SIGTERM)
        if self.kerberos:
            self.realm.stop()

    def destroy(self) -> None:
        """Stop every node and delete the ensemble's directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def remove_secrets(self) -> None:
        """Delete the passwords, the JAAS file and the TLS keys and
        certificates of an ensemble that is done with (its logs and data stay)."""
        shutil.rmtree(self.directory / "credentials", ignore_errors=True)
        shutil.rmtree(self.tls_dir, ignore_errors=True)
        self.jaas_path.unlink(missing_ok=True)

    def running_nodes(self) -> list[int]:
        return [k for k in sorted(self._pids) if self._running(k)]

    # -- health ----------------------------------------------------------------------------

    def status(self) -> list[NodeStatus]:
        """Each node's mode, from the node itself: what answers on a node's
        client port counts only if the node's own process runs and the server
        reports the node's data directory."""
        tls = self._client_tls_context() if self.tls else None
        return [self._node_status(k, tls) for k in self.node_ids]

    def _node_status(self, node: int, tls: Optional[ssl.SSLContext]) -> NodeStatus:
        port, pid = self.client_port(node), self._pids.get(node)
        mode = mode_from_srvr(four_letter_word(port, "srvr", tls=tls))
        if mode is None:
            return NodeStatus(node, port, None, pid)
        ours = (self._running(node)
                and data_dir_from_conf(four_letter_word(port, "conf", tls=tls)) == self.data_dir(node) / "version-2")
        return NodeStatus(node, port, mode if ours else None, pid, foreign=not ours)

    def has_quorum(self) -> bool:
        """A majority of nodes serve and exactly one of them leads (or one standalone node serves)."""
        statuses = self.status()
        serving = [s for s in statuses if s.serving]
        if self.nodes == 1:
            return len(serving) == 1
        leaders = [s for s in serving if s.mode == "leader"]
        return len(leaders) == 1 and len(serving) > self.nodes // 2

    def is_whole(self) -> bool:
        """Every node serves: one leader and the rest followers."""
        statuses = self.status()
        if self.nodes == 1:
            return statuses[0].serving
        modes = sorted(s.mode or "" for s in statuses)
        return modes == sorted(["leader"] + ["follower"] * (self.nodes - 1))

    def wait_until_whole(self, timeout: float = 60.0) -> None:
        """Wait until every node serves; a started node that stops meanwhile,
        or finds a port of its taken, ends the wait (:class:`PortInUse`)."""
        self._wait(self.is_whole, timeout, "every node serving with one leader", every_node=True)

    def wait_for_quorum(self, timeout: float = 60.0) -> None:
        self._wait(self.has_quorum, timeout, "a quorum")

    def _wait(self, condition: Callable[[], bool], timeout: float, what: str, every_node: bool = False) -> None:
        deadline = time.monotonic() + timeout
        while True:
            # Failures first: a node that cannot bind its election port may
            # already be counted in a quorum it is about to leave.
            failures = [self._start_failure(node) for node in list(self._pids)] if every_node else []
            for failure in filter(None, failures):
                raise failure
            if condition():
                return
            if time.monotonic() > deadline:
                summary = ", ".join(f"node {s.node}: {s.shown}" for s in self.status())
                raise EnsembleError(
                    f"ensemble in {self.directory} did not reach {what} within {timeout:.0f}s ({summary}); "
                    f"see {self.directory}/node-*/zookeeper.log"
                )
            time.sleep(0.1)

    def _start_failure(self, node: int) -> Optional[EnsembleError]:
        """Why a started node will not serve, or None while it still may.

        PortInUse as soon as its log says it could not bind a port, whether
        it exits (the client port) or not yet (the election port: it retries
        for seconds, enough to be counted in a quorum first, then exits);
        an EnsembleError with its log's end if it stopped for another reason."""
        start = self._log_starts.get(node)
        running = self._running(node)
        if start is None and running:
            return None  # started by another process: its log is not this run's alone
        text = self.log_since(node, start) if start is not None else self.log_tail(node)
        if BIND_FAILURE in text:
            ports = self.node_ports(node)
            return PortInUse(self.directory, node, port_not_bound(text, ports), ports)
        if not running:
            return EnsembleError(f"node {node} of the ensemble in {self.directory} stopped while starting; "
                                 f"the end of {self.log_path(node)}:\n{text[-3000:]}")
        return None

    def log_tail(self, node: int, max_bytes: int = 8192) -> str:
        try:
            with open(self.log_path(node), "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - max_bytes))
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_since(self, node: int, offset: int) -> str:
        """Node ``node``'s log from byte ``offset`` on (what one run of it wrote)."""
        try:
            with open(self.log_path(node), "rb") as log:
                log.seek(offset)
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""
