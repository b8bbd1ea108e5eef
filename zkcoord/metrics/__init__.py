"""What every zkcoord process tells Prometheus: the metrics a server and a
standalone broker count (``families``), the HTTP endpoint that serves them
(``endpoint``) and its settings (``config``). The names, help texts and
labels are listed in docs/METRICS.md.

Layer 1 of the map in docs/DESIGN.md: it imports only the base modules
(an API's label is Kafka's name of its key, from kafka-python's table); the
coordinator, the broker and the fetcher fill its families.

Submodules are imported by name: ``config`` is light, so that a command can
declare its options before gevent patches the process.
"""
