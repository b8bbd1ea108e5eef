"""Why a topic is not where zkcoord looks for it, in ZooKeeper mode.

zkcoord reads Kafka's registrations (``/brokers/ids``, ``/brokers/topics``)
under the chroot of its ``--zookeeper`` connect string, which must be the
chroot of Kafka's ``zookeeper.connect``. When the two differ, every topic
Kafka has is unknown to zkcoord, and "topic does not exist" sends the user
looking in the wrong place. :func:`missing_topic` words the error: if the
ensemble holds the topic under another chroot (looked for a few levels
down, as far as zkcoord may read), it names that chroot; if no broker is
registered under zkcoord's chroot either, it says the chroots likely differ.

>>> split_chroot("zk1:2181,zk2:2181/kafka/prod")
('zk1:2181,zk2:2181', '/kafka/prod')
>>> split_chroot("zk1:2181")
('zk1:2181', '/')
"""

from __future__ import annotations

import logging
from typing import Optional

from zkcoord.zk import layout

log = logging.getLogger(__name__)

SEARCH_DEPTH = 2  # chroots looked for: /a and /a/b (Kafka's are one or two levels deep in practice)
MAX_LOOKS = 200  # ZooKeeper reads at most, on a large tree
LOOK_TIMEOUT_S = 5.0  # for the session on the ensemble's root
SKIPPED = frozenset({"zookeeper", "brokers", "consumers", "config", "admin"})  # never a chroot's first level


def split_chroot(connect: str) -> tuple[str, str]:
    """(hosts, chroot) of a ZooKeeper connect string; chroot "/" when none."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else "/"


def chroots_holding(client, topic: str, hosts: str, own: str) -> list[str]:
    """The chroots other than ``own`` under which the ensemble at ``hosts``
    registers ``topic`` (Kafka's ``/brokers/topics/<topic>``), read over a
    session of its own with ``client``'s security; none when the ensemble
    cannot be read there (ACLs, a time-out)."""
    from zkcoord.zk import client as zk_client

    root = zk_client.open_client(hosts, getattr(client, "security", None))
    found: list[str] = []
    try:
        zk_client.start(root, timeout=LOOK_TIMEOUT_S)
        looks, level = 0, ["/"]
        for depth in range(SEARCH_DEPTH + 1):
            below = []
            for base in level:
                if looks >= MAX_LOOKS:
                    return found
                looks += 1
                if base != own and root.exists(base.rstrip("/") + layout.topic_path(topic)) is not None:
                    found.append(base)
                if depth < SEARCH_DEPTH:
                    children = sorted(root.get_children(base))
                    below += [base.rstrip("/") + "/" + c for c in children if not (base == "/" and c in SKIPPED)]
            level = below
    except Exception as exc:  # kazoo's and ours alike: a diagnosis only, what cannot be read is not looked at
        log.info("looking for topic %s under other chroots: %s", topic, exc)
    finally:
        root.stop()
        root.close()
    return found


def missing_topic(client, topic: str) -> str:
    """Why ``topic`` is not under ``/brokers/topics`` of the chroot that
    ``client`` (a started kazoo client from :func:`zkcoord.zk.client.open_client`)
    reads: the message of the error that says so."""
    connect: Optional[str] = getattr(client, "connect", None)
    hosts, own = split_chroot(connect) if connect else ("", "/")
    same = ("zkcoord's --zookeeper and Kafka's zookeeper.connect must name the same chroot "
            "(or, with Kafka in KRaft mode, give zkcoord Kafka's brokers: --kafka-bootstrap)")
    elsewhere = chroots_holding(client, topic, hosts, own) if hosts else []
    if elsewhere:
        return (f"topic {topic!r} is not registered under zkcoord's ZooKeeper chroot {own}, but Kafka registered it "
                f"under {', '.join(elsewhere)}: {same}; here --zookeeper {hosts}{elsewhere[0].rstrip('/')}")
    if not client.exists(layout.BROKER_IDS) or not client.get_children(layout.BROKER_IDS):
        return (f"topic {topic!r} does not exist under zkcoord's ZooKeeper chroot {own}, where no Kafka broker is "
                f"registered either: {same}")
    return f"topic {topic!r} does not exist"


__all__ = ["chroots_holding", "missing_topic", "split_chroot"]
