"""Security: who a peer is (principals), and the certificates TLS needs.

``principal`` names the authenticated identity behind a connection, whatever
proved it (a client certificate, SASL, a credential in RegisterConsumer);
``certs`` makes a private certificate authority and the certificates it signs,
for tests, the demo and ``zkcoord zk up``.
"""
