"""`zkcoord drill`: a fault campaign against a running cluster, with a
checker that judges the recorded history against the invariants.

- :mod:`~zkcoord.drill.schedule`: the fault kinds and a seeded schedule (pure);
- :mod:`~zkcoord.drill.target`: the cluster the faults act on, and the bounds of its recoveries;
- :mod:`~zkcoord.drill.faults`, :mod:`~zkcoord.drill.kafka_faults`: each kind carried out on the cluster
  (:mod:`~zkcoord.drill.fault_steps`: the steps they share);
- :mod:`~zkcoord.drill.workload`: the producer and the ZooKeeper sampler;
- :mod:`~zkcoord.drill.crowd`: the big-group fault's many members in one process;
- :mod:`~zkcoord.drill.history`: the history's files and values;
- :mod:`~zkcoord.drill.checker`: the invariants over a history (pure);
- :mod:`~zkcoord.drill.report`, :mod:`~zkcoord.drill.timeline`: what a person reads;
- :mod:`~zkcoord.drill.runner`: the whole run; :mod:`~zkcoord.drill.cli`: the command.
"""
