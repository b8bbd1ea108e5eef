"""A local Kerberos realm: an MIT KDC on 127.0.0.1, its principals and their keytabs.

Everything lives in one directory: ``krb5.conf`` (what clients and ZooKeeper
read to find the KDC), ``kdc.conf``, the database, the KDC's log and pid, and
``keytabs/``. Nothing under /etc is read or written: every Kerberos program is
run with ``KRB5_CONFIG`` and ``KRB5_KDC_PROFILE`` naming the generated files.
The KDC runs detached, like the ensemble's nodes, so ``zkcoord zk up`` can
return while it serves; :meth:`LocalRealm.load` finds it again from the directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

from zkcoord.errors import ConfigError, EnsembleError

DEFAULT_REALM = "ZKCOORD.TEST"
# ZooKeeper's service principal is zookeeper/<host>: kazoo asks for a ticket
# to the service on each host as the connect string names it.
SERVICE = "zookeeper"
LOCAL_HOST = "127.0.0.1"
# Debian's krb5-kdc and krb5-admin-server put their programs here.
PROGRAMS = {"krb5kdc": "krb5-kdc", "kdb5_util": "krb5-kdc", "kadmin.local": "krb5-admin-server"}
SBIN = ("/usr/sbin", "/usr/local/sbin")


def _program(name: str) -> str:
    found = shutil.which(name) or next((f"{d}/{name}" for d in SBIN if os.access(f"{d}/{name}", os.X_OK)), None)
    if found is None:
        raise EnsembleError(f"no `{name}`: install MIT Kerberos's KDC (Debian: apt-get install {PROGRAMS[name]})")
    return found


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind((LOCAL_HOST, 0))
        return probe.getsockname()[1]


class LocalRealm:
    """A Kerberos realm with its KDC, rooted at ``directory``."""

    def __init__(self, directory: Path, realm: str = DEFAULT_REALM, port: Optional[int] = None):
        self.directory = Path(directory).resolve()
        self.realm = realm
        self.port = port

    @property
    def krb5_conf(self) -> Path:
        return self.directory / "krb5.conf"

    @property
    def kdc_conf(self) -> Path:
        return self.directory / "kdc.conf"

    @property
    def log_path(self) -> Path:
        return self.directory / "kdc.log"

    @property
    def pid_path(self) -> Path:
        return self.directory / "kdc.pid"

    def env(self) -> dict[str, str]:
        """The environment every Kerberos program of this realm runs with."""
        return {**os.environ, "KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)}

    def principal(self, name: str) -> str:
        return f"{name}@{self.realm}"

    @staticmethod
    def service_name(host: str = LOCAL_HOST) -> str:
        """ZooKeeper's service principal on ``host``, without the realm."""
        return f"{SERVICE}/{host}"

    def keytab(self, name: str) -> Path:
        """Where the keytab of principal ``name`` (without the realm) is kept."""
        return self.directory / "keytabs" / (name.replace("/", "_") + ".keytab")

    # -- creation ------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, realm: str = DEFAULT_REALM) -> "LocalRealm":
        """Lay out a new realm with an empty database (the KDC is not started)."""
        directory = Path(directory)
        if (directory / "krb5.conf").exists():
            raise EnsembleError(f"{directory} already holds a Kerberos realm")
        self = cls(directory, realm, _free_port())
        (self.directory / "keytabs").mkdir(parents=True, exist_ok=True)
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f"  default_realm = {realm}\n"
            "  dns_lookup_realm = false\n"
            "  dns_lookup_kdc = false\n"
            # Service names are taken as written (zookeeper/127.0.0.1), as
            # ZooKeeper's Java side takes them: no DNS says otherwise.
            "  dns_canonicalize_hostname = false\n"
            "  rdns = false\n"
            "  udp_preference_limit = 1\n"  # TCP only: the KDC listens on one TCP port
            "[realms]\n"
            f"  {realm} = {{\n    kdc = {LOCAL_HOST}:{self.port}\n  }}\n"
            "[domain_realm]\n"
            f"  {LOCAL_HOST} = {realm}\n"
        )
        self.kdc_conf.write_text(
            "[kdcdefaults]\n"
            f"  kdc_listen = {LOCAL_HOST}:{self.port}\n"
            f"  kdc_tcp_listen = {LOCAL_HOST}:{self.port}\n"
            "[realms]\n"
            f"  {realm} = {{\n"
            f"    database_name = {self.directory / 'principal'}\n"
            f"    key_stash_file = {self.directory / 'stash'}\n"
            f"    acl_file = {self.directory / 'kadm5.acl'}\n"
            "    max_life = 10h 0m 0s\n"
            "    max_renewable_life = 7d 0h 0m 0s\n"
            "  }\n"
            "[logging]\n"
            f"  kdc = FILE:{self.log_path}\n"
        )
        (self.directory / "kadm5.acl").write_text("")
        # The master password only encrypts the database; the stash file keeps it.
        self._run(_program("kdb5_util"), "create", "-s", "-r", realm, "-P", secrets.token_urlsafe(24))
        return self

    @classmethod
    def load(cls, directory: Path) -> "LocalRealm":
        directory = Path(directory)
        try:
            conf = (directory / "kdc.conf").read_text()
        except OSError as exc:
            raise EnsembleError(f"no Kerberos realm in {directory}: {exc.strerror}") from None
        realm = conf.split("[realms]", 1)[1].split("=", 1)[0].strip()
        port = int(conf.split("kdc_tcp_listen = ", 1)[1].split("\n", 1)[0].rsplit(":", 1)[1])
        return cls(directory, realm, port)

    def _run(self, *command: str) -> str:
        done = subprocess.run(command, env=self.env(), capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise EnsembleError(f"{Path(command[0]).name} {command[1] if len(command) > 1 else ''} failed "
                                f"in {self.directory}: {(done.stderr or done.stdout).strip()}")
        return done.stdout

    def add_principal(self, name: str) -> Path:
        """Create principal ``name`` (e.g. ``zkcoord`` or ``zookeeper/127.0.0.1``)
        with a random key, written to its own keytab; returns the keytab."""
        if not name or any(c in name for c in " \"'@\\"):
            raise ConfigError(f"a principal name here is letters, digits and '/', without the realm: not {name!r}")
        keytab = self.keytab(name)
        kadmin = _program("kadmin.local")
        self._run(kadmin, "-r", self.realm, "-q", f"addprinc -randkey {self.principal(name)}")
        self._run(kadmin, "-r", self.realm, "-q", f"ktadd -k {keytab} {self.principal(name)}")
        os.chmod(keytab, 0o600)
        return keytab

    def remove_principal(self, name: str) -> None:
        """Delete principal ``name`` from the realm (its keytab stays, now useless)."""
        self._run(_program("kadmin.local"), "-r", self.realm, "-q", f"delprinc -force {self.principal(name)}")

    # -- the KDC -----------------------------------------------------------------------

    def pid(self) -> Optional[int]:
        """The running KDC's pid, or None."""
        try:
            pid = int(self.pid_path.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if b"krb5kdc" in cmdline and str(self.pid_path).encode() in cmdline else None

    def start(self, timeout: float = 30.0) -> None:
        """Start the KDC (no-op when it runs) and wait until it accepts connections."""
        if self.pid() is None:
            with open(self.log_path, "ab") as log:
                subprocess.Popen([_program("krb5kdc"), "-n", "-r", self.realm, "-P", str(self.pid_path)],
                                 env=self.env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # outlives `zkcoord zk up`, like the nodes
        deadline = time.monotonic() + timeout
        while not self._answers():
            if time.monotonic() > deadline:
                raise EnsembleError(f"the KDC of {self.realm} did not listen on {LOCAL_HOST}:{self.port} within "
                                    f"{timeout:.0f}s; see {self.log_path}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        import socket

        if self.pid() is None:
            return False
        try:
            socket.create_connection((LOCAL_HOST, self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def stop(self, timeout: float = 10.0) -> None:
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.pid() is not None:
            try:
                os.waitpid(pid, os.WNOHANG)  # our child when this process started it
            except ChildProcessError:
                pass
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + timeout
            time.sleep(0.02)
        try:
            os.waitpid(pid, os.WNOHANG)  # a zombie has left /proc's command line empty: reap it
        except ChildProcessError:
            pass


__all__ = ["DEFAULT_REALM", "LocalRealm", "SERVICE"]
