"""zkcoord: a ZooKeeper-elected, server-pushed consumer-group coordinator."""

__version__ = "0.1.0"
