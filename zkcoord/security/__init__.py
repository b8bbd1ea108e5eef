"""Security: who a peer is (principals), and the certificates TLS needs.

``principal`` names the authenticated identity behind a connection, whatever
proved it (a client certificate, SASL, a credential in RegisterConsumer);
``certs`` makes a private certificate authority and the certificates it signs,
for tests, the demo and ``zkcoord zk up``.

It owns principals, ACLs and the authorizer's decisions, SCRAM, TLS,
secrets and the login checks. Layer 1 of the map in docs/DESIGN.md: it may
import the base modules only. What the login checks read (users'
credentials, the cluster's own hosts) they are given by the process, from
``zk`` (``security_store.CredentialStore``, ``cluster_hosts.ClusterHosts``),
which is built on security's types.
"""
