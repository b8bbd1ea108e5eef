"""Stock clients' group members run by a driver process of their client's
own language (Kafka's Java client: java_members.py; KafkaJS: kafkajs.py),
read back from the one event stream every driver writes.

A driver runs N members (consumers of one group) in one process. Stdout is
one JSON object a line, each with ``event``, ``member`` (its index; none
for the driver's own) and ``ts`` (epoch ms):

- ``started``; ``closed`` (the consumer closed: it left its group);
- ``assigned``, ``revoked``, ``lost``: ``partitions``, ``[[topic, partition], ...]``;
- ``record``: ``topic``, ``partition``, ``offset`` of each record consumed
  (``--records each``), or ``records``: ``topic``, ``partition``, ``first``,
  ``last``, ``count`` per partition and poll (``--records ranges``);
- ``committed``: ``offsets``, ``[[topic, partition, next offset], ...]``;
- ``error``: ``phase`` (create, poll, commit, close, command, ...),
  ``class`` (the error's class in the client's language), ``message``;
- ``ready`` once every member is started; ``go`` when the go command
  released the members' first poll; ``exit`` last.

Stdin takes ``go``, ``close <i>`` (member i leaves cleanly) and ``quit``
(all leave, the driver exits); end of input is a quit. The client's log
goes to stderr (the process's log here). A crash is the whole process's
(kill -9): a member to be killed alone runs in a driver of its own.

:class:`DrivenMembers` runs a driver as a managed process and reads its
events back: who holds what, what was consumed, committed, and refused;
:class:`DrivenMember`, one member in a driver of its own, as the harness
sees any stock member.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from zkcoord.testing.process import ClusterError, ManagedProcess, ProcessExited
from zkcoord.testing.waiting import wait_until

EVENTS_FILE = "events.jsonl"
Partition = tuple[str, int]


class DrivenMembers:
    """``members`` members run by the driver ``command`` under ``directory``
    (its events and log); ``client`` names their client in messages."""

    def __init__(self, directory: Path, command: Sequence[str], *, members: int, name: str, client: str,
                 env: Optional[Mapping[str, str]] = None):
        self.members = members
        self.client = client
        self.process = ManagedProcess(name, Path(directory), command, log_name="driver.log",
                                      stdout_name=EVENTS_FILE, commands=True, env=env)
        self._forget()

    def _forget(self) -> None:
        """What has been read of the events, and what they add up to so far
        (kept as they are read: a thousand members write many)."""
        self._events: list[dict] = []
        self._read_at = 0
        self._held: dict[int, set[Partition]] = {}
        self._closed: set[int] = set()
        self._records: list[tuple[str, int, int]] = []
        self._consumed = 0
        self._committed: dict[Partition, int] = {}

    # -- life -------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0, wait: bool = True) -> "DrivenMembers":
        """Start the driver and (``wait``) wait until every member has been
        created or failed to be (:meth:`wait_ready` waits later)."""
        self.process.stdout_path.unlink(missing_ok=True)
        self._forget()
        self.process.start()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        self.wait_for(lambda: self.events("ready"), timeout, f"the {self.client} members to start")

    def command(self, line: str) -> None:
        if not self.process.alive:
            raise ProcessExited(f"{self.process.name} is not running:\n{self.process.log_tail()}")
        self.process.proc.stdin.write(line.encode() + b"\n")
        self.process.proc.stdin.flush()

    def go(self) -> None:
        """Release the members' first poll (``start_on_go``); the driver writes a ``go`` event, dated, first."""
        self.command("go")

    def close_member(self, index: int, timeout: float = 30.0) -> None:
        """Member ``index`` leaves its group cleanly; waits until it has."""
        self.command(f"close {index}")
        self.wait_for(lambda: self.closed(index), timeout, f"{self.client} member {index} to close")

    def stop(self, timeout: float = 30.0) -> Optional[int]:
        """Every member leaves cleanly and the driver exits (kill -9 if it does not in time)."""
        if self.process.alive:
            try:
                self.command("quit")
                self.process.proc.stdin.close()
                self.process.proc.wait(timeout)
            except (OSError, ProcessExited):
                pass  # it died meanwhile
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.terminate(1)

    def kill(self) -> None:
        """kill -9: every member crashes at once."""
        self.process.kill()

    def __enter__(self) -> "DrivenMembers":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- reading its events -----------------------------------------------------------------------

    def _read(self) -> list[dict]:
        """Every whole line written so far (one being written waits for its newline)."""
        try:
            with open(self.process.stdout_path, "rb") as output:
                output.seek(self._read_at)
                chunk = output.read()
        except OSError:
            return self._events
        complete = chunk.rfind(b"\n") + 1
        for line in chunk[:complete].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                raise ClusterError(f"{self.process.name} wrote a line that is not JSON: {line[:200]!r}") from None
            self._events.append(event)
            self._take(event)
        self._read_at += complete
        return self._events

    def _take(self, event: dict) -> None:
        kind, member = event["event"], event.get("member")
        partitions = {(t, p) for t, p in event.get("partitions", ())}
        if kind == "assigned":
            self._held.setdefault(member, set()).update(partitions)
        elif kind in ("revoked", "lost"):
            self._held.setdefault(member, set()).difference_update(partitions)
        elif kind == "closed":
            self._held.pop(member, None)
            self._closed.add(member)
        elif kind == "record":
            self._records.append((event["topic"], event["partition"], event["offset"]))
            self._consumed += 1
        elif kind == "records":
            self._consumed += event["count"]
        elif kind == "committed":
            for topic, partition, offset in event["offsets"]:
                self._committed[(topic, partition)] = offset

    def events(self, kind: Optional[str] = None, member: Optional[int] = None) -> list[dict]:
        return [e for e in self._read() if (kind is None or e["event"] == kind)
                and (member is None or e.get("member") == member)]

    def errors(self, member: Optional[int] = None) -> list[dict]:
        return self.events("error", member)

    def assignment(self, member: int) -> frozenset[Partition]:
        """What member ``member`` holds now, as its client told the driver."""
        self._read()
        return frozenset(self._held.get(member, ()))

    def assignments(self) -> dict[int, frozenset[Partition]]:
        self._read()
        return {i: frozenset(self._held.get(i, ())) for i in range(self.members)}

    def records(self) -> list[tuple[str, int, int]]:
        """(topic, partition, offset) of every record consumed, by any member,
        in order (``records="each"``)."""
        self._read()
        return list(self._records)

    def consumed(self) -> int:
        """How many records were consumed, in either ``records`` mode."""
        self._read()
        return self._consumed

    def committed(self) -> dict[Partition, int]:
        """The last offset committed for each partition, by whichever member."""
        self._read()
        return dict(self._committed)

    def closed(self, member: int) -> bool:
        self._read()
        return member in self._closed

    def wait_for(self, predicate: Callable[[], object], timeout: float, message: str):
        """wait_until, failing at once if the driver exits meanwhile."""
        def check():
            result = predicate()
            if not result and not self.process.alive:
                raise ProcessExited(f"{self.process.name} exited ({self.process.returncode}) waiting for "
                                    f"{message}:\n{self.process.log_tail()}")
            return result
        return wait_until(check, timeout, message=message, fail_on=(ProcessExited,))

    def wait_assigned(self, member: int = 0, timeout: float = 30.0) -> frozenset[Partition]:
        return self.wait_for(lambda: self.assignment(member), timeout,
                             f"{self.client} member {member} to be assigned")

    def counts(self) -> Counter:
        """How often each (topic, partition, offset) was consumed (``records="each"``)."""
        return Counter(self.records())


class DrivenMember:
    """One member in a driver of its own, seen as the harness sees a stock
    member run by ``zkcoord consume --kafka-brokers`` (a ConsumerProcess):
    ``records()`` as dicts with topic, partition and offset, ``assignment()``,
    ``alive``, ``terminate()`` (it leaves its group cleanly and the driver
    exits; the exit code), ``kill()``; so a test that takes stock members of
    any client library takes these too."""

    stock = True

    def __init__(self, driver: DrivenMembers):
        self.name = driver.process.name
        self.driver = driver

    def start(self, timeout: float = 60.0) -> "DrivenMember":
        self.driver.start(timeout)
        return self

    @property
    def alive(self) -> bool:
        return self.driver.process.alive and not self.driver.closed(0)

    def assignment(self) -> set[Partition]:
        return set(self.driver.assignment(0))

    def records(self) -> list[dict]:
        return [{"topic": topic, "partition": partition, "offset": offset}
                for topic, partition, offset in self.driver.records()]

    def terminate(self, timeout: float = 30.0) -> Optional[int]:
        return self.driver.stop(timeout)

    def kill(self) -> None:
        self.driver.kill()
