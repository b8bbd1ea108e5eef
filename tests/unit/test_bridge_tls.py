"""The bridge's members share the broker's one TLS client context: a join
no longer builds a context, reading the CA, certificate and key files again
(a review found one context built per registered member)."""

from __future__ import annotations

import ssl
import threading

from zkcoord.broker.groups import answers
from zkcoord.broker.groups import bridge as bridge_module
from zkcoord.broker.groups.bridge import GroupBridge
from zkcoord.broker.groups.classic import ClassicMember
from zkcoord.member import membership as membership_module
from zkcoord.member.config import MemberConfig
from zkcoord.member.membership import GroupMembership
from zkcoord.security.principal import user
from zkcoord.zk.layout import ServerInfo


def test_a_membership_given_a_context_builds_none(monkeypatch):
    def refuse(_config):
        raise AssertionError("a context was built")

    monkeypatch.setattr(membership_module, "client_context", refuse)
    shared = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    config = MemberConfig(group="g", topics=("t",))
    assert GroupMembership(["127.0.0.1:1"], config, None, tls_context=shared).tls is shared
    assert GroupMembership(["127.0.0.1:1"], config, None, tls_context=None).tls is None  # plaintext, given


def test_every_bridged_member_registers_with_the_brokers_one_context(monkeypatch):
    shared = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    used = []
    kept = []  # whether each keeps its partitions through the loss of the coordinator

    class Recorded:
        """Stands in for the membership (its network side is the e2e tests'): records its context."""

        def __init__(self, bootstrap, config, listener, *, dynamic_id, tls_context, keep_on_loss):
            used.append(tls_context)
            kept.append(keep_on_loss)
            self.registered = threading.Event()
            self.registered.set()
            self.error = None

        def start(self):
            pass

        def close(self, timeout=None):
            pass

    monkeypatch.setattr(bridge_module, "GroupMembership", Recorded)
    monkeypatch.setattr(bridge_module, "read_servers", lambda _zk: {"1": ServerInfo("1", "127.0.0.1", 1)})
    bridge = GroupBridge(1, None, lambda: {}, lambda: {}, heartbeat_interval_ms=3000, session_timeout_ms=10000,
                         fence_idle_ms=600_000, tls_context=shared)
    try:
        for n in range(3):
            member = ClassicMember(member_id=f"m-{n}", topics=("t",), session_timeout_ms=10000,
                                   rebalance_timeout_ms=10000, principal=user("alice"))
            bridged = bridge._add(member, "g")
            assert bridge._register(bridged, ("range",)) == answers.NONE
    finally:
        bridge.close()
    assert len(used) == 3 and all(context is shared for context in used)
    assert kept == [False] * 3  # a stock client is warned by its registration's lease: it stops at once
