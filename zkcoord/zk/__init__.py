"""ZooKeeper: every znode's path and codec, the one reader of shared nodes, sessions, test ensembles.

It owns how zkcoord meets ZooKeeper: the layout of every node and its bytes
(``layout``), the readers of the nodes several parts read (``nodes``, many
at a time through ``reads``), clients and their sessions (``client``,
``session``, ``config``, ``security``, ``gevent_handler``), users and ACLs
(``security_store``) and the cluster's own hosts (``cluster_hosts``) as the
login checks and the authorizer read them, and local ensembles for the
commands and the tests (``ensemble``, ``ensemble_files``, ``probes``,
``kerberos``, ``chroots``).

Layer 2 of the map in docs/DESIGN.md: it may import ``security``, ``wire``,
``metrics`` and the base modules; never ``fetch`` or anything above it.
"""
