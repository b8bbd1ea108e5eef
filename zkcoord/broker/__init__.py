"""The embedded data plane: a broker that speaks the Kafka protocol, stores
partition logs on disk and registers itself in ZooKeeper as a Kafka broker.

Names are imported lazily so that ``zkcoord.broker.cli`` can be imported (to
add its subcommand) before the process has done gevent's monkey patching.

Owns the Kafka-protocol data plane: the partition logs, the request
handlers, the broker's ZooKeeper state, the gateway to Apache Kafka, and the
group APIs' bridge (``groups``). Layer 6 of the map in docs/DESIGN.md: it
may import the member side (``member``), ``admin``, ``fetch``, ``zk``,
``channel``, ``wire``, ``security``, ``metrics`` and the base modules; never
``consumer`` or the coordinator.
"""

__all__ = ["Broker", "BrokerConfig", "BrokerError", "BrokerIdInUseError", "LogConfig"]


def __getattr__(name):
    if name in ("BrokerConfig", "LogConfig"):
        from zkcoord.broker import config
        return getattr(config, name)
    if name in ("Broker", "BrokerError"):
        from zkcoord.broker import server
        return getattr(server, name)
    if name == "BrokerIdInUseError":
        from zkcoord.broker.zkstate import BrokerIdInUseError
        return BrokerIdInUseError
    raise AttributeError(name)
