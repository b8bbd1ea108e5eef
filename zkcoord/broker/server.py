"""The broker process shell: a gevent StreamServer speaking the Kafka protocol,
one greenlet per connection (capped by a pool), the partition logs it hosts,
and a reconcile greenlet that follows ZooKeeper.

Requests on one connection are handled in order, one at a time, as a Kafka
broker does. A frame that cannot be served closes the connection; nothing a
client sends can stop the broker or touch a log it did not validate. What a
client may hold is bounded (zkcoord.limits): its idle time between requests,
a request's time from its first byte to its last, its address's connections,
and the bytes of partial requests the process keeps (grown as they arrive,
not taken at once from the size a client announces).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import socket
import time
from typing import Optional

import gevent
import gevent.event
import gevent.pool
import gevent.server
from gevent.socket import wait_write
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from prometheus_client import CollectorRegistry

from zkcoord.broker import admin_apis, protocol
from zkcoord.broker.config import BrokerConfig
from zkcoord.broker.groups import GroupBridge
from zkcoord.broker.handlers import NONE, REQUEST_TIMED_OUT, Handlers, MetadataCache
from zkcoord.broker.log import PartitionLog
from zkcoord.broker.protocol import FileRange, ProtocolError, UnsupportedApiVersions
from zkcoord.broker.zkstate import ZkState
from zkcoord.errors import TlsError, ZkcoordError
from zkcoord.limits import MALFORMED, TLS_HANDSHAKE, FrameAccount, Guard, LimitExceeded, abuse_log
from zkcoord.metrics.families import BrokerMetrics
from zkcoord.security import tls
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

log = logging.getLogger(__name__)

_RECONCILE_EVERY_S = 5.0  # a safety net for a lost watch; watches do the real work
# A request's buffer starts this large and doubles as its bytes arrive, each
# growth charged to the process's budget before it is made.
_FIRST_BUFFER = 64 * 1024


class BrokerError(ZkcoordError):
    """The broker could not start or was used in the wrong state."""


class _Closed(Exception):
    """The peer closed the connection (or we decided to)."""


@dataclasses.dataclass(eq=False)
class Connection:
    """One client connection: its socket, where it comes from, and who it
    proved to be (a TLS client certificate), for authorization to read."""

    sock: socket.socket
    address: tuple
    principal: Principal = ANONYMOUS


class Broker:
    """An embedded Kafka-protocol broker.

    ``zk_client`` must be started by the caller, with a gevent handler when the
    process runs on gevent; the broker registers itself through it and never
    stops it. ``metrics``: where it counts (its own registry if not given);
    ``guard``: the process's limits at work, shared with its other listener
    (one of its own, counting nothing, if not given).
    """

    def __init__(self, config: BrokerConfig, zk_client: KazooClient, metrics: Optional[BrokerMetrics] = None,
                 guard: Optional[Guard] = None):
        self.config = config
        self._listener = (guard or Guard(config.limits)).listener("broker")
        self.zk = zk_client
        self.metrics = metrics if metrics is not None else BrokerMetrics(CollectorRegistry())
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.metadata_cache = MetadataCache()
        self._pid_counter = 0
        self._pid_base = int(time.time()) << 32
        self.handlers = Handlers(config.broker_id, self.metadata_cache, self.logs, self._next_producer_id,
                                 config.sendfile_threshold, on_append=self.metrics.produced)
        self._appended = gevent.event.Event()
        self._reconciled = gevent.event.Event()
        self._wake = gevent.event.Event()
        self._pool = gevent.pool.Pool(config.max_connections)
        self._server: Optional[gevent.server.StreamServer] = None
        self._tls = tls.server_context(config.tls)  # None: plaintext
        self._connections: set = set()
        self.metrics.watch_connections(lambda: len(self._connections))
        self._greenlets: list = []
        self._stopping = False
        self._zkstate: Optional[ZkState] = None
        self.port: Optional[int] = None
        self.groups: Optional[GroupBridge] = None

    # -- lifecycle -------------------------------------------------------

    def start(self) -> None:
        if self._server is not None:
            raise BrokerError("broker already started")
        os.makedirs(self.config.data_dir, exist_ok=True)
        self._server = gevent.server.StreamServer((self.config.host, self.config.port), self._serve,
                                                  spawn=self._pool, backlog=256)
        try:
            self._server.init_socket()
        except OSError as exc:
            self._server = None
            raise BrokerError(f"cannot listen on {self.config.host}:{self.config.port}: {exc}") from None
        self.port = self._server.server_port
        # Registered as Kafka registers a listener: "SSL://host:port" and its
        # protocol in listener_security_protocol_map.
        protocol = "SSL" if self._tls is not None else "PLAINTEXT"
        endpoint = layout.Endpoint(protocol, protocol, self.config.advertised, self.port)
        registration = layout.BrokerRegistration.for_endpoints(
            self.config.broker_id, [endpoint], timestamp_ms=int(time.time() * 1000),
            rack=self.config.rack)
        self._zkstate = ZkState(self.zk, registration, self._wake.set)
        try:
            try:
                self.metadata_cache.cluster_id = self._zkstate.cluster_id()
            except layout.LayoutError as exc:
                raise BrokerError(f"cannot serve without the cluster id: {exc}") from None
            self._zkstate.register(wait_s=self.config.register_timeout_ms / 1000)
            self._reconcile()
        except Exception:
            self._server.close()
            self._server = None
            try:
                self._zkstate.unregister()
            except Exception:  # ephemeral anyway; the original error matters more
                pass
            for plog in self.logs.values():
                plog.close()
            self.logs.clear()
            raise
        self.zk.add_listener(self._on_zk_state)
        self.groups = GroupBridge(
            self.config.broker_id, self.zk, self._live_brokers, lambda: self.metadata_cache.topic_ids,
            heartbeat_interval_ms=self.config.group_consumer_heartbeat_interval_ms,
            session_timeout_ms=self.config.group_consumer_session_timeout_ms, log_end=self._log_end,
            tls=self.config.tls)
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
        if self.groups is not None:
            self.groups.close()
        self._pool.join(timeout=timeout)
        self._pool.kill(block=True, timeout=1)
        gevent.killall(self._greenlets, block=True, timeout=1)
        self.zk.remove_listener(self._on_zk_state)
        if self.zk.connected:
            try:
                self._zkstate.unregister()
            except Exception as exc:  # the node is ephemeral: it goes with the session anyway
                log.warning("broker %d: could not remove registration: %s", self.config.broker_id, exc)
        for plog in self.logs.values():
            plog.flush()
            plog.close()
        self.logs.clear()
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
                    self._zkstate.ensure_registered()
                    self._reconcile()
            except Exception as exc:
                log.warning("broker %d: reconcile with ZooKeeper failed: %s", self.config.broker_id, exc)
                gevent.sleep(0.5)
                self._wake.set()

    def _reconcile(self) -> None:
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

    def _live_brokers(self) -> dict[int, tuple[str, int]]:
        return {node: (addr.host, addr.port) for node, addr in self.metadata_cache.brokers.items()}

    def _next_producer_id(self) -> int:
        # Unique per broker start (seconds), per broker id, and per allocation.
        self._pid_counter += 1
        return (self._pid_base | (self._pid_counter & 0xFFFFF) << 12
                | self.config.broker_id & 0xFFF)

    # -- connections ---------------------------------------------------------

    def _serve(self, sock, address) -> None:
        if not self._listener.admit(address[0]):
            sock.close()
            return
        self._connections.add(sock)
        peer = "%s:%s" % address[:2]
        account = self._listener.account(peer)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                try:
                    wrapped = tls.accept(sock, self._tls, self.config.tls.handshake_timeout_s)
                except TlsError as exc:
                    self._listener.refused(TLS_HANDSHAKE, "refused a connection from %s: %s", peer, exc)
                    return
                self._connections.discard(sock)
                self._connections.add(wrapped)
                sock = wrapped
            connection = Connection(sock, address, tls.principal_of(sock))
            if connection.principal != ANONYMOUS:
                log.info("%s is %s by its TLS certificate", peer, connection.principal)
            while not self._stopping:
                frame = self._read_request(sock, account, peer)
                parts = self._handle(frame, connection)
                if parts:
                    # An answer (a large fetch to a slow reader) may take as
                    # long as the idle limit, whatever the request's deadline left.
                    sock.settimeout(self.config.idle_timeout_ms / 1000)
                    _send_parts(sock, parts, copy=self._tls is not None)
        except _Closed:
            pass
        except socket.timeout:
            log.info("closing %s: idle for %d ms", peer, self.config.idle_timeout_ms)
        except LimitExceeded as exc:
            self._listener.closed_for(exc)
        except ProtocolError as exc:
            self._listener.refused(MALFORMED, "closing %s: %s", peer, exc)
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
                log.warning("connection %s failed: %s", address, exc)
        except Exception:
            # A request we decoded but could not answer: drop this connection,
            # keep serving the others.
            log.exception("closing %s after an unexpected error", address)
        finally:
            account.close()
            self._listener.release(address[0])
            self._connections.discard(sock)
            try:
                sock.close()
            except OSError:
                pass

    def _read_request(self, sock, account: FrameAccount, peer: str) -> bytearray:
        """The next request frame (without its size): its first byte may
        take the idle timeout, the rest of it must come within the frame
        timeout of that byte."""
        head = bytearray(4)
        got = 0
        while got < 4:
            got += _recv_part(sock, memoryview(head)[got:], account, self.config.idle_timeout_ms / 1000)
            account.progress(True, got)
        size = int.from_bytes(head, "big", signed=True)
        if size < 0 or size > self.config.max_request_bytes:
            raise ProtocolError(f"request of {size} bytes (limit {self.config.max_request_bytes})")
        frame = bytearray()
        got = 0
        while got < size:
            if got == len(frame):
                grown = min(size, max(2 * len(frame), _FIRST_BUFFER))
                account.progress(True, 4 + grown)  # charged before it is allocated
                frame.extend(bytes(grown - len(frame)))
            with memoryview(frame) as view:
                got += _recv_part(sock, view[got:], account, None)
        account.progress(False, 0)
        return frame

    def _handle(self, frame: bytes, connection: Connection) -> Optional[list]:
        client_host = connection.address[0]
        request = protocol.decode_request(frame)
        if isinstance(request, UnsupportedApiVersions):
            self.metrics.request(protocol.API_KEY_API_VERSIONS)
            response = protocol.api_versions_response(0, protocol.UNSUPPORTED_VERSION)
            return protocol.encode_response(response, request.correlation_id)
        correlation_id = request.header.correlation_id
        key = request.API_KEY
        self.metrics.request(key)
        if key == protocol.API_KEY_FETCH:
            return self._fetch(request, correlation_id)
        if key == protocol.API_KEY_PRODUCE:
            response = self.handlers.produce(request)
            self._appended.set()
            self._appended = gevent.event.Event()
            if response is None:
                return None
        elif key == protocol.API_KEY_METADATA:
            response = self.handlers.metadata(request)
        elif key == protocol.API_KEY_LIST_OFFSETS:
            response = self.handlers.list_offsets(request)
        elif key == protocol.API_KEY_INIT_PRODUCER_ID:
            response = self.handlers.init_producer_id(request)
        elif key == protocol.API_KEY_CREATE_TOPICS:
            response = self._create_topics(request)
        elif key == protocol.API_KEY_DESCRIBE_CONFIGS:
            response = admin_apis.describe_configs(request, self.config, self.metadata_cache)
        elif key == protocol.API_KEY_DESCRIBE_CLUSTER:
            response = admin_apis.describe_cluster(request, self.config.broker_id, self.metadata_cache)
        elif key == protocol.API_KEY_JOIN_GROUP:
            response = self.groups.join_group(request, client_host)
        elif key == protocol.API_KEY_CONSUMER_GROUP_HEARTBEAT:
            response = self.groups.consumer_group_heartbeat(request, client_host)
        elif key in protocol.GROUP_APIS:
            response = getattr(self.groups, protocol.GROUP_APIS[key])(request)
        else:
            response = self.handlers.api_versions(request)
        self.metrics.answered(key, response)
        return protocol.encode_response(response, correlation_id)

    def _fetch(self, request, correlation_id: int) -> list:
        wait_s = min(max(request.max_wait_ms, 0), self.config.max_fetch_wait_ms) / 1000
        deadline = time.monotonic() + wait_s
        while True:
            appended = self._appended
            outcome = self.handlers.fetch(request)
            remaining = deadline - time.monotonic()
            if (outcome.bytes_ready >= max(request.min_bytes, 1) or outcome.has_error
                    or remaining <= 0 or self._stopping):
                self.metrics.fetched(outcome.served)
                if outcome.has_error:
                    self.metrics.answered(request.API_KEY, outcome.response)
                try:
                    return protocol.encode_response(outcome.response, correlation_id, outcome.slices)
                except Exception:
                    _close_slices(outcome.slices.values())
                    raise
            _close_slices(outcome.slices.values())
            appended.wait(timeout=remaining)


    def _create_topics(self, request):
        """Carry out admin_apis' plan in ZooKeeper, then wait (up to the
        request's timeout) until this broker's metadata shows the new topics,
        so that a client may produce to them at once; past the timeout they
        exist but are answered REQUEST_TIMED_OUT, as Kafka answers."""
        outcomes = []
        for step in admin_apis.plan_create_topics(request, self.config):
            if isinstance(step, admin_apis.TopicOutcome):
                outcomes.append(step)
                continue
            try:
                assignment = self._zkstate.create_topic(step.name, step.partitions, step.assignment,
                                                        step.validate_only)
            except (ZkcoordError, KazooException) as exc:  # ours by their kind; ZooKeeper's as a timeout
                log.info("create topic %s refused: %s", step.name, exc)
                outcomes.append(admin_apis.outcome_of_error(step.name, exc))
                continue
            outcomes.append(admin_apis.TopicOutcome(step.name, NONE, None, assignment))
            if not step.validate_only:
                log.info("broker %d created topic %s (%d partitions)", self.config.broker_id, step.name,
                         len(assignment))
        created = {o.name for o in outcomes if o.error_code == NONE and not getattr(request, "validate_only", False)}
        deadline = time.monotonic() + max(request.timeout_ms, 0) / 1000
        while created - self.metadata_cache.topics.keys() and time.monotonic() < deadline:
            reconciled = self._reconciled
            self._wake.set()
            reconciled.wait(timeout=deadline - time.monotonic())
        if request.timeout_ms > 0:
            late = created - self.metadata_cache.topics.keys()
            outcomes = [o._replace(error_code=REQUEST_TIMED_OUT,
                                   error_message="the topic was created; brokers had not loaded it by the timeout")
                        if o.name in late else o for o in outcomes]
        return admin_apis.create_topics_response(request, outcomes, self.config)


def _recv_part(sock, view, account: FrameAccount, idle_s: Optional[float]) -> int:
    """recv_into ``view``: before a frame has begun within ``idle_s`` (a
    socket.timeout past it), within it within what is left of its deadline
    (LimitExceeded past it)."""
    while True:
        left = account.remaining()
        if left is not None:
            account.check()
        sock.settimeout(idle_s if left is None else left)
        try:
            n = sock.recv_into(view)
        except socket.timeout:
            if left is None:
                raise
            continue  # the check above refuses it
        if n == 0:
            raise _Closed()
        return n


def _send_parts(sock, parts: list, copy: bool = False) -> None:
    """Send a response; closes the descriptors of its file ranges. ``copy``:
    read the file ranges and send them (TLS must encrypt what sendfile would
    hand the kernel as it is)."""
    try:
        for part in parts:
            if isinstance(part, FileRange):
                (_copy_range if copy else _sendfile)(sock, part)
            else:
                sock.sendall(part)
    finally:
        _close_slices(part for part in parts if isinstance(part, FileRange))


def _close_slices(regions) -> None:
    for region in regions:
        os.close(region.fd)


# What one read of a file range copies for a TLS connection.
_COPY_CHUNK = 256 * 1024


def _copy_range(sock, part: FileRange) -> None:
    """A file range read and sent through the socket (TLS encrypts it)."""
    offset, left = part.offset, part.count
    while left > 0:
        data = os.pread(part.fd, min(left, _COPY_CHUNK), offset)
        if not data:
            raise _Closed()  # the file shrank under us (retention)
        sock.sendall(data)
        offset += len(data)
        left -= len(data)


def _sendfile(sock, part: FileRange) -> None:
    """os.sendfile on gevent's non-blocking socket: wait for room, send more."""
    offset, left = part.offset, part.count
    fileno = sock.fileno()
    while left > 0:
        try:
            sent = os.sendfile(fileno, part.fd, offset, left)
        except BlockingIOError:
            wait_write(fileno, timeout=sock.gettimeout(), timeout_exc=socket.timeout("send timed out"))
            continue
        if sent == 0:
            raise _Closed()  # the file shrank under us (retention) or the peer left
        offset += sent
        left -= sent
