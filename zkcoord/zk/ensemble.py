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
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from zkcoord.errors import ConfigError, EnsembleError
from zkcoord.filemodes import OWNER_ONLY_UMASK, open_private_log, private_directory
from zkcoord.settings import check, default, of, setting
from zkcoord.zk.kerberos import LocalRealm
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

# Offsets from the base port: node K (1-based) listens for clients on
# base+K-1, for followers on base+100+K-1 and for leader election on
# base+200+K-1.
QUORUM_PORT_OFFSET = 100
ELECTION_PORT_OFFSET = 200
SERVING_MODES = ("leader", "follower", "standalone")

# Where a base port is drawn from when none is given: below Linux's ephemeral
# range (32768 up), from which the kernel takes the local port of every
# outgoing connection, so that none of those takes a port of ours between the
# probe and the node's bind. Blocks 7 apart leave a 5-node block's client ports
# clear of the next one's.
PORT_RANGE = (21000, 32000)
PORT_STEP = 7
# Fresh blocks start() tries when a node finds a port of its chosen block taken.
PORT_ATTEMPTS = 5
# The four-letter words a node answers: those zkcoord's own checks send, srvr
# (a node's mode; the server's version, before multiRead is used) and conf (the
# node's data directory, which tells it from another server on its port). The
# others show strangers the sessions and their ephemeral nodes (dump, cons),
# the environment (envi), or reset the statistics (srst).
FOUR_LETTER_WORDS = ("srvr", "conf")
# The nodes every ZooKeeper makes, open to all (its configuration node is read-only already).
ZOOKEEPER_OWN_NODES = ("/zookeeper", "/zookeeper/quota")
# What a node holds, as a warning about an open directory names it.
NODE_DATA = "a ZooKeeper node's snapshots and transaction log (every node, users' SCRAM credentials among them)"
# What a node's log says when a port of its is taken, and how it names a port.
BIND_FAILURE = "java.net.BindException"
LOGGED_ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")


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


def _port_free(port: int) -> bool:
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
        if all(_port_free(p) for p in block_ports(base, nodes)):
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


def _mode_from_srvr(text: Optional[str]) -> Optional[str]:
    for line in (text or "").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def _port_not_bound(log_text: str, ports: Sequence[int]) -> Optional[int]:
    """Which of a node's ``ports`` it could not bind: the last of them its
    log names before its first BindException ("binding to port
    /127.0.0.1:P", "Exception while listening to address /127.0.0.1:P")."""
    before = log_text[:log_text.find(BIND_FAILURE)]
    named = [int(port) for port in LOGGED_ADDRESS.findall(before) if int(port) in ports]
    return named[-1] if named else None


def _data_dir_from_conf(text: Optional[str]) -> Optional[Path]:
    """The data directory a server's ``conf`` reports (ZooKeeper's own
    ``version-2`` below the configured one), None if it did not answer."""
    for line in (text or "").splitlines():
        if line.startswith("dataDir="):
            return Path(line.split("=", 1)[1].strip())
    return None


def _pid_alive(pid: int, config_path: Path) -> bool:
    """True if ``pid`` is running the node configured by ``config_path``
    (checked by command line, so a recycled pid is not mistaken for the node)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(config_path).encode() in cmdline


class LocalEnsemble:
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

    # -- security --------------------------------------------------------------------------

    @property
    def jaas_path(self) -> Path:
        return self.directory / "jaas.conf"

    @property
    def tls_dir(self) -> Path:
        return self.directory / "tls"

    @property
    def kerberos(self) -> bool:
        return self.auth == "sasl" and self.sasl_mechanism == "GSSAPI"

    @property
    def realm(self) -> LocalRealm:
        """The ensemble's own Kerberos realm (GSSAPI only)."""
        if not self.kerberos:
            raise ConfigError("this ensemble does not use Kerberos (auth sasl, sasl_mechanism GSSAPI)")
        return LocalRealm.load(self.directory / "kerberos")

    def _check_user(self, user: str) -> None:
        if user not in self.users:
            raise ConfigError(f"user {user!r} is not one of this ensemble's ({', '.join(self.users) or 'none'})")

    def password_file(self, user: str) -> Path:
        self._check_user(user)
        if self.kerberos:
            raise ConfigError(f"user {user!r} has a keytab, not a password: this ensemble uses Kerberos")
        return self.directory / "credentials" / f"{user}.password"

    def keytab(self, user: str) -> Path:
        self._check_user(user)
        return self.realm.keytab(user)

    def _write_credentials(self) -> None:
        """Passwords (one file per user, readable by the owner only) or, with
        Kerberos, a realm with a keytab per user and ZooKeeper's own; the JAAS
        file that gives them to ZooKeeper's SASL provider; the certificates."""
        from zkcoord.security.certs import issue, make_ca

        if self.kerberos:
            self._write_kerberos()
        for user in self.users if not self.kerberos else ():
            path = self.password_file(user)
            private_directory(path.parent, "the ensemble's users' passwords")
            path.write_text(secrets.token_urlsafe(18) + "\n")
            os.chmod(path, 0o600)
        if self.auth == "sasl" and not self.kerberos:
            # DigestLoginModule's user_<name>="<password>": the names are checked,
            # the passwords url-safe, so neither needs quoting beyond this.
            entries = " ".join(f'user_{u}="{self.password_file(u).read_text().strip()}"' for u in self.users)
            self.jaas_path.write_text(
                f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required {entries};\n}};\n")
            os.chmod(self.jaas_path, 0o600)
        if self.tls:
            private_directory(self.tls_dir, "the ensemble's CA and keys")
            ca = make_ca(self.tls_dir, common_name="zkcoord ZooKeeper CA")
            server = issue(ca, self.tls_dir, "zookeeper")
            # ZooKeeper's PEM key store is one file: the key, then the certificate.
            keystore = self.tls_dir / "zookeeper-keystore.pem"
            keystore.write_bytes(server.key.read_bytes() + server.cert.read_bytes())
            os.chmod(keystore, 0o600)
            issue(ca, self.tls_dir, "client")

    def _write_kerberos(self) -> None:
        realm = LocalRealm.create(self.directory / "kerberos")
        for user in self.users:
            realm.add_principal(user)
        keytab = realm.add_principal(realm.service_name())
        # The server logs in once from its keytab and only accepts (isInitiator=false):
        # it never asks the KDC for a ticket of its own.
        self.jaas_path.write_text(
            "Server {\n  com.sun.security.auth.module.Krb5LoginModule required\n"
            f'  useKeyTab=true keyTab="{keytab}" storeKey=true useTicketCache=false isInitiator=false\n'
            f'  principal="{realm.principal(realm.service_name())}";\n}};\n')
        os.chmod(self.jaas_path, 0o600)

    def _security_lines(self) -> list[str]:
        lines = []
        if self.auth == "sasl":
            lines.append("authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider")
        if self.users:
            # Every session authenticates (ZooKeeper 3.7+): a client that has
            # not is answered SESSIONCLOSEDREQUIRESASLAUTH and its session
            # closed at its first request, so no ACL's world:anyone reaches it.
            lines += ["enforce.auth.enabled=true", f"enforce.auth.schemes={self.auth}"]
        if self.tls:
            lines += [
                # Only the Netty connection factory serves a secure client port.
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"ssl.keyStore.location={self.tls_dir / 'zookeeper-keystore.pem'}",
                "ssl.keyStore.type=PEM",
                f"ssl.trustStore.location={self.tls_dir / 'ca.pem'}",
                "ssl.trustStore.type=PEM",
                # With users, a client certificate is welcome, not required:
                # clients prove who they are with SASL or digest (required
                # above); TLS keeps the wire private. Without users the
                # certificate is all that tells a client from a stranger.
                f"ssl.clientAuth={'want' if self.users else 'need'}",
            ]
            if self.nodes > 1:  # the nodes talk TLS among themselves too, with the same certificate
                lines += [
                    "sslQuorum=true",
                    f"ssl.quorum.keyStore.location={self.tls_dir / 'zookeeper-keystore.pem'}",
                    "ssl.quorum.keyStore.type=PEM",
                    f"ssl.quorum.trustStore.location={self.tls_dir / 'ca.pem'}",
                    "ssl.quorum.trustStore.type=PEM",
                ]
        return lines

    def _client_tls_context(self) -> "ssl.SSLContext":
        import ssl

        context = ssl.create_default_context(cafile=str(self.tls_dir / "ca.pem"))
        context.check_hostname = False  # 127.0.0.1 is in the certificate; the CA is what matters
        context.load_cert_chain(str(self.tls_dir / "client.pem"), str(self.tls_dir / "client-key.pem"))
        return context

    def client_security(self, user: Optional[str] = None, **overrides) -> ZkSecurity:
        """The client settings for this ensemble: ``user``'s credentials (the
        first user's by default; "" for none) and its TLS files."""
        if user is None:
            user = self.users[0] if self.users else ""
        options: dict = {}
        if user and self.kerberos:
            realm = self.realm
            options.update(zk_auth="sasl", zk_sasl_mechanism="GSSAPI", zk_user=realm.principal(user),
                           zk_keytab=self.keytab(user), zk_krb5_conf=realm.krb5_conf)
        elif user:
            options.update(zk_auth=self.auth, zk_user=user, zk_password_file=self.password_file(user))
        if self.tls:
            options.update(zk_ca_file=self.tls_dir / "ca.pem", zk_cert_file=self.tls_dir / "client.pem",
                           zk_key_file=self.tls_dir / "client-key.pem")
        options.update(overrides)
        return ZkSecurity(**options)

    def _write_configs(self) -> None:
        for node in self.node_ids:
            data_dir = self._private_node_directories(node)
            (data_dir / "myid").write_text(f"{node}\n")
            lines = [
                f"tickTime={self.tick_ms}",
                "initLimit=20",
                "syncLimit=10",
                f"dataDir={data_dir}",
                # With TLS the client port speaks TLS only: nothing is left in plaintext.
                f"{'secureClientPort' if self.tls else 'clientPort'}={self.client_port(node)}",
                f"{'secureClientPortAddress' if self.tls else 'clientPortAddress'}=127.0.0.1",
                # Sessions from 2 ticks (fast expiry in drills) to 120 ticks.
                f"minSessionTimeout={2 * self.tick_ms}",
                f"maxSessionTimeout={120 * self.tick_ms}",
                f"4lw.commands.whitelist={','.join(FOUR_LETTER_WORDS)}",
                "admin.enableServer=false",
                "autopurge.purgeInterval=1",
            ]
            lines += self._security_lines()
            if self.nodes > 1:
                for peer in self.node_ids:
                    quorum = self.base_port + QUORUM_PORT_OFFSET + peer - 1
                    election = self.base_port + ELECTION_PORT_OFFSET + peer - 1
                    lines.append(f"server.{peer}=127.0.0.1:{quorum}:{election}")
            self.config_path(node).write_text("\n".join(lines) + "\n")

    def _private_node_directories(self, node: int) -> Path:
        """Node ``node``'s directory and data directory, its owner's alone; returns the data directory."""
        private_directory(self.node_dir(node), NODE_DATA)
        return private_directory(self.data_dir(node), NODE_DATA)

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
        return _pid_alive(pid, self.config_path(node))

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
        mode = _mode_from_srvr(four_letter_word(port, "srvr", tls=tls))
        if mode is None:
            return NodeStatus(node, port, None, pid)
        ours = (self._running(node)
                and _data_dir_from_conf(four_letter_word(port, "conf", tls=tls)) == self.data_dir(node) / "version-2")
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
            return PortInUse(self.directory, node, _port_not_bound(text, ports), ports)
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
