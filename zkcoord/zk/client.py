"""The one way zkcoord opens a ZooKeeper client: credentials, TLS and per-path ACLs from a
:class:`~zkcoord.zk.security.ZkSecurity`, and the start, ownership check and ACL migration that go with it."""

from __future__ import annotations

import time
from typing import Callable, Iterator, Optional

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import AuthFailedError, ConnectionLoss, NoAuthError, NoNodeError
from kazoo.hosts import collect_hosts
from kazoo.protocol.states import KazooState, KeeperState
from kazoo.security import ACL, ANYONE_ID_UNSAFE, Permissions

from zkcoord.zk.kerberos import SERVICE as KERBEROS_SERVICE
from zkcoord.zk.security import ZOOKEEPER_ROOT, ZkSecurity, ZooKeeperAuthError, ZooKeeperTLSError, client_options


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


def _give_up(client: KazooClient, watch) -> None:
    client.remove_listener(watch)
    client.stop()  # the caller closes it, as after any failed start


def check_ownership(client: KazooClient, security: ZkSecurity, path: str) -> None:
    """Refuse to go on when ``path`` exists and belongs to another principal
    (with digest, ZooKeeper accepts any password and refuses only the writes:
    a mistyped password shows here, named, rather than as NoAuth later)."""
    if not security.authenticated:
        return
    ours = security.owner_id()
    as_whom = (f"not to {ours.scheme}:{ours.id}, as which zkcoord authenticates ({security.zk_auth} user "
               f"{security.zk_user!r}): wrong user or password?")
    try:
        acls, _ = client.get_acls(path)
    except NoNodeError:
        return
    except NoAuthError:  # reading ACLs takes READ or ADMIN: not even those
        raise ZooKeeperAuthError(f"{path} in ZooKeeper belongs to another principal, {as_whom}") from None
    writers = [acl.id for acl in acls if acl.perms & Permissions.WRITE]
    if any(w == ours or w == ANYONE_ID_UNSAFE for w in writers):
        return
    names = ", ".join(f"{w.scheme}:{w.id}" for w in writers) or "nobody"
    raise ZooKeeperAuthError(f"{path} in ZooKeeper belongs to another principal (writable by {names}), {as_whom}")


def refused_by_acl(security: ZkSecurity, connect: str) -> str:
    """What to say when ZooKeeper refused an operation for want of permission
    (kazoo's NoAuthError names neither the node nor the principal)."""
    if security.authenticated:
        who = f"{security.zk_auth} user {security.zk_user!r}"
        hint = "the nodes belong to another principal (another user, or a wrong digest password)"
    else:
        who = "a client without credentials"
        hint = ("zkcoord's nodes are written only by its principal, and those under /zkcoord are read only by it: "
                "give zkcoord's credentials (--zk-auth, --zk-user, --zk-password-file)")
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


def secure_tree(client: ZooKeeperClient, root: str = "/") -> int:
    """Set the policy's ACL on every node from ``root`` down (as Kafka's
    zookeeper-security-migration does); returns how many nodes were set."""
    count = 0
    for path in walk(client, root):
        if path == "/":
            continue  # the root belongs to whoever runs ZooKeeper (or is the chroot's)
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


__all__ = ["ZooKeeperClient", "check_kerberos_login", "check_ownership", "open_client", "refused_by_acl", "secure_tree", "start", "walk"]
