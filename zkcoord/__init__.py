"""zkcoord: a ZooKeeper-elected, server-pushed consumer-group coordinator."""

__version__ = "0.1.0"


def __getattr__(name):
    # Consumer pulls in the fetcher's Kafka client; import it only when asked for.
    if name == "Consumer":
        from zkcoord.consumer.consumer import Consumer

        return Consumer
    raise AttributeError(f"module 'zkcoord' has no attribute {name!r}")
