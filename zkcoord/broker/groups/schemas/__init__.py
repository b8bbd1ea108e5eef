"""Kafka message schemas (Kafka's JSON schema format) that kafka-python does
not carry, for its protocol classes to be generated from (``messages.py``)."""
