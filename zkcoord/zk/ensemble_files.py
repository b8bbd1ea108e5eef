"""The files a local ensemble's nodes run from: each node's zoo.cfg and
private directories, its users' credentials (passwords, or a Kerberos realm
of its own with a keytab per user), its TLS certificates and the JAAS file
that make its nodes require them; and the client settings
(:class:`~zkcoord.zk.security.ZkSecurity`) that meet them.

A part of :class:`~zkcoord.zk.ensemble.LocalEnsemble`, whose directory and
settings it reads.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from zkcoord.errors import ConfigError
from zkcoord.filemodes import private_directory
from zkcoord.zk.kerberos import LocalRealm
from zkcoord.zk.probes import ELECTION_PORT_OFFSET, QUORUM_PORT_OFFSET
from zkcoord.zk.security import ZkSecurity

if TYPE_CHECKING:  # ssl is loaded only when TLS is used: gevent patches it first in servers
    import ssl


# The four-letter words a node answers: those zkcoord's own checks send, srvr
# (a node's mode; the server's version, before multiRead is used) and conf (the
# node's data directory, which tells it from another server on its port). The
# others show strangers the sessions and their ephemeral nodes (dump, cons),
# the environment (envi), or reset the statistics (srst).
FOUR_LETTER_WORDS = ("srvr", "conf")
# What a node holds, as a warning about an open directory names it.
NODE_DATA = "a ZooKeeper node's snapshots and transaction log (every node, users' SCRAM credentials among them)"


class EnsembleFiles:
    """A local ensemble's configuration, credentials and certificates, written before its nodes start."""

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
