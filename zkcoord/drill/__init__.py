"""`zkcoord drill`: a fault campaign against a running cluster, with a
checker that judges the recorded history against the invariants.

- :mod:`~zkcoord.drill.schedule`: the fault kinds and a seeded schedule (pure);
- :mod:`~zkcoord.drill.faults`: the cluster the faults act on, the bounds of its recoveries, and each
  kind carried out on it;
- :mod:`~zkcoord.drill.workload`: the producer and the ZooKeeper sampler;
- :mod:`~zkcoord.drill.crowd`: the big-group fault's many members in one process;
- :mod:`~zkcoord.drill.history`: the history's files and values;
- :mod:`~zkcoord.drill.checker`: the invariants over a history (pure);
- :mod:`~zkcoord.drill.report`, :mod:`~zkcoord.drill.timeline`: what a person reads;
- :mod:`~zkcoord.drill.runner`: the whole run; :mod:`~zkcoord.drill.cli`: the command.

Layer 9 of the map in docs/DESIGN.md: it may import every package below it
(the harness above all, the coordinator's and the consumer's settings, zk
and the base modules); only the console and the command line import it.
"""
