"""Isolation levels: what a reader sees of transactional producers' records
(Kafka's ``isolation.level``). ``read_uncommitted`` sees every data record
up to the high watermark; ``read_committed`` only those of committed
transactions and of producers outside transactions, up to the last stable
offset (the first offset of the earliest transaction still open). Neither
sees a transaction marker. Kept apart from the fetching code, which needs
the network, so that configs and command lines can name the levels."""

READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
ISOLATION_LEVELS = {READ_UNCOMMITTED: 0, READ_COMMITTED: 1}  # their numbers on the wire

__all__ = ["ISOLATION_LEVELS", "READ_COMMITTED", "READ_UNCOMMITTED"]
