"""Small helpers every test tier shares: waiting on conditions, free ports."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05, message: str = "condition"
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Raises AssertionError naming ``message`` (and the last exception the
    predicate raised, if any) when ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # the condition may not be checkable yet
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {message}{detail}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def fresh_chroot(ensemble, prefix: str = "t") -> Iterator[tuple]:
    """A new, empty chroot in ``ensemble``: yields its connect string and a
    started kazoo client on it; the chroot is deleted afterwards."""
    from kazoo.client import KazooClient

    chroot = f"/{prefix}-{uuid.uuid4().hex[:12]}"
    admin = KazooClient(hosts=ensemble.connect_string)
    admin.start(timeout=15)
    try:
        admin.ensure_path(chroot)
        client = KazooClient(hosts=ensemble.connect_string + chroot)
        client.start(timeout=15)
        try:
            yield ensemble.connect_string + chroot, client
        finally:
            client.stop()
            client.close()
        admin.delete(chroot, recursive=True)
    finally:
        admin.stop()
        admin.close()
