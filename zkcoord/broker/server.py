"""The broker process shell: a gevent StreamServer speaking the Kafka protocol,
one greenlet per connection (capped by a pool), the partition logs it hosts,
and a reconcile greenlet that follows ZooKeeper.

Requests on one connection are handled in order, one at a time, as a Kafka
broker does. A frame that cannot be served closes the connection; nothing a
client sends can stop the broker or touch a log it did not validate. What a
client may hold is bounded (zkcoord.limits): its idle time between requests,
a request's time from its first byte to its last, its time to authenticate
(where authentication is required), its address's connections, and the
bytes of partial requests the process keeps (grown as they arrive, not taken
at once from the size a client announces).

Its parts: ``access.py`` (SASL and the authorizer's answers), ``topic_admin.py``
(CreateTopics and CreatePartitions carried out), ``sockets.py`` (the bytes of
a request read and of an answer sent); the handlers' decisions are
``handlers.py``'s and ``admin_apis.py``'s.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
import time
from typing import Optional

import gevent
import gevent.event
import gevent.pool
import gevent.server
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from prometheus_client import CollectorRegistry

from zkcoord.broker import admin_apis, protocol
from zkcoord.broker.access import PeerAccess
from zkcoord.broker.config import BrokerConfig
from zkcoord.broker.fence_store import FencePublisher, FenceReader
from zkcoord.broker.groups import GroupBridge
from zkcoord.broker import gateway
from zkcoord.broker.gateway import KafkaView, with_gateway
from zkcoord.broker.handlers import NOT_CONTROLLER, BrokerAddress, Handlers, MetadataCache, lists_every_topic
from zkcoord.broker.log import PartitionLog
from zkcoord.broker.peer import Peer
from zkcoord.broker.sockets import PeerClosed, close_slices, drain_before_close, exchange, recv_part, send_parts
from zkcoord.broker.topic_admin import TopicAdmin
from zkcoord.security.checks import LoginChecks
from zkcoord.broker.protocol import ProtocolError, UnsupportedApiVersions
from zkcoord.broker.zkstate import ProducerIdsUnavailable, ZkState
from zkcoord.errors import TlsError, ZkcoordError, describe
from zkcoord.filemodes import private_directory
from zkcoord.limits import MALFORMED, TLS_HANDSHAKE, FrameAccount, Guard, LimitExceeded, abuse_log
from zkcoord.metrics.families import BrokerMetrics
from zkcoord.security import acl, tls
from zkcoord.security.principal import ANONYMOUS
from zkcoord.zk import layout
from zkcoord.zk import security_store
from zkcoord.zk.cluster_hosts import ClusterHosts

log = logging.getLogger(__name__)

_RECONCILE_EVERY_S = 5.0  # a safety net for a lost watch; watches do the real work
# A request's buffer starts this large and doubles as its bytes arrive, each
# growth charged to the process's budget before it is made.
_FIRST_BUFFER = 64 * 1024


class BrokerError(ZkcoordError):
    """The broker could not start or was used in the wrong state."""


# Kafka's sasl.server.max.receive.size: what a client may send before it authenticates.
UNAUTHENTICATED_REQUEST_BYTES = 512 * 1024
# How long a gateway's relay waits to connect to its Kafka broker before it
# closes the client's connection (the client then asks for metadata again).
RELAY_CONNECT_TIMEOUT_S = 10.0


class Broker(PeerAccess, TopicAdmin):
    """An embedded Kafka-protocol broker.

    ``zk_client`` must be started by the caller, with a gevent handler when the
    process runs on gevent; the broker registers itself through it and never
    stops it. ``metrics``: where it counts (its own registry if not given);
    ``guard``: the process's limits at work, shared with its other listener
    (one of its own, counting nothing, if not given); ``logins``: the
    process's password checks, likewise.
    """

    def __init__(self, config: BrokerConfig, zk_client: KazooClient, metrics: Optional[BrokerMetrics] = None,
                 guard: Optional[Guard] = None, logins: Optional[LoginChecks] = None, kafka=None):
        """``kafka``: a gateway's KafkaClusterWatch, where it reads a KRaft
        Kafka's cluster (None: ZooKeeper's /brokers, which a ZooKeeper-mode
        Kafka shares)."""
        self.config = config
        self._kafka = kafka
        self.kafka_view: Optional[KafkaView] = None  # a gateway's
        self._listener = (guard or Guard(config.limits)).listener("broker")
        self.zk = zk_client
        self.metrics = metrics if metrics is not None else BrokerMetrics(CollectorRegistry())
        self._own_logins = logins is None
        self.logins = logins if logins is not None else LoginChecks(
            security_store.CredentialStore(zk_client), config.security, ClusterHosts(zk_client, kafka=kafka))
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.metadata_cache = MetadataCache()
        self._producer_ids: Optional[layout.ProducerIdBlock] = None
        self._next_pid = 0
        self.handlers = Handlers(config.broker_id, self.metadata_cache, self.logs, self._next_producer_id,
                                 config.sendfile_threshold, on_append=self.metrics.produced)
        self._appended = gevent.event.Event()
        self._reconciled = gevent.event.Event()
        self._wake = gevent.event.Event()
        self._pool = gevent.pool.Pool(config.max_connections)
        self._server: Optional[gevent.server.StreamServer] = None
        self._tls = tls.server_context(config.tls)  # None: plaintext
        # The bridge's members reach the coordinators with it: built once, not at every join.
        self._client_tls = tls.client_context(config.tls)
        self._connections: set = set()
        self.metrics.watch_connections(lambda: len(self._connections))
        self._greenlets: list = []
        self._stopping = False
        self._zkstate: Optional[ZkState] = None
        self.port: Optional[int] = None
        self.groups: Optional[GroupBridge] = None
        self.acls: Optional[security_store.AclCache] = None  # with the authorizer on
        # A gateway's relays, by the id of the Kafka broker each stands for (gateway.py).
        self._relays: dict[int, gevent.server.StreamServer] = {}
        self._kafka_brokers: dict[int, BrokerAddress] = {}

    # -- lifecycle -------------------------------------------------------

    def start(self) -> None:
        if self._server is not None:
            raise BrokerError("broker already started")
        if not self.config.gateway:
            # Its owner's alone: the partition logs hold every record, whatever the topics' ACLs say.
            private_directory(self.config.data_dir, "the broker's partition logs")
        self._server = gevent.server.StreamServer((self.config.host, self.config.port), self._serve,
                                                  spawn=self._pool, backlog=256)
        try:
            self._server.init_socket()
        except OSError as exc:
            self._server = None
            raise BrokerError(f"cannot listen on {self.config.host}:{self.config.port}: {exc}") from None
        self.port = self._server.server_port
        # Registered as Kafka registers a listener: "SASL_SSL://host:port" and
        # its protocol in listener_security_protocol_map. SASL_ when every
        # client must authenticate; a listener where SASL is optional is named
        # for its transport alone.
        protocol = (("SASL_" if self.config.security.authentication_required else "")
                    + ("SSL" if self._tls is not None else "PLAINTEXT"))
        endpoint = layout.ListenerEndpoint(protocol, protocol, self.config.advertised, self.port)
        registration = layout.BrokerRegistration.for_endpoints(
            self.config.broker_id, [endpoint], timestamp_ms=int(time.time() * 1000),
            rack=self.config.rack)
        self._zkstate = ZkState(self.zk, registration, self._wake.set)
        if self.config.gateway:
            self.kafka_view = KafkaView(self._zkstate, self._kafka, on_change=self._wake.set)
        try:
            try:
                self.metadata_cache.cluster_id = self._zkstate.cluster_id()
            except layout.LayoutError as exc:
                raise BrokerError(f"cannot serve without the cluster id: {exc}") from None
            if self.kafka_view is None:
                self._zkstate.register(wait_s=self.config.register_timeout_ms / 1000)
                self._reconcile()
            else:
                self.kafka_view.check(self._read_kafka(), self.config.broker_id)  # GatewayError
                self._reconcile()
        except Exception:
            self._server.close()
            self._server = None
            try:
                if self.kafka_view is None:
                    self._zkstate.unregister()
            except (Exception, self.zk.handler.timeout_exception):  # ephemeral anyway; the original error matters more
                pass
            for plog in self.logs.values():
                plog.close()
            self.logs.clear()
            raise
        self.zk.add_listener(self._on_zk_state)
        security = self.config.security
        if security.authorizing:
            self.acls = security_store.AclCache(
                self.zk, self.config.security.acl_change_expiration_ms).start()
        # Every broker refuses what any bridge fences; this one's bridge fences
        # its own members. A gateway too: its clients' fetches pass through its relays.
        idle_ms = self.config.fetch_fence_idle_ms
        self.fence_reader = FenceReader(self.zk, idle_ms)
        self._fence_publisher = FencePublisher(self.zk, idle_ms, on_fetched=lambda key: self.groups.fence_fetched(key),
                                               on_lifted=lambda key: self.groups.fence_lifted(key))
        self.groups = GroupBridge(
            self.config.broker_id, self.zk, self._coordinators, lambda: self.metadata_cache.topic_ids,
            heartbeat_interval_ms=self.config.group_consumer_heartbeat_interval_ms,
            session_timeout_ms=self.config.group_consumer_session_timeout_ms, fence_idle_ms=idle_ms,
            log_end=self._log_end,
            tls_context=self._client_tls, authorize=self.authorize if self.acls is not None else None,
            credential=security.own_credential, password_without_tls=security.bridge_password_without_tls,
            publish_fences=self._fence_publisher.want,
            lift_fences_elsewhere=self.fence_reader.lift, fenced_anywhere=self.fence_reader.refusing)
        self._server.start()
        self._greenlets = [gevent.spawn(self._follow_zookeeper), gevent.spawn(self._housekeeping)]
        log.info("broker %d serving on %s:%d", self.config.broker_id, self.config.host, self.port)

    def _log_end(self, tp) -> Optional[int]:
        """The log end offset of a partition this broker leads, else None."""
        plog = self.logs.get(tuple(tp))
        return None if plog is None else plog.log_end_offset

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let requests in flight finish (up to ``timeout``),
        then close connections and logs and remove the registration."""
        if self._server is None or self._stopping:
            return
        self._stopping = True
        self._server.close()
        self._appended.set()
        for sock in list(self._connections):
            try:
                tls.shutdown(sock, socket.SHUT_RD)  # answers in flight still go out, over TLS where it is
            except OSError:
                pass
        for relay in self._relays.values():
            relay.close()
        if self.groups is not None:
            self.groups.close()
            self.fence_reader.close()
            self._fence_publisher.close()
        if self.acls is not None:
            self.acls.stop()
        self._pool.join(timeout=timeout)
        self._pool.kill(block=True, timeout=1)
        gevent.killall(self._greenlets, block=True, timeout=1)
        self.zk.remove_listener(self._on_zk_state)
        if self.zk.connected and self.kafka_view is None:
            try:
                self._zkstate.unregister()
            except (Exception, self.zk.handler.timeout_exception) as exc:  # ephemeral: goes with the session
                log.warning("broker %d: could not remove registration: %s", self.config.broker_id, describe(exc))
        for plog in self.logs.values():
            plog.flush()
            plog.close()
        self.logs.clear()
        if self._own_logins:
            self.logins.close()
        log.info("broker %d stopped", self.config.broker_id)

    # -- ZooKeeper ---------------------------------------------------------

    def _on_zk_state(self, state) -> None:
        if state == KazooState.CONNECTED:
            self._wake.set()

    def _follow_zookeeper(self) -> None:
        while not self._stopping:
            self._wake.wait(timeout=_RECONCILE_EVERY_S)
            self._wake.clear()
            if self._stopping:
                return
            try:
                if self.zk.connected:
                    if self.kafka_view is None:
                        self._zkstate.ensure_registered()
                    self._reconcile()
            except Exception as exc:
                log.warning("broker %d: reconcile with ZooKeeper failed: %s", self.config.broker_id, describe(exc))
                gevent.sleep(0.5)
                self._wake.set()

    def _read_kafka(self) -> MetadataCache:
        """A gateway's view of the Kafka cluster beside it."""
        return self.kafka_view.read(self.metadata_cache.cluster_id)

    def _reconcile(self) -> None:
        if self.kafka_view is not None:
            kafka = self._read_kafka()
            self.kafka_view.watch_problems(kafka, self.config.broker_id)
            self._kafka_brokers = kafka.brokers
            for node in kafka.brokers.keys() - self._relays.keys():
                self._open_relay(node)
            own = BrokerAddress(self.config.advertised, self.port, self.config.rack)
            relays = {node: BrokerAddress(self.config.advertised, relay.server_port, kafka.brokers[node].rack)
                      for node, relay in self._relays.items() if node in kafka.brokers}
            cached = with_gateway(kafka, self.config.broker_id, own, relays)
            # One assignment: a Metadata answer reads a whole view, never half of two.
            self.metadata_cache = cached
            self.handlers.metadata_cache = cached
            self._reconciled.set()
            self._reconciled = gevent.event.Event()
            return
        snapshot = self._zkstate.read()
        self.metadata_cache.brokers = snapshot.metadata_cache.brokers
        self.metadata_cache.topics = snapshot.metadata_cache.topics
        self.metadata_cache.topic_ids = snapshot.metadata_cache.topic_ids
        for key, epoch in snapshot.led.items():
            plog = self.logs.get(key)
            if plog is None:
                topic, partition = key
                directory = os.path.join(self.config.data_dir, f"{topic}-{partition}")
                try:
                    plog = PartitionLog(directory, self.config.log, time.time, epoch)
                except (OSError, ZkcoordError) as exc:
                    # One unusable directory must not keep the others offline.
                    log.error("broker %d cannot open %s: %s", self.config.broker_id, directory, exc)
                    continue
                self.logs[key] = plog
                log.info("broker %d now leads %s-%d (epoch %d, offsets %d..%d)",
                         self.config.broker_id, topic, partition, epoch,
                         plog.log_start_offset, plog.log_end_offset)
            plog.leader_epoch = epoch
        for key in [k for k in self.logs if k not in snapshot.led]:
            log.info("broker %d no longer leads %s-%d", self.config.broker_id, *key)
            self.logs.pop(key).close()
        self._reconciled.set()
        self._reconciled = gevent.event.Event()

    def _housekeeping(self) -> None:
        """Time-based flushes and retention."""
        last_retention = time.monotonic()
        while not self._stopping:
            gevent.sleep(min(1.0, self.config.retention_check_ms / 1000))
            abuse_log.flush()  # what it held back is summed up even when the abuse has stopped
            for plog in list(self.logs.values()):
                plog.maybe_flush()
            if (time.monotonic() - last_retention) * 1000 >= self.config.retention_check_ms:
                last_retention = time.monotonic()
                now_ms = int(time.time() * 1000)
                for key, plog in list(self.logs.items()):
                    deleted = plog.apply_retention(now_ms)
                    if deleted:
                        log.info("%s-%d: retention deleted %d segments; log starts at %d",
                                 key[0], key[1], deleted, plog.log_start_offset)

    def _open_relay(self, node: int) -> None:
        """A listener standing for Kafka broker ``node``: what its clients
        send it goes on to that broker, but for what the gateway answers."""
        relay = gevent.server.StreamServer((self.config.host, 0), functools.partial(self._serve, relay_to=node),
                                           spawn=self._pool, backlog=256)
        try:
            relay.start()
        except OSError as exc:
            log.error("gateway %d: no relay for Kafka broker %d: %s", self.config.broker_id, node, exc)
            return
        self._relays[node] = relay
        log.info("gateway %d: Kafka broker %d relayed on %s:%d", self.config.broker_id, node, self.config.host,
                 relay.server_port)

    def _coordinators(self) -> dict[int, tuple[str, int]]:
        """The brokers FindCoordinator may name: the live brokers; a
        gateway names itself, as Kafka's brokers must never be named."""
        if self.kafka_view is not None:
            return {self.config.broker_id: (self.config.advertised, self.port)}
        return {node: (addr.host, addr.port) for node, addr in self.metadata_cache.brokers.items()}

    def _next_producer_id(self) -> int:
        """A producer id no broker sharing this ZooKeeper has handed out or
        will: the next of this broker's block, claimed anew when it is used up."""
        if self.kafka_view is not None:
            # Kafka's brokers hand out the ids Kafka knows: InitProducerId is
            # answered COORDINATOR_NOT_AVAILABLE, and the client asks one of them.
            raise ProducerIdsUnavailable("a gateway hands out no producer ids: Kafka's brokers do")
        if self._producer_ids is None or self._next_pid > self._producer_ids.last:
            block = self._zkstate.claim_producer_ids()  # raises ProducerIdsUnavailable
            self._producer_ids, self._next_pid = block, block.first
        pid = self._next_pid
        self._next_pid += 1
        return pid

    # -- connections ---------------------------------------------------------

    def _serve(self, sock, address, relay_to: Optional[int] = None) -> None:
        """``relay_to``: the Kafka broker a gateway's relay stands for."""
        if not self._listener.admit(address[0]):
            sock.close()
            return
        peer: Optional[Peer] = None
        self._connections.add(sock)
        peer_name = "%s:%s" % address[:2]
        account = self._listener.account(peer_name)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                try:
                    wrapped = tls.accept(sock, self._tls, self.config.tls.handshake_timeout_s)
                except TlsError as exc:
                    self._listener.refused(TLS_HANDSHAKE, "refused a connection from %s: %s", peer_name, exc)
                    return
                self._connections.discard(sock)
                self._connections.add(wrapped)
                sock = wrapped
            # Who the client is: its TLS certificate's name, until SASL says otherwise.
            peer = Peer(address[0], self._sasl_session(address[0]), principal=tls.principal_of(sock),
                        relay_to=relay_to)
            if peer.principal != ANONYMOUS:
                log.info("%s is %s by its TLS certificate", peer_name, peer.principal)
            elif self.config.security.authentication_required:
                account.must_authenticate()  # with SASL
            while not self._stopping:
                frame = self._read_request(sock, account, peer_name, self._request_limit(peer))
                if peer.sasl is not None and peer.sasl.raw:
                    parts = self._sasl_token(frame, peer)
                else:
                    parts = self._handle(frame, peer)
                if peer.authenticated:
                    account.authenticated()
                if peer.closing:
                    # As Kafka (connection.failed.authentication.delay.ms): the
                    # refusal is answered late, so a password guesser is slowed down.
                    gevent.sleep(self.logins.failure_delay_s)
                if parts:
                    # An answer (a large fetch to a slow reader) may take as
                    # long as the idle limit, whatever the request's deadline left.
                    sock.settimeout(self.config.idle_timeout_ms / 1000)
                    send_parts(sock, parts, copy=self._tls is not None)
                if peer.closing:
                    drain_before_close(sock)
                    return
        except PeerClosed:
            pass
        except socket.timeout:
            log.info("closing %s: idle for %d ms", peer_name, self.config.idle_timeout_ms)
        except LimitExceeded as exc:
            self._listener.closed_for(exc)
        except ProtocolError as exc:
            self._listener.refused(MALFORMED, "closing %s: %s", peer_name, exc)
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
                log.warning("connection %s failed: %s", address, exc)
        except Exception:
            # A request we decoded but could not answer: drop this connection,
            # keep serving the others.
            log.exception("closing %s after an unexpected error", address)
        finally:
            if peer is not None and peer.upstream is not None:
                peer.upstream.close()
            account.close()
            self._listener.release(address[0])
            self._connections.discard(sock)
            try:
                sock.close()
            except OSError:
                pass

    def _request_limit(self, peer: Peer) -> int:
        """The largest request ``peer`` may send now: before it has
        authenticated where authentication is required, only what SASL
        needs (Kafka's sasl.server.max.receive.size), so an unknown client
        cannot fill the process's budget for partial frames."""
        if self.config.security.authentication_required and not peer.authenticated:
            return min(self.config.max_request_bytes, UNAUTHENTICATED_REQUEST_BYTES)
        return self.config.max_request_bytes

    def _read_request(self, sock, account: FrameAccount, peer: str, limit: int) -> bytearray:
        """The next request frame (without its size): its first byte may
        take the idle timeout, the rest of it must come within the frame
        timeout of that byte."""
        head = bytearray(4)
        got = 0
        while got < 4:
            got += recv_part(sock, memoryview(head)[got:], account, self.config.idle_timeout_ms / 1000)
            account.progress(True, got)
        size = int.from_bytes(head, "big", signed=True)
        if size < 0 or size > limit:
            raise ProtocolError(f"request of {size} bytes (limit {limit})")
        frame = bytearray()
        got = 0
        while got < size:
            if got == len(frame):
                grown = min(size, max(2 * len(frame), _FIRST_BUFFER))
                account.progress(True, 4 + grown)  # charged before it is allocated
                frame.extend(bytes(grown - len(frame)))
            with memoryview(frame) as view:
                got += recv_part(sock, view[got:], account, None)
        account.progress(False, 0)
        return frame

    def _handle(self, frame: bytes, peer: Peer) -> Optional[list]:
        client_host = peer.host
        if peer.relay_to is not None and gateway.relayed(frame):
            if self.config.security.authentication_required and not peer.authenticated:
                raise ProtocolError("a request to relay before authenticating, and authentication is required")
            if gateway.api_key(frame) != protocol.API_KEY_FETCH or not self.fence_reader.refused(
                    peer.host, gateway.client_id(frame)):
                return self._relay(frame, peer)
            # A fenced client's fetch is answered here (NOT_LEADER_OR_FOLLOWER: the gateway leads nothing).
        request = protocol.decode_request(frame)
        if isinstance(request, UnsupportedApiVersions):
            self.metrics.request(protocol.API_KEY_API_VERSIONS)
            response = protocol.api_versions_response(0, protocol.UNSUPPORTED_VERSION)
            return protocol.encode_response(response, request.correlation_id)
        correlation_id = request.header.correlation_id
        key = request.API_KEY
        self.metrics.request(key)
        if (self.config.security.authentication_required and not peer.authenticated
                and key not in protocol.BEFORE_AUTHENTICATION):
            # Kafka closes such a connection; there is no error a client would read.
            raise ProtocolError(f"{type(request).__name__} before authenticating, and authentication is required")
        if key == protocol.API_KEY_FETCH:
            refused = self.fence_reader.refused(peer.host, request.header.client_id)
            return self._fetch(request, correlation_id, self._may(peer, acl.READ), refused)
        if key == protocol.API_KEY_PRODUCE:
            response = self.handlers.produce(request, self._may(peer, acl.WRITE))
            self._appended.set()
            self._appended = gevent.event.Event()
            if response is None:
                return None
        elif key == protocol.API_KEY_METADATA:
            if self.kafka_view is not None:
                # A client asking again has often met a moved leader: read Kafka's view again soon.
                self.kafka_view.refresh()
                self._wake.set()
            # A listing of every topic leaves out what may not be described: no refusal to log.
            response = self.handlers.metadata(request, self._may(peer, acl.DESCRIBE,
                                                                 say_refusals=not lists_every_topic(request)),
                                              lambda: self._cluster_operations(peer),
                                              lambda topic: self._operations(peer, acl.topic(topic)))
        elif key == protocol.API_KEY_LIST_OFFSETS:
            response = self.handlers.list_offsets(request, self._may(peer, acl.DESCRIBE))
        elif key == protocol.API_KEY_INIT_PRODUCER_ID:
            response = self.handlers.init_producer_id(request, lambda: self._may_produce_idempotently(peer))
        elif key == protocol.API_KEY_CREATE_TOPICS and self.kafka_view is not None:
            response = admin_apis.create_topics_response(request, [
                admin_apis.TopicOutcome(t.name, NOT_CONTROLLER, "topics are Kafka's: ask its controller")
                for t in request.topics], self.config)
        elif key == protocol.API_KEY_CREATE_TOPICS:
            response = self._create_topics(request, peer)
        elif key == protocol.API_KEY_CREATE_PARTITIONS:
            response = self._create_partitions(request, peer)
        elif key == protocol.API_KEY_DESCRIBE_CONFIGS:
            response = admin_apis.describe_configs(request, self.config, self.metadata_cache,
                                                   self._authorizer(peer), peer.principal)
        elif key == protocol.API_KEY_INCREMENTAL_ALTER_CONFIGS:
            response = admin_apis.alter_configs(request, self.config, self.metadata_cache,
                                                self._authorizer(peer), peer.principal)
        elif key == protocol.API_KEY_DESCRIBE_CLUSTER:
            response = admin_apis.describe_cluster(request, self.config.broker_id, self.metadata_cache,
                                                   lambda: self._cluster_operations(peer))
        elif key == protocol.API_KEY_JOIN_GROUP:
            response = self.groups.join_group(request, client_host, peer.principal)
        elif key == protocol.API_KEY_CONSUMER_GROUP_HEARTBEAT:
            response = self.groups.consumer_group_heartbeat(request, client_host, peer.principal)
        elif key in protocol.GROUP_APIS:
            response = getattr(self.groups, protocol.GROUP_APIS[key])(request, peer.principal, client_host)
        elif key == protocol.API_KEY_SASL_HANDSHAKE:
            response = self._sasl_handshake(request, peer)
        elif key == protocol.API_KEY_SASL_AUTHENTICATE:
            response = self._sasl_authenticate(request, peer)
        else:
            response = self.handlers.api_versions(request)
            if self.kafka_view is not None:
                # Kafka's versions for what the relays send on, ours for the rest. The
                # gateway's own port too: a client may take its first answer for the
                # whole cluster's (kafka-python does, before OffsetForLeaderEpoch).
                kafka_answer = (self._relay(frame, peer)[0][4:] if peer.relay_to is not None
                                else self._ask_any_kafka_broker(frame))
                response = gateway.relay_api_versions(response, kafka_answer)
        self.metrics.answered(key, response)
        return protocol.encode_response(response, correlation_id)

    def _relay(self, frame: bytes, peer: Peer) -> Optional[list]:
        """Send ``frame`` to the Kafka broker ``peer`` reaches through this
        relay, and its answer back as it came (none to a Produce with acks=0).
        A broker that cannot be reached closes the client's connection: it
        connects again, or asks for metadata anew."""
        if peer.upstream is None:
            address = self._kafka_brokers.get(peer.relay_to)
            if address is None:
                log.info("relay for Kafka broker %d: the broker is gone; closing", peer.relay_to)
                raise PeerClosed()
            try:
                peer.upstream = socket.create_connection((address.host, address.port),
                                                         timeout=RELAY_CONNECT_TIMEOUT_S)
                # Then as long as the client may wait: a fetch's long poll is Kafka's to end.
                peer.upstream.settimeout(self.config.idle_timeout_ms / 1000)
                peer.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:
                log.info("relay for Kafka broker %d at %s:%d: %s; closing", peer.relay_to, address.host,
                         address.port, exc)
                raise PeerClosed() from None
        try:
            answer = exchange(peer.upstream, frame, gateway.answered(frame))
            return None if answer is None else [answer]
        except OSError as exc:
            log.info("relay for Kafka broker %d: %s; closing", peer.relay_to, exc)
            raise PeerClosed() from None

    def _ask_any_kafka_broker(self, frame: bytes) -> Optional[bytes]:
        """Kafka's answer to ``frame`` (its size left out) from the first of
        its brokers that gives one, on a connection of its own; None if none does."""
        for node, address in sorted(self._kafka_brokers.items()):
            try:
                with socket.create_connection((address.host, address.port), timeout=RELAY_CONNECT_TIMEOUT_S) as sock:
                    return exchange(sock, frame)[4:]
            except OSError as exc:
                log.info("gateway %d: Kafka broker %d did not answer: %s", self.config.broker_id, node, exc)
        return None

    def _fetch(self, request, correlation_id: int, readable, refused: frozenset = frozenset()) -> list:
        """``refused``: partitions fenced from this client (groups/fences.py)."""
        wait_s = min(max(request.max_wait_ms, 0), self.config.max_fetch_wait_ms) / 1000
        deadline = time.monotonic() + wait_s
        while True:
            appended = self._appended
            outcome = self.handlers.fetch(request, readable, refused)
            remaining = deadline - time.monotonic()
            if (outcome.bytes_ready >= max(request.min_bytes, 1) or outcome.has_error
                    or remaining <= 0 or self._stopping):
                self.metrics.fetched(outcome.served)
                if outcome.has_error:
                    self.metrics.answered(request.API_KEY, outcome.response)
                try:
                    return protocol.encode_response(outcome.response, correlation_id, outcome.slices)
                except Exception:
                    close_slices(outcome.slices.values())
                    raise
            close_slices(outcome.slices.values())
            appended.wait(timeout=remaining)
