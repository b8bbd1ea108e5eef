"""KafkaJS (npm ``kafkajs``) as group members and as an admin client, for
the tests: its consumers run by the driver ``node/kafkajs-driver/members.js``
(:class:`KafkaJsMembers`, read as every driver's events are:
driven_members.py), its admin calls by ``admin.js`` (:func:`admin_call`).

KafkaJS is pinned by the driver's ``package-lock.json``. ``scripts/install.sh
test`` runs this module, which has npm install exactly that (``npm ci``,
from the npm registry, no install scripts run) into
``~/.cache/zkcoord/kafkajs/<digest of package.json and the lock>/``
(``$XDG_CACHE_HOME``), marked installed last; the drivers run from the
source tree with that ``node_modules`` on ``NODE_PATH``. A changed lock is
another digest, so a stale install is never used; nothing is fetched on
first use: a missing install is a :class:`KafkaJsUnavailable` saying what
to run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Mapping, Optional

from zkcoord.caches import user_cache
from zkcoord.testing.driven_members import DrivenMember, DrivenMembers
from zkcoord.testing.process import ClusterError

DRIVER = Path(__file__).resolve().parents[2] / "node" / "kafkajs-driver"
PROJECT_FILES = ("package.json", "package-lock.json")
INSTALLED_MARK = "installed"
INSTALL_HINT = "run scripts/install.sh test"
NPM_TIMEOUT_S = 300.0
ADMIN_TIMEOUT_S = 60.0


class KafkaJsUnavailable(ClusterError):
    """KafkaJS cannot run here: no Node.js, or KafkaJS is not installed (``scripts/install.sh test``)."""


class KafkaJsCallFailed(ClusterError):
    """A KafkaJS admin call failed; ``error`` is what KafkaJS raised (class, message, type)."""

    def __init__(self, call: str, error: Mapping[str, object]):
        super().__init__(f"KafkaJS {call} failed: {error.get('class')}: {error.get('message')}")
        self.error = dict(error)


def _project_digest() -> str:
    digest = hashlib.sha256()
    for name in PROJECT_FILES:
        try:
            digest.update((DRIVER / name).read_bytes())
        except OSError:
            raise KafkaJsUnavailable(f"no {name} at {DRIVER}: KafkaJS is installed from a source checkout") from None
    return digest.hexdigest()[:12]


def install_path() -> Path:
    """Where the pinned KafkaJS is installed, or goes."""
    return user_cache() / "kafkajs" / _project_digest()


def modules() -> Path:
    """The installed ``node_modules``; KafkaJsUnavailable if it is not installed."""
    path = install_path()
    if not (path / INSTALLED_MARK).is_file():
        raise KafkaJsUnavailable(f"KafkaJS is not installed in {path}: {INSTALL_HINT}")
    return path / "node_modules"


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise KafkaJsUnavailable(f"no node on PATH (Node.js runs KafkaJS): {INSTALL_HINT}")
    return found


def install() -> Optional[Path]:
    """Install the pinned KafkaJS unless it is; returns where, or None when it was there."""
    target = install_path()
    if (target / INSTALLED_MARK).is_file():
        return None
    npm = shutil.which("npm")
    if npm is None:
        raise KafkaJsUnavailable(f"no npm on PATH: {INSTALL_HINT}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".installing-", dir=target.parent))
    try:
        for name in PROJECT_FILES:
            shutil.copyfile(DRIVER / name, staging / name)
        try:
            done = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev"],
                                  cwd=staging, capture_output=True, text=True, timeout=NPM_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise KafkaJsUnavailable(f"npm ci did not finish in {NPM_TIMEOUT_S:.0f}s") from None
        if done.returncode != 0:
            raise KafkaJsUnavailable(f"npm ci failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        (staging / INSTALLED_MARK).write_text("npm ci\n")
        shutil.rmtree(target, ignore_errors=True)  # a half-made one, never marked installed
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for older in target.parent.iterdir():  # other digests: installs of earlier locks
        if older != target and not older.name.startswith("."):
            shutil.rmtree(older, ignore_errors=True)
    return target


def _command(script: str, config: Mapping[str, object]) -> tuple[list[str], dict[str, str]]:
    """The command running a driver script with ``config``, and its environment."""
    return [node(), str(DRIVER / script), json.dumps(config)], {"NODE_PATH": str(modules())}


class KafkaJsMembers(DrivenMembers):
    """``members`` KafkaJS consumers of ``group`` in one Node process,
    bootstrapped at ``brokers`` (host:port, ...), subscribed to ``topics``
    from their beginning, under ``directory`` (its events and log).
    ``assigner``: the name of the one assignor each offers (None: KafkaJS's
    own, RoundRobinAssigner). Member ``i``'s client id is ``<client_id or group>-<i>``."""

    def __init__(self, directory: Path, brokers: str, group: str, topics: Iterable[str], *, members: int = 1,
                 assigner: Optional[str] = None, session_timeout_ms: int = 6000, heartbeat_interval_ms: int = 500,
                 rebalance_timeout_ms: int = 10000, client_id: Optional[str] = None, name: str = "kafkajs-members"):
        config = {"brokers": brokers.split(","), "groupId": group, "topics": list(topics), "members": members,
                  "clientId": client_id or group, "sessionTimeout": session_timeout_ms,
                  "heartbeatInterval": heartbeat_interval_ms, "rebalanceTimeout": rebalance_timeout_ms}
        if assigner is not None:
            config["assigner"] = assigner
        command, env = _command("members.js", config)
        super().__init__(directory, command, members=members, name=name, client="KafkaJS", env=env)


class KafkaJsMember(DrivenMember):
    """One KafkaJS consumer in a process of its own (DrivenMember)."""

    def __init__(self, directory: Path, brokers: str, group: str, topics: Iterable[str], **settings):
        super().__init__(KafkaJsMembers(directory, brokers, group, topics, **settings))


def admin_call(brokers: str, call: str, *arguments, timeout: float = ADMIN_TIMEOUT_S):
    """KafkaJS's admin client's ``call`` (listGroups, describeGroups,
    fetchOffsets, ...) with ``arguments`` as KafkaJS takes them, against
    ``brokers``; its answer (describeGroups' members with their metadata
    and assignment decoded). KafkaJsCallFailed if KafkaJS raised."""
    command, env = _command("admin.js", {"brokers": brokers.split(","), "call": call, "args": list(arguments)})
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env={**os.environ, **env})
    except subprocess.TimeoutExpired:
        raise KafkaJsCallFailed(call, {"class": "Timeout", "message": f"no answer in {timeout:.0f}s"}) from None
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise KafkaJsCallFailed(call, {"class": "NoAnswer", "message": done.stderr.strip()[-2000:]})
    printed = json.loads(lines[-1])
    if "error" in printed:
        raise KafkaJsCallFailed(call, printed["error"])
    return printed["answer"]


def main() -> int:
    try:
        installed = install()
    except KafkaJsUnavailable as exc:
        print(f"zkcoord: {exc}", file=sys.stderr)
        return 1
    if installed is not None:
        print(f"installed KafkaJS into {installed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
