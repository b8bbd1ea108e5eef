"""The embedded data plane: a broker that speaks the Kafka protocol, stores
partition logs on disk and registers itself in ZooKeeper as a Kafka broker."""

from zkcoord.broker.config import BrokerConfig
from zkcoord.broker.server import Broker, BrokerError
from zkcoord.broker.zkstate import BrokerIdInUseError

__all__ = ["Broker", "BrokerConfig", "BrokerError", "BrokerIdInUseError"]
