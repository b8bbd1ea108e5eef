"""Kafka's group APIs on the broker, bridged into the zkcoord coordinator.

It owns what a stock Kafka client's group requests get. The decisions are
pure: ``classic`` and ``kip848`` (a client's member under the classic and
the KIP-848 protocol, over the core they share in ``member.py``), ``fences`` (the
fetch fences of gone members), ``answers`` (error codes, the consumer
protocol's bytes, the handlers' small decisions). ``bridge`` holds the
members and does the I/O: each client registered with its group's
coordinator through ``zkcoord.member``, its requests served by the parts
``classic_apis``, ``kip848_apis``, ``offsets`` and ``directory``.

May import what ``zkcoord.broker`` may (docs/DESIGN.md, the map): the
member side (``zkcoord.member``), ``admin`` and below; never ``consumer``
or the coordinator.
"""

from zkcoord.broker.groups.bridge import GroupBridge

__all__ = ["GroupBridge"]
