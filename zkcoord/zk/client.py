"""The one way zkcoord opens a ZooKeeper client: credentials, TLS and per-path ACLs from a
:class:`~zkcoord.zk.security.ZkSecurity`, and the start, ownership check and ACL migration that go with it.

With credentials, zkcoord uses a node only if its principal alone may change
it. A node others may write, or create and delete under, could have been
planted by anyone who reached ZooKeeper before zkcoord made it (a rewound
producer-id block, a group's offsets, an ACL granting a stranger a group), so
zkcoord refuses it, naming the node and who else may change it, and leaves it
as it is: only an operator can tell a tree zkcoord wrote before it had
credentials (``zkcoord zk secure`` takes that) from one a stranger wrote."""

from __future__ import annotations

import time
from typing import Callable, Iterator, Optional

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import AuthFailedError, ConnectionLoss, NoAuthError, NoNodeError, SessionClosedRequireSaslError
from kazoo.hosts import collect_hosts
from kazoo.protocol.states import KazooState, KeeperState, ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import ACL, ANYONE_ID_UNSAFE, Id, Permissions

from zkcoord.zk import layout
from zkcoord.zk.kerberos import SERVICE as KERBEROS_SERVICE
from zkcoord.zk.layout.security import ACL_CHANGES, ACLS, CONFIG_CHANGES, CONFIG_USERS
from zkcoord.zk.security import (ROOT, ZOOKEEPER_ROOT, ZkSecurity, ZooKeeperAuthError, ZooKeeperNodeOpen,
                                 ZooKeeperTLSError, client_options)

# What lets a principal change a node or what lies under it: its data, its
# children (creating or deleting them), or its ACL, which grants the rest.
CHANGES = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN
PERMISSION_NAMES = ((Permissions.WRITE, "write"), (Permissions.CREATE, "create"), (Permissions.DELETE, "delete"),
                    (Permissions.ADMIN, "admin"))

# Every node a server or broker uses that may exist before it starts, down to
# those whose children only zkcoord makes: the top-level nodes, the
# containers below them, and the nodes whose content it takes as found (the
# cluster id, the last producer-id block). The root comes last, so that a
# wrong principal is told about zkcoord's own nodes first.
ADOPTED_NODES = (layout.ZKCOORD_ROOT, layout.CONSUMERS, "/brokers", layout.BROKER_IDS, layout.BROKER_TOPICS,
                 "/cluster", layout.CLUSTER_ID_PATH, "/config", CONFIG_USERS, CONFIG_CHANGES, ACLS, ACL_CHANGES,
                 layout.PRODUCER_ID_BLOCK_PATH, ROOT)


class _Transaction(TransactionRequest):
    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
        if acl is None:
            acl = self.client.acl_for(path)
        return super().create(path, value, acl, ephemeral, sequence)


class ZooKeeperClient(KazooClient):
    """A kazoo client whose creates (plain, with their made parents, in
    transactions) carry the ACL the policy gives each path, unless a caller
    gives one. kazoo's single ``default_acl`` cannot tell paths apart."""

    def __init__(self, *args, security: ZkSecurity, acl_for: Callable[[str], list[ACL]], **kwargs):
        super().__init__(*args, **kwargs)
        self.security = security
        self.acl_for = acl_for
        exchange = self._connection._authenticate_with_sasl

        def authenticate_with_sasl(*args, **kwargs):
            # A ZooKeeper that requires authentication (enforce.auth) answers
            # refused SASL credentials SESSIONCLOSEDREQUIRESASLAUTH, not
            # AUTH_FAILED. kazoo handles only the latter: the former killed its
            # connection thread, and the client waited out its time-out. Both
            # say the same: these credentials were refused.
            try:
                return exchange(*args, **kwargs)
            except SessionClosedRequireSaslError:
                raise AuthFailedError("SASL credentials refused, and the session closed") from None

        self._connection._authenticate_with_sasl = authenticate_with_sasl

    def create_async(self, path, value=b"", acl=None, ephemeral=False, sequence=False, makepath=False,
                     include_data=False):
        if acl is None and isinstance(path, str):
            acl = self.acl_for(path)
        return super().create_async(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence,
                                    makepath=makepath, include_data=include_data)

    def transaction(self):
        return _Transaction(self)


def open_client(hosts: str, security: Optional[ZkSecurity] = None, **kazoo_options) -> ZooKeeperClient:
    """A (not yet started) client on ``hosts`` with ``security``'s credentials,
    TLS and ACL policy, and any other kazoo options (handler, timeout, retry)."""
    security = security or ZkSecurity()
    client = ZooKeeperClient(hosts=hosts, security=security, **client_options(security), **kazoo_options)
    client.connect = hosts  # as given, for the diagnosis of a failed start
    return client


# Reconnecting to ZooKeeper for ever, backing off to at most this between rounds.
RECONNECT_MAX_DELAY_S = 2.0


def reconnecting_for_ever(handler) -> KazooRetry:
    """The connection retry of a process that must outlive any ZooKeeper
    outage (a server, the console): kazoo's default gives up after one
    failed round of reconnecting and closes the client for good."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_DELAY_S,
                      sleep_func=handler.sleep_func)


def start(client: KazooClient, timeout: float) -> None:
    """``client.start(timeout)``, and then one round trip: kazoo calls a
    session connected before its SASL exchange ends, so only an answered
    request proves the credentials. A refused credential raises
    :class:`ZooKeeperAuthError` at once instead of a time-out (kazoo stops
    trying after AUTH_FAILED, and ``start`` would only wait)."""
    security = getattr(client, "security", None)
    if security is not None and security.kerberos:
        check_kerberos_login(security, getattr(client, "connect", ""))
    deadline = time.monotonic() + timeout
    refused = []  # a fresh session is lost only when its credentials are refused
    changed = client.handler.event_object()  # wakes the wait for a session at once

    def watch(state) -> None:
        if state == KazooState.LOST and client.client_state != KeeperState.CLOSED:
            refused.append(state)
        changed.set()

    client.add_listener(watch)
    client.start_async()
    probe = None
    while True:
        if refused or client.client_state == KeeperState.AUTH_FAILED:
            _give_up(client, watch)
            raise _refusal(client)
        if probe is None and client.connected:
            probe = client.exists_async("/")
        if probe is not None:
            probe.wait(0.05)
            if probe.ready():
                try:
                    probe.get()
                    client.remove_listener(watch)
                    return
                except AuthFailedError:
                    _give_up(client, watch)
                    raise _refusal(client) from None
                except SessionClosedRequireSaslError:
                    _give_up(client, watch)
                    raise _unauthenticated(client) from None
                except ConnectionLoss:
                    probe = None
        else:
            changed.wait(max(0.0, min(0.05, deadline - time.monotonic())))
            changed.clear()
        if time.monotonic() >= deadline:
            _give_up(client, watch)
            reason = _tls_mismatch(client)
            if reason is not None:
                raise ZooKeeperTLSError(reason)
            raise client.handler.timeout_exception("Connection time-out")


def check_kerberos_login(security: ZkSecurity, hosts: str) -> None:
    """Log in to Kerberos and get a ticket for each ZooKeeper host now, as
    kazoo will at every connection: a missing principal, a wrong keytab or an
    unreachable KDC is named here, where kazoo would say only that SASL failed."""
    import kerberos

    for host in sorted({host for host, _ in collect_hosts(hosts)[0]}) if hosts else ():
        service = f"{KERBEROS_SERVICE}@{host}"
        context = None
        try:
            _, context = kerberos.authGSSClientInit(service, principal=security.zk_user)
            kerberos.authGSSClientStep(context, "")
        except kerberos.GSSError as exc:
            (major, _), (minor, _) = exc.args if len(exc.args) == 2 else ((str(exc), 0), ("", 0))
            source = (f"the keytab {security.zk_keytab} (does it hold the principal's key?)"
                      if security.zk_keytab is not None else "the ticket cache (run kinit, or give --zk-keytab)")
            raise ZooKeeperAuthError(f"no Kerberos ticket for ZooKeeper at {host} ({KERBEROS_SERVICE}/{host}) as "
                                     f"{security.zk_user} from {source}: {minor or major}") from None
        finally:
            if context is not None:
                kerberos.authGSSClientClean(context)


def _tls_mismatch(client: KazooClient) -> Optional[str]:
    """Why no session came, when TLS is the reason: a handshake that fails
    (another CA, a plaintext port), or a TLS port asked for in plaintext.
    kazoo retries such failures in the background until the time-out and
    says only that; one handshake here names the cause."""
    import socket
    import ssl

    security = getattr(client, "security", None)
    hosts = getattr(client, "connect", "")
    if security is None or not hosts:
        return None
    host, _, port = hosts.split("/", 1)[0].split(",")[0].rpartition(":")
    try:
        address = (host.strip("[]"), int(port))
    except ValueError:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    if security.tls:
        try:
            context.load_verify_locations(cafile=str(security.zk_ca_file))
        except (OSError, ssl.SSLError):
            return None  # open_client checked it: changed since
    else:
        context.verify_mode = ssl.CERT_NONE  # only: does the port speak TLS?
    try:
        with socket.create_connection(address, timeout=2) as raw:
            with context.wrap_socket(raw, server_hostname=address[0]):
                pass
    except ssl.SSLError as exc:
        if security.tls:
            return (f"no TLS with ZooKeeper at {host}:{port}: {exc.reason or exc} (does the port speak TLS, and "
                    f"did the CA in {security.zk_ca_file} sign its certificate?)")
        return None
    except OSError:
        return None
    if not security.tls:
        return (f"ZooKeeper at {host}:{port} speaks TLS only: give its CA with --zk-ca-file "
                f"(zookeeper.caFile for the Spark source)")
    return None


def _refusal(client: KazooClient) -> ZooKeeperAuthError:
    security = getattr(client, "security", None)
    if security is not None and security.kerberos:
        return ZooKeeperAuthError(f"ZooKeeper refused Kerberos principal {security.zk_user!r} (SASL GSSAPI): does "
                                  f"ZooKeeper's keytab hold the key the KDC gave its service principal "
                                  f"{KERBEROS_SERVICE}/<host>?")
    who = (f"{security.zk_auth} ({security.zk_sasl_mechanism}) user {security.zk_user!r}"
           if security is not None and security.zk_auth == "sasl" else "the credentials")
    return ZooKeeperAuthError(f"ZooKeeper refused {who}: wrong user or password?")


def _unauthenticated(client: KazooClient) -> ZooKeeperAuthError:
    """What ZooKeeper's enforce.auth (every session authenticates, with the
    schemes it names) means when it closes a session at its first request."""
    security = getattr(client, "security", None)
    if security is None or not security.authenticated:
        why = "this one has no credentials (give zkcoord's: --zk-auth, --zk-user, --zk-password-file)"
    else:
        why = (f"it takes no {security.zk_auth} credentials (its enforce.auth.schemes names those it takes: "
               f"--zk-auth)")
    return ZooKeeperAuthError(f"ZooKeeper closed the session: it requires every session to authenticate, and {why}")


def _give_up(client: KazooClient, watch) -> None:
    client.remove_listener(watch)
    client.stop()  # the caller closes it, as after any failed start


def check_ownership(client: KazooClient, security: ZkSecurity, path: str) -> Optional[ZnodeStat]:
    """Refuse to go on when ``path`` exists and is not zkcoord's alone: when
    it belongs to another principal (with digest, ZooKeeper accepts any
    password and refuses only the writes: a mistyped password shows here,
    named, rather than as NoAuth later), :class:`ZooKeeperAuthError`; when
    another principal may change it too (``world:anyone`` above all),
    :class:`ZooKeeperNodeOpen`. Returns the stat of the node checked, None
    when it does not exist or zkcoord has no credentials (every node is open then)."""
    if not security.authenticated:
        return None
    ours = security.owner_id()
    as_whom = (f"not to {_named(ours)}, as which zkcoord authenticates ({security.zk_auth} user "
               f"{security.zk_user!r}): wrong user or password?")
    try:
        acls, stat = client.get_acls(path)
    except NoNodeError:
        return None
    except NoAuthError:  # reading ACLs takes READ or ADMIN: not even those
        raise ZooKeeperAuthError(f"{path} in ZooKeeper belongs to another principal, {as_whom}") from None
    ours_writes = any(acl.id == ours and acl.perms & Permissions.WRITE for acl in acls)
    others = [acl for acl in acls if acl.id != ours and acl.perms & CHANGES]
    if others and (ours_writes or any(acl.id == ANYONE_ID_UNSAFE for acl in others)):
        raise ZooKeeperNodeOpen(_open_node(path, others, ours))
    if not ours_writes:
        writers = ", ".join(_named(acl.id) for acl in acls if acl.perms & Permissions.WRITE) or "nobody"
        raise ZooKeeperAuthError(f"{path} in ZooKeeper belongs to another principal (writable by {writers}), "
                                 f"{as_whom}")
    return stat


def check_adopted_nodes(client: KazooClient, security: ZkSecurity) -> None:
    """:func:`check_ownership` of every node in :data:`ADOPTED_NODES`: what a
    server or broker checks before it uses any. Below a node only zkcoord may
    change, only zkcoord made the children; the root's check keeps anyone
    from planting a top-level node later."""
    for path in ADOPTED_NODES:
        check_ownership(client, security, path)


def _named(who: Id) -> str:
    return f"{who.scheme}:{who.id}"


def _open_node(path: str, others: list[ACL], ours: Id) -> str:
    granted = "; ".join(f"{_named(acl.id)} may "
                        + ", ".join(name for perm, name in PERMISSION_NAMES if acl.perms & perm) for acl in others)
    if path == ROOT:
        return (f"the root of zkcoord's tree in ZooKeeper (its chroot, or / without one) is not {_named(ours)}'s "
                f"alone ({granted}): anyone so allowed could plant a node zkcoord would take as its own; refused. "
                f"Give zkcoord a chroot of its own (HOST:PORT/zkcoord, which zkcoord makes as its own), or "
                f"close the root to others with `zkcoord zk secure`")
    return (f"{path} in ZooKeeper is not {_named(ours)}'s alone ({granted}): what it holds may be anyone's, so "
            f"zkcoord will not use it, and leaves it as it is. If zkcoord wrote it before it had credentials, "
            f"`zkcoord zk secure` makes it zkcoord's; otherwise find out who made it, and delete it")


def refused_by_acl(security: ZkSecurity, connect: str) -> str:
    """What to say when ZooKeeper refused an operation for want of permission
    (kazoo's NoAuthError names neither the node nor the principal)."""
    if security.authenticated:
        who = f"{security.zk_auth} user {security.zk_user!r}"
        hint = "the nodes belong to another principal (another user, or a wrong digest password)"
    else:
        who = "a client without credentials"
        hint = ("zkcoord's nodes are written only by its principal, and read only by it unless its servers open "
                "them (--zk-kafka-readable, --zk-state-readable): give zkcoord's credentials (--zk-auth, --zk-user, "
                "--zk-password-file)")
    return f"ZooKeeper at {connect} refused an operation to {who}, which the node's ACL does not allow: {hint}"


def walk(client: KazooClient, path: str = "/") -> Iterator[str]:
    """Every node from ``path`` down, parents first, but ZooKeeper's own subtree."""
    pending = [path]
    while pending:
        node = pending.pop()
        if node == ZOOKEEPER_ROOT or node.startswith(ZOOKEEPER_ROOT + "/"):
            continue
        yield node
        try:
            children = client.get_children(node)
        except NoNodeError:
            continue
        pending.extend(sorted((node.rstrip("/") + "/" + child for child in children), reverse=True))


def secure_tree(client: ZooKeeperClient, root: str = ROOT) -> int:
    """Set the policy's ACL on every node from ``root`` down (as Kafka's
    zookeeper-security-migration does); returns how many nodes were set.
    From the root, the root too (the chroot's node, or ZooKeeper's root):
    zkcoord refuses a root others may create or delete in."""
    count = 0
    for path in walk(client, root):
        try:
            client.set_acls(path, client.acl_for(path))
        except NoNodeError:
            continue  # deleted while we walked
        except NoAuthError:
            who = client.security.owner_id()
            raise ZooKeeperAuthError(f"ZooKeeper refused to set the ACLs of {path}: {who.scheme}:{who.id} may not "
                                     f"administer it (secured before, by another principal?)") from None
        count += 1
    return count


__all__ = ["ADOPTED_NODES", "ZooKeeperClient", "check_adopted_nodes", "check_kerberos_login", "check_ownership",
           "open_client", "refused_by_acl", "secure_tree", "start", "walk"]
