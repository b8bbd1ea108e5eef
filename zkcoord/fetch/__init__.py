"""The consumers' fetchers: how records get from brokers to a consumer.

Owns fetching and decoding records over the Kafka protocol (``columnar``,
``connection``, ``records``, ``recovery``), what it hands out (``chunks``)
and the buffer poll() takes records from (``buffer``), and a Kafka cluster's
metadata (``cluster``). Layer 3 of the map in docs/DESIGN.md: it may import
``zk``, ``channel``, ``wire``, ``security``, ``metrics`` and the base modules
(the record batches' bytes among them, ``batch_format``); never the
consumer, the broker or anything above them.
"""
