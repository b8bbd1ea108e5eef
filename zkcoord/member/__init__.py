"""The member side of the coordinator protocol, below both of its users.

It owns what a group member is to the coordinator: the protocol's state
machine (``protocol``: what a member answers to Ping, Stop and Start, its
lease, the handover; pure), the network thread that drives it
(``membership``: finding the coordinator, registering, the retries, the
leave) and the member's settings (``config``). The thin consumer
(``zkcoord.consumer``) and the broker's bridge of stock Kafka clients
(``zkcoord.broker.groups``) both build on it.

May import the layers below it (docs/DESIGN.md, the map): the base modules,
``wire``, ``security``, ``channel``; never ``consumer``, ``broker`` or
anything above them.
"""
