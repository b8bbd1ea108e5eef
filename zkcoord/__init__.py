"""zkcoord: a ZooKeeper-elected, server-pushed consumer-group coordinator.

The package's front door (``Consumer``), of the top layer of the map in
docs/DESIGN.md, which says what each package owns and may import.
"""

__version__ = "0.1.0"


def __getattr__(name):
    # Consumer pulls in the fetcher's Kafka client; import it only when asked for.
    if name == "Consumer":
        from zkcoord.consumer.consumer import Consumer

        return Consumer
    raise AttributeError(f"module 'zkcoord' has no attribute {name!r}")
