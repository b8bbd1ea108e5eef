"""Lists of host:port addresses, as every command and client is given them.

One parser for a bootstrap list (the servers a member asks for the
coordinator, a Kafka cluster's brokers), checked the same way wherever it
is read: every entry host:port with a port in 1..65535, and not empty.
"""

from __future__ import annotations

from typing import Sequence

from zkcoord.errors import ConfigError


def parse_bootstrap(bootstrap: Sequence[str]) -> list[tuple[str, int]]:
    """``bootstrap`` (a comma-separated string or a sequence of entries) as
    (host, port) pairs; ConfigError if an entry is not host:port or there is none."""
    if isinstance(bootstrap, str):
        bootstrap = [b for b in bootstrap.split(",") if b]
    result = []
    for entry in bootstrap:
        host, sep, port = str(entry).rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"bootstrap entry {entry!r} is not host:port")
        result.append((host, int(port)))
    if not result:
        raise ConfigError("the bootstrap list is empty")
    return result


def kafka_addresses(bootstrap: str) -> list[str]:
    """A Kafka bootstrap list, host:port,..., as its addresses; ConfigError if an entry is not host:port."""
    try:
        return [f"{host}:{port}" for host, port in parse_bootstrap(bootstrap)]
    except ConfigError as exc:
        raise ConfigError(f"Kafka bootstrap: {exc}") from None
