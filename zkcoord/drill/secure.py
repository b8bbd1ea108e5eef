"""The drill's secured mode (``zkcoord drill --secure``): every layer of
zkcoord's security on at once, so that the faults are drilled as a secured
deployment meets them.

- ZooKeeper with digest authentication and TLS on its client and quorum
  ports (as ``zkcoord zk up --auth digest --tls`` brings it up); every node
  zkcoord writes carries its ACLs.
- Servers whose coordinator protocol and broker speak TLS only, that require
  authentication, whose authorizer is on, with a bridge credential of their own.
- SCRAM users, created with the users library: one for the thin members
  (RegisterConsumer version 3 over TLS), one for the stock members (SASL_SSL),
  one for the producer; ACLs grant the members Read on their group and topic
  and the producer Write on the topic, and nothing more.

Certificates and passwords are generated into ``secrets/`` of the drill's
directory, readable by its owner only, and removed when the drill ends.
"""

from __future__ import annotations

import dataclasses
import secrets
import shutil
from pathlib import Path

from zkcoord.security import acl, certs
from zkcoord.security.config import TlsConfig, librdkafka_settings
from zkcoord.security.secrets import write_private
from zkcoord.zk import security_store as store

SECRETS_DIR = "secrets"
# The ZooKeeper ensemble's security, as `zkcoord zk up` takes it.
ENSEMBLE_SECURITY = {"auth": "digest", "tls": True}

BRIDGE_USER = "broker"  # the servers' own credential, a super user
THIN_USER = "drill-thin"
STOCK_USER = "drill-stock"
PRODUCER_USER = "drill-producer"
USERS = (BRIDGE_USER, THIN_USER, STOCK_USER, PRODUCER_USER)


@dataclasses.dataclass(frozen=True)
class DrillSecrets:
    """The certificates and passwords of a secured drill, and what each
    process is told of them."""

    directory: Path
    server: certs.CertFiles

    @classmethod
    def create(cls, drill_directory: Path) -> "DrillSecrets":
        """A CA, the servers' certificate and a password per user, in a new
        ``secrets/`` under ``drill_directory``."""
        directory = Path(drill_directory) / SECRETS_DIR
        directory.mkdir(mode=0o700)
        ca = certs.make_ca(directory, common_name="zkcoord drill CA")
        made = cls(directory, certs.issue(ca, directory, "server"))
        for user in USERS:
            path = made.password_file(user)
            write_private(path, secrets.token_urlsafe(18) + "\n")
        return made

    def password_file(self, user: str) -> Path:
        return self.directory / f"{user}.password"

    def password(self, user: str) -> str:
        return self.password_file(user).read_text().strip()

    @property
    def client_tls(self) -> TlsConfig:
        return TlsConfig(ca=str(self.server.ca))

    def server_args(self) -> tuple[str, ...]:
        """A server's options: TLS on both listeners, authentication required,
        the authorizer on, and its own credential."""
        return ("--tls-cert", str(self.server.cert), "--tls-key", str(self.server.key),
                "--tls-ca", str(self.server.ca), "--authentication-required", "--authorizer", "on",
                "--super-user", f"User:{BRIDGE_USER}", "--bridge-user", BRIDGE_USER,
                "--bridge-password-file", str(self.password_file(BRIDGE_USER)))

    def member_args(self, stock: bool) -> tuple[str, ...]:
        """A `zkcoord consume` member's options: TLS and its user's credential."""
        user = STOCK_USER if stock else THIN_USER
        return ("--tls-ca", str(self.server.ca), "--user", user, "--password-file", str(self.password_file(user)))

    def producer_settings(self) -> dict[str, str]:
        """The producer's librdkafka properties: SASL_SSL as the producer's user."""
        return librdkafka_settings(self.client_tls, PRODUCER_USER, self.password(PRODUCER_USER))

    def create_users(self, zk) -> None:
        for user in USERS:
            store.set_user(zk, user, self.password(user))

    def grant(self, zk, group: str, topic: str) -> None:
        """What the drill's clients need, and no more: the members Read on the
        group and the topic, the producer Write on the topic."""
        members = [acl.AclEntry(f"User:{user}", acl.ALLOW, acl.READ) for user in (THIN_USER, STOCK_USER)]
        store.add_acls(zk, acl.group(group), members)
        store.add_acls(zk, acl.topic(topic), [*members, acl.AclEntry(f"User:{PRODUCER_USER}", acl.ALLOW,
                                                                     acl.WRITE)])

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
