"""How zkcoord talks to a secured ZooKeeper: its credentials, TLS, and the ACLs its nodes carry.

Every part of zkcoord that opens a ZooKeeper session (servers, brokers, admin
commands, the Spark source, the demo and the drills) builds its client with
:func:`open_client` from one :class:`ZkSecurity`, so a credential, a CA file
or an ACL policy means the same everywhere. The default (no auth, no TLS)
opens the same plain client as before and writes nodes open to all, as
ZooKeeper does.

With credentials, every node zkcoord creates is writable only by its
principal, and readable by it alone unless the operator opens Kafka's nodes
(``/consumers``, ``/brokers``, ``/cluster``, ``/config``...) to the lag
monitors that read them, or zkcoord's own state (``/zkcoord``) to anyone; the
root (the chroot, or ``/``) lets anyone list it and only zkcoord's principal
create or delete in it (:func:`acl_policy` is the policy; ``zkcoord zk secure``
applies it to a tree written before).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path
from typing import Callable, Optional

from kazoo.security import ACL, ANYONE_ID_UNSAFE, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl_credential

from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.security.secrets import check_private
from zkcoord.settings import check, setting

AUTH_SCHEMES = ("none", "digest", "sasl")
# The SASL mechanisms both pure-sasl and ZooKeeper's server speak.
SASL_MECHANISMS = ("DIGEST-MD5", "GSSAPI")

# The top-level nodes Kafka's tools read (a ZooKeeper-mode cluster's layout):
# they stay world-readable unless the operator says otherwise.
KAFKA_ROOTS = ("/consumers", "/brokers", "/cluster", "/config", "/admin", "/controller", "/controller_epoch",
               "/isr_change_notification", "/log_dir_event_notification", "/latest_producer_id_block",
               "/feature")
# Users' SCRAM credentials (salt, StoredKey, ServerKey): never world-readable,
# whatever the policy says; anyone who reads them can guess passwords offline
# and pose as a broker to a SCRAM client.
SECRET_ROOTS = ("/config/users",)
# ZooKeeper's own subtree (quotas, config): never ours to change.
ZOOKEEPER_ROOT = "/zookeeper"
# The root as a client sees it: the chroot's node, or ZooKeeper's own root.
ROOT = "/"


class ZooKeeperAuthError(ZkcoordError):
    """ZooKeeper refused zkcoord's credentials, or the nodes are another principal's."""


class ZooKeeperNodeOpen(ZooKeeperAuthError):
    """A node zkcoord would use may be changed by a principal other than
    zkcoord's own: what it holds, or what is planted under it, may be anyone's."""


class ZooKeeperTLSError(ZkcoordError):
    """No session with ZooKeeper because TLS did not agree: another CA, or TLS on one side only."""

    retriable = True  # a ZooKeeper restarted with the right certificate would answer


def _check_user(value: Optional[str]) -> None:
    if value is not None and (not value or ":" in value):
        raise ConfigError(f"zk_user must be a non-empty name without ':', not {value!r}")


@dataclasses.dataclass(frozen=True)
class ZkSecurity:
    """zkcoord's ZooKeeper credentials, TLS files and ACL policy."""

    zk_auth: str = setting("none", "how to authenticate to ZooKeeper: none, digest (ZooKeeper's user:password "
                                   "scheme) or sasl", choices=AUTH_SCHEMES)
    zk_user: Optional[str] = setting(None, "the user (digest) or SASL principal zkcoord authenticates to "
                                           "ZooKeeper as, and to which its nodes belong", validate=_check_user)
    zk_password_file: Optional[Path] = setting(None, "file whose first line is the ZooKeeper password")
    zk_password_env: Optional[str] = setting(None, "environment variable holding the ZooKeeper password "
                                                   "(instead of --zk-password-file)", non_empty=True)
    zk_sasl_mechanism: str = setting("DIGEST-MD5", "SASL mechanism: DIGEST-MD5 (a password) or GSSAPI "
                                                   "(Kerberos: zk_user is the principal, no password)",
                                     choices=SASL_MECHANISMS)
    zk_keytab: Optional[Path] = setting(None, "GSSAPI: keytab to log in as zk_user from (tickets renewed from "
                                              "it, kept in memory); without it, the ticket cache kinit filled "
                                              "($KRB5CCNAME)")
    zk_krb5_conf: Optional[Path] = setting(None, "GSSAPI: the Kerberos configuration naming zk_user's realm "
                                                 "and KDC (default: $KRB5_CONFIG, else /etc/krb5.conf)")
    zk_ca_file: Optional[Path] = setting(None, "CA certificates (PEM) that sign ZooKeeper's TLS certificate: "
                                               "giving it connects over TLS (to ZooKeeper's secureClientPort)")
    zk_cert_file: Optional[Path] = setting(None, "client certificate (PEM) for ZooKeeper's TLS port")
    zk_key_file: Optional[Path] = setting(None, "the client certificate's private key (PEM, unencrypted)")
    # Closed by default: these nodes hold every group's offsets and owners,
    # which the broker describes only to principals with Describe on the group.
    zk_kafka_readable: bool = setting(False, "let every ZooKeeper client read the nodes Kafka's tools read "
                                             "(/consumers, /brokers, /cluster, /config but users' credentials) "
                                             "when zkcoord authenticates: for lag monitors that read ZooKeeper "
                                             "(Burrow...), which then see every group's offsets and owners")
    zk_state_readable: bool = setting(False, "let anyone read zkcoord's own nodes (/zkcoord) when zkcoord "
                                             "authenticates")

    def __post_init__(self) -> None:
        check(self)
        given = [name for name in ("zk_user", "zk_password_file", "zk_password_env")
                 if getattr(self, name) is not None]
        if self.zk_auth == "none":
            if given:
                raise ConfigError(f"{', '.join(given)} given but zk_auth is none: say how to authenticate "
                                  f"(digest or sasl)")
        else:
            if self.zk_user is None:
                raise ConfigError(f"zk_auth {self.zk_auth} needs zk_user")
            kerberos = self.kerberos
            sources = [n for n in ("zk_password_file", "zk_password_env") if getattr(self, n) is not None]
            if kerberos and sources:
                raise ConfigError("GSSAPI takes no password (it uses the Kerberos ticket): drop "
                                  + " and ".join(sources))
            if not kerberos and len(sources) != 1:
                raise ConfigError(f"zk_auth {self.zk_auth} needs the password from exactly one of "
                                  f"zk_password_file and zk_password_env, not {len(sources)}")
        if not self.kerberos:
            misplaced = [n for n in ("zk_keytab", "zk_krb5_conf") if getattr(self, n) is not None]
            if misplaced:
                raise ConfigError(f"{' and '.join(misplaced)} only go with Kerberos (zk_auth sasl, "
                                  f"zk_sasl_mechanism GSSAPI), not zk_auth {self.zk_auth}")
        if (self.zk_cert_file is None) != (self.zk_key_file is None):
            raise ConfigError("zk_cert_file and zk_key_file go together: give both or neither")
        if self.zk_cert_file is not None and self.zk_ca_file is None:
            raise ConfigError("zk_cert_file is for TLS, which needs zk_ca_file to verify ZooKeeper")

    @property
    def tls(self) -> bool:
        return self.zk_ca_file is not None

    @property
    def authenticated(self) -> bool:
        return self.zk_auth != "none"

    @property
    def kerberos(self) -> bool:
        return self.zk_auth == "sasl" and self.zk_sasl_mechanism == "GSSAPI"

    def password(self) -> str:
        """The password, read now from its file or environment variable."""
        if self.zk_password_file is not None:
            check_private(self.zk_password_file, "--zk-password-file")
            try:
                text = Path(self.zk_password_file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read the ZooKeeper password file {self.zk_password_file}: "
                                  f"{getattr(exc, 'strerror', None) or exc}") from None
            lines = text.splitlines()
            password = lines[0] if lines else ""
            where = f"the ZooKeeper password file {self.zk_password_file}"
        elif self.zk_password_env is not None:
            password = os.environ.get(self.zk_password_env, "")
            where = f"the environment variable {self.zk_password_env} (the ZooKeeper password)"
        else:
            raise ConfigError(f"zk_auth {self.zk_auth} with {self.zk_sasl_mechanism} has no password")
        if not password:
            raise ConfigError(f"{where} is empty or unset")
        return password

    def owner_id(self) -> Optional[Id]:
        """The ACL id of zkcoord's principal; None without authentication."""
        if self.zk_auth == "digest":
            return Id("digest", make_digest_acl_credential(self.zk_user, self.password()))
        if self.zk_auth == "sasl":
            return Id("sasl", self.zk_user)
        return None


def command_line(security: ZkSecurity) -> list[str]:
    """The options that give a zkcoord command ``security`` (those that differ
    from the defaults): for processes started with the same settings."""
    from zkcoord.settings import default_of, fields, flag_of

    args: list[str] = []
    for f, spec, _ in fields(ZkSecurity):
        value = getattr(security, f.name)
        if value == default_of(f):
            continue
        flag = flag_of(f, spec)
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        else:
            args += [flag, str(value)]
    return args


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def acl_policy(security: ZkSecurity) -> Callable[[str], list[ACL]]:
    """The ACL each path gets (paths as the client sees them, below any chroot):
    everything to zkcoord's principal, and reading to anyone where the policy
    opens it. Without authentication: open to all, as ZooKeeper's default."""
    if not security.authenticated:
        return lambda path: list(OPEN_ACL_UNSAFE)
    owner = ACL(Permissions.ALL, security.owner_id())
    world_read = ACL(Permissions.READ, ANYONE_ID_UNSAFE)

    def acl_for(path: str) -> list[ACL]:
        if path == ROOT:
            # Only zkcoord creates or deletes top-level nodes, so nobody plants
            # one zkcoord would adopt; a listing of them tells no secret.
            return [owner, world_read]
        if any(_under(path, root) for root in SECRET_ROOTS):
            return [owner]
        kafka = any(_under(path, root) for root in KAFKA_ROOTS)
        readable = security.zk_kafka_readable if kafka else security.zk_state_readable
        return [owner, world_read] if readable else [owner]

    return acl_for


def _check_tls_files(security: ZkSecurity) -> None:
    """Load the CA and client certificate once here, so a bad file is a clear
    error now rather than a connection loop failing in the background."""
    import ssl  # not at import: gevent patches ssl before a server loads it

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=str(security.zk_ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot use the ZooKeeper CA file {security.zk_ca_file}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    if security.zk_cert_file is not None:
        check_private(security.zk_key_file, "--zk-key-file")
        try:
            context.load_cert_chain(str(security.zk_cert_file), str(security.zk_key_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot use the ZooKeeper client certificate {security.zk_cert_file} with key "
                              f"{security.zk_key_file}: {getattr(exc, 'strerror', None) or exc}") from None


# The Kerberos environment this process set, by variable: the GSSAPI library
# reads it process-wide, so a process has one Kerberos identity for ZooKeeper.
_kerberos_environment: dict[str, str] = {}
# Tickets got from a keytab stay in this process, away from the user's own cache.
KEYTAB_CCACHE = "MEMORY:zkcoord-zookeeper"


def _readable(path: Path, what: str) -> str:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    return str(Path(path).resolve())


def _use_kerberos(security: ZkSecurity) -> None:
    """Point the GSSAPI library at ``security``'s Kerberos configuration and
    keytab: it logs in from the keytab itself, again whenever the tickets expire."""
    try:
        importlib.import_module("kerberos")  # pure-sasl's binding of MIT Kerberos
    except ImportError:
        raise ConfigError("SASL GSSAPI needs the Python package 'kerberos' (pip install 'zkcoord[kerberos]'; it "
                          "builds against MIT Kerberos, Debian's libkrb5-dev)") from None
    wanted = {}
    if security.zk_krb5_conf is not None:
        wanted["KRB5_CONFIG"] = _readable(security.zk_krb5_conf, "the Kerberos configuration")
    if security.zk_keytab is not None:
        check_private(security.zk_keytab, "--zk-keytab")  # a keytab logs in as its principal, as a password does
        wanted["KRB5_CLIENT_KTNAME"] = "FILE:" + _readable(security.zk_keytab, "the keytab")
        wanted["KRB5CCNAME"] = KEYTAB_CCACHE
    for name, value in wanted.items():
        if _kerberos_environment.get(name, value) != value:
            raise ConfigError(f"one Kerberos login per process: {name} is {_kerberos_environment[name]} "
                              f"already, not {value}")
    os.environ.update(wanted)
    _kerberos_environment.update(wanted)


def client_options(security: ZkSecurity) -> dict:
    """kazoo's keyword arguments for ``security`` (its files are read and checked now)."""
    options: dict = {"acl_for": acl_policy(security)}
    if security.zk_auth == "digest":
        options["auth_data"] = [("digest", f"{security.zk_user}:{security.password()}")]
    elif security.zk_auth == "sasl":
        sasl = {"mechanism": security.zk_sasl_mechanism}
        if security.kerberos:
            _use_kerberos(security)
            sasl["principal"] = security.zk_user  # pure-sasl's name for the Kerberos client principal
        else:
            sasl.update(username=security.zk_user, password=security.password())
        options["sasl_options"] = sasl
    if security.tls:
        _check_tls_files(security)
        # The server's certificate must name the host connected to, as every
        # TLS client of ours checks: another certificate of the same CA is not ZooKeeper.
        options.update(use_ssl=True, verify_certs=True, check_hostname=True, ca=str(security.zk_ca_file))
        if security.zk_cert_file is not None:
            options.update(certfile=str(security.zk_cert_file), keyfile=str(security.zk_key_file))
    return options


__all__ = ["AUTH_SCHEMES", "KAFKA_ROOTS", "ROOT", "ZkSecurity", "ZooKeeperAuthError", "ZooKeeperNodeOpen",
           "ZooKeeperTLSError", "acl_policy", "client_options", "command_line"]
