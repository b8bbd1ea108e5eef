"""The coordinator server: election of each slot, ClusterMetadata, and the coordinator of each slot held.

Owns the server process (server.py, its ZooKeeper session and elections),
the decisions of a slot's coordinator as a pure core of parts (core/), the
executor that carries them out on gevent (runtime.py), the fenced ZooKeeper
store (store.py) and the pure logic beside them (assignors, planner, group
state machine, leases, slots, ping schedule). Layer 7 of the map in
docs/DESIGN.md: it may import every package below it (the broker it embeds,
consumer, member, admin, fetch, zk, channel, metrics, wire, security, the
base modules), and nothing above it imports it but the harness, the Spark
source, the drill, the console and the command line.
"""
