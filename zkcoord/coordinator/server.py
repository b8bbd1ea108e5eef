"""One zkcoord server: ZooKeeper session, election, the socket server, the embedded broker.

Every server registers under /zkcoord/servers/<id>, answers ClusterMetadata
from anyone and stands for election. The groups are spread over a fixed
number of coordinator slots (coordinator/slots.py; the count is kept at
/zkcoord/slots), and each slot is elected on its own, as seed 001 elects
its one coordinator on /consumers/coordinator, which is slot 0's node. A
server seeks vacant slots up to its fair share and hands over what it holds
beyond it when servers join; for each slot it wins it claims a new epoch of
that slot and runs a :class:`~zkcoord.coordinator.runtime.Coordinator`. A
consumer that registers with a server that does not hold its group's slot
gets NOT_COORDINATOR, naming the server that does. The count is watched: on
any change the server steps down from every slot and stands again under the
new count once no election of the old one remains; and a server that keeps
failing a slot's takeover withdraws from that slot for a while
(coordinator/slots.py says why).

This module owns the ZooKeeper session: its state changes drive the
coordinators (SUSPENDED: stop deciding; LOST: step down, and on the new
session re-register and re-elect, seed 001's handleNewSession). The
election rounds are ``election.py``'s (:class:`SlotElector`, a part of the
server). Runs under gevent; the caller has monkey-patched the process.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import time
from functools import partial
from typing import Optional

import gevent
import gevent.event
import gevent.pool
from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KeeperState

from zkcoord import wire
from zkcoord.addresses import kafka_addresses
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.coordinator import access
from zkcoord.coordinator.core import EXPIRY_REASONS, CoordinatorCore, CoordinatorState
from zkcoord.coordinator.admission import GatedStreamServer
from zkcoord.coordinator.config import ServerConfig
from zkcoord.coordinator.election import SlotElector
from zkcoord.coordinator.kafka_cluster import KafkaClusterWatch
from zkcoord.coordinator.metadata import NOT_AVAILABLE, MetadataView
from zkcoord.coordinator.runtime import Coordinator
from zkcoord.coordinator.slots import Candidacy, SlotCount
from zkcoord.coordinator.log_ends import LogEndReader
from zkcoord.coordinator.topics import TopicSource, TopicWatch
from zkcoord.errors import ConfigError, TlsError, ZkcoordError
from zkcoord.fetch.connection import BrokerConnection
from zkcoord.limits import REFUSED_REGISTRATION, TLS_HANDSHAKE, Guard, abuse_log
from zkcoord.metrics import families
from zkcoord.metrics.endpoint import MetricsEndpoint, MetricsEndpointError
from zkcoord.security import tls
from zkcoord.security.checks import LoginChecks
from zkcoord.security.principal import ANONYMOUS, Principal, user
from zkcoord.security.scram import AuthenticationFailed
from zkcoord.zk import client as zk_client
from zkcoord.zk import layout
from zkcoord.zk import security_store
from zkcoord.zk.cluster_hosts import ClusterHosts
from zkcoord.zk.layout import slot_of, validate_slot_count
from zkcoord.zk.gevent_handler import GeventHandler
from zkcoord.zk.nodes import cluster_id
from zkcoord.zk.reads import ZooKeeperTooOld, check_multi_read
from zkcoord.zk.security import ZooKeeperAuthError
from zkcoord.zk.session import SessionTimeoutWitness, create_own_ephemeral

log = logging.getLogger(__name__)

# How long a connection may sit between requests before it registers (a
# request begun has the frame timeout, zkcoord.limits, for the rest of it;
# where authentication is required, the authentication timeout bounds both).
IDLE_TIMEOUT_S = 60.0
# The longest a ClusterMetadata answer is held for a newer coordinator.
MAX_METADATA_WAIT_S = 5.0
ZK_RECONNECT_MAX_DELAY_S = zk_client.RECONNECT_MAX_DELAY_S
# Coordinator slots of a cluster whose first server was not told a count:
# one, the seed's single coordinator.
DEFAULT_SLOTS = 1
# Open files a server keeps free beyond its members' connections and what it
# has open at start: ZooKeeper, the embedded broker's new segments and clients.
RESERVED_FILES = 200


class ServerError(ZkcoordError):
    """The server could not start: ZooKeeper unreachable, its port taken."""


def open_files() -> int:
    """How many files this process has open now (0 where /proc does not say)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def connection_limit(asked: Optional[int], others: int = 0) -> int:
    """How many connections to serve at once: ``asked``, or all the open-file
    limit allows beyond the files open now (the embedded broker's logs among
    them), ``others`` that may yet open (the embedded broker's connections)
    and RESERVED_FILES more. The soft limit is raised to the hard one
    first: a coordinator holds one connection per member. A server that
    accepted past that would meet EMFILE on accept, and the members it could
    not take would wait for ever instead of being turned away."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        room = 1_000_000
    else:
        room = max(soft - open_files() - others - RESERVED_FILES, 1)
    if asked is None:
        return room
    if asked > room:
        log.warning("max_connections %d exceeds what the open-file limit (%d) leaves room for (%d)",
                    asked, soft, room)
    return asked


class Server(SlotElector):
    def __init__(self, config: ServerConfig):
        self.config = config
        # The process's own registry: two servers in one process count apart.
        self.metrics_registry = families.new_registry()
        zk_metrics = families.ZooKeeperMetrics(self.metrics_registry)
        handler = GeventHandler(on_request=zk_metrics.observe)
        self._zk_log = SessionTimeoutWitness()
        self.zk = zk_client.open_client(
            config.zookeeper, config.zk_security,
            logger=self._zk_log,
            handler=handler,
            timeout=config.zk_session.session_timeout_ms / 1000.0,
            connection_retry=zk_client.reconnecting_for_ever(handler),  # a server never gives up
        )
        zk_metrics.watch(lambda: self.zk.connected)
        self.slots = config.coordinator_slots or DEFAULT_SLOTS  # the cluster's, once started
        # The count the server acts under, as read (None: unreadable; it then holds no slot).
        self._count: Optional[SlotCount] = None
        # The slots it has withdrawn from, its takeovers of them having failed.
        self.candidacy = Candidacy()
        self._waiting_logged: Optional[int] = None  # the count (its zxid) under which it said it waits
        self.coordinators: dict[int, Coordinator] = {}  # by the slot held
        self.core_metrics = families.CoordinatorMetrics(self.metrics_registry, EXPIRY_REASONS)
        # The process's limits, shared by both listeners: one budget of partial frames.
        self.guard = Guard(config.limits, families.ListenerMetrics(self.metrics_registry).refused)
        self._listener = self.guard.listener("coordinator")
        every_state = CoordinatorCore.empty_census()
        self.metrics_registry.register(families.CoordinatorCollector(
            lambda: {slot: coordinator.core for slot, coordinator in self.coordinators.items()},
            lambda: self.slots, group_states=every_state.groups, member_states=every_state.members,
            slot_states=[state.value for state in CoordinatorState]))
        self.metrics_host = config.metrics.host or config.host
        self._metrics_endpoint: Optional[MetricsEndpoint] = None
        self.broker = None
        self.acls: Optional[security_store.AclCache] = None  # with the authorizer on
        self.metadata: Optional[MetadataView] = None
        self._stream: Optional[GatedStreamServer] = None
        self._tls = tls.server_context(config.tls)  # None: plaintext
        # The brokers are reached with the server's TLS and its own credential.
        broker_timeout_s = config.coordinator.log_end_timeout_ms / 1000.0
        broker_tls, credential = tls.client_context(config.tls), config.security.own_credential
        # Where the brokers and topics are learnt: Kafka's Metadata (KRaft), else ZooKeeper's /brokers.
        self.kafka: Optional[KafkaClusterWatch] = None
        if config.kafka_bootstrap is not None:
            self.kafka = KafkaClusterWatch(
                kafka_addresses(config.kafka_bootstrap), config.kafka_metadata_interval_ms / 1000.0,
                partial(BrokerConnection, client_id="zkcoord-coordinator", timeout_s=broker_timeout_s,
                        tls=broker_tls, credential=credential))
        self.topics: TopicSource = self.kafka if self.kafka is not None else TopicWatch(self.zk)
        self.logins = LoginChecks(security_store.CredentialStore(self.zk), config.security,
                                  ClusterHosts(self.zk, kafka=self.kafka),
                                  families.LoginMetrics(self.metrics_registry))  # the broker's too
        # Its coordinators' connections to the brokers, for log ends.
        self.log_ends = LogEndReader(self.zk, broker_timeout_s, tls=broker_tls, credential=credential,
                                     kafka=self.kafka)
        self._running = False
        self._session_lost = False
        self._state_changed = gevent.event.Event()
        self._elector: Optional[gevent.Greenlet] = None
        self._election_wanted = gevent.event.Event()

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._stream.server_port if self._stream else self.config.port

    @property
    def metrics_port(self) -> Optional[int]:
        """The metrics endpoint's port, while it serves (None: not served)."""
        return self._metrics_endpoint.port if self._metrics_endpoint is not None else None

    def start(self) -> None:
        self._running = True
        self.zk.add_listener(self._on_zk_state)
        try:
            zk_client.start(self.zk, timeout=30)
        except ZooKeeperAuthError as exc:
            self.zk.close()
            raise ServerError(f"ZooKeeper at {self.config.zookeeper}: {exc}") from None
        except (Exception, gevent.Timeout) as exc:  # kazoo's errors; its gevent timeout is a BaseException
            self.zk.close()
            detail = str(exc) or "no session within 30 s"
            raise ServerError(f"cannot reach ZooKeeper at {self.config.zookeeper}: {detail}") from None
        try:
            check_multi_read(self.zk)
            zk_client.check_adopted_nodes(self.zk, self.config.zk_security)
            self._count = self._agree_slot_count()
            self.slots = self._count.slots
            cluster_id(self.zk)  # the first broker or server to start creates it, as Kafka's first broker does
            self.topics.start()  # Kafka's Metadata read once: a Kafka unreachable or too old is said now
        except (ZooKeeperTooOld, ConfigError, layout.LayoutError, ZooKeeperAuthError) as exc:
            self.zk.stop()
            self.zk.close()
            raise ServerError(str(exc)) from None
        except ZkcoordError as exc:  # from Kafka's brokers
            self.zk.stop()
            self.zk.close()
            raise ServerError(f"Kafka at {self.config.kafka_bootstrap}: {exc}") from None
        granted = self.zk_session_timeout_ms
        if granted is None:  # only if kazoo's logging changed: the office could not be dated
            self.zk.stop()
            self.zk.close()
            raise ServerError("kazoo did not report the session timeout ZooKeeper granted")
        if granted != self.config.zk_session.session_timeout_ms:
            log.warning("ZooKeeper granted a session timeout of %d ms (asked for %d ms)",
                        granted, self.config.zk_session.session_timeout_ms)
        try:
            listener = socket.create_server((self.config.host, self.config.port), backlog=1024)
        except OSError as exc:
            self.zk.stop()
            self.zk.close()
            raise ServerError(f"cannot listen on {self.config.host}:{self.config.port}: {exc}") from None
        if self.config.metrics.enabled:
            try:
                self._metrics_endpoint = MetricsEndpoint(self.metrics_registry, self.metrics_host,
                                                         self.config.metrics.port).start()
            except MetricsEndpointError as exc:
                listener.close()
                self.zk.stop()
                self.zk.close()
                raise ServerError(str(exc)) from None
        if self.config.security.authorizing:
            self.acls = security_store.AclCache(
                self.zk, self.config.security.acl_change_expiration_ms).start()
        if self.config.broker is not None:
            from zkcoord.broker import Broker
            from zkcoord.broker.gateway import GatewayError

            # A gateway reads a KRaft Kafka's cluster from the same watch as the coordinators.
            self.broker = Broker(self.config.broker, self.zk, metrics=families.BrokerMetrics(self.metrics_registry),
                                 guard=self.guard, logins=self.logins, kafka=self.kafka)
            try:
                self.broker.start()  # first: its logs' files count against the connections' room
            except GatewayError as exc:  # said once, whole: the server does not start
                listener.close()
                if self._metrics_endpoint is not None:
                    self._metrics_endpoint.stop()
                if self.acls is not None:
                    self.acls.stop()
                self.topics.stop()
                self.zk.stop()
                self.zk.close()
                raise ServerError(str(exc)) from None
        limit = connection_limit(self.config.max_connections,
                                 others=self.config.broker.max_connections if self.broker is not None else 0)
        log.info("server %d serves at most %d connections", self.config.server_id, limit)
        self._stream = GatedStreamServer(listener, self._handle, spawn=gevent.pool.Pool(limit))
        self._stream.start()
        # Twice the session timeout: the earlier session's (of the same
        # setting) expiry, and ZooKeeper's tick of lateness in noticing it.
        try:
            self._register(stale_wait_s=2 * granted / 1000)
        except ConfigError as exc:
            self.stop()
            raise ServerError(str(exc)) from None
        self.metadata = MetadataView(self.zk, self.slots, kafka=self.kafka, protocol=self.log_ends.protocol)
        self.metadata.start()
        self._elector = gevent.spawn(self._elect_forever)
        log.info("server %d listening on %s:%d (%d coordinator slot%s)", self.config.server_id, self.config.host,
                 self.port, self.slots, "" if self.slots == 1 else "s")

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop: leave the servers the others count, resign
        (flushing offsets), stop accepting, drain, close."""
        self._running = False
        self._state_changed.set()
        self._election_wanted.set()
        if self._elector is not None:
            self._elector.kill()  # and its takeovers: nothing takes office from here on
        # Counted out first, so that as its slots fall vacant the others'
        # fair share has room for them (at their share, they would not seek
        # them until this process has gone).
        self._unregister()
        self._resign_all()
        self.log_ends.close()
        self.topics.stop()
        if self.metadata is not None:
            self.metadata.stop()
        if self.acls is not None:
            self.acls.stop()
        if self._stream is not None:
            self._stream.stop(timeout=timeout)
        if self.broker is not None:
            self.broker.stop(timeout)
        if self._metrics_endpoint is not None:
            self._metrics_endpoint.stop()
        self.logins.close()
        self.zk.stop()
        self.zk.close()

    @property
    def zk_session_timeout_ms(self) -> Optional[int]:
        """The timeout ZooKeeper granted our session, once connected."""
        return self._zk_log.negotiated_ms

    def describe_slots(self) -> str:
        """Which slots this server coordinates, and at which epochs."""
        held = ", ".join(f"{slot} (epoch {c.epoch})" for slot, c in sorted(self.coordinators.items()))
        return f"coordinator slots held: {held or 'none'} of {self.slots}"

    def log_state(self) -> None:
        """Log every greenlet's stack and the coordinators' groups (on SIGUSR1)."""
        import gevent.util

        log.warning("state of server %d:\n%s", self.config.server_id, "\n".join(gevent.util.format_run_info()))
        log.warning("%s", self.zk.handler.describe(self.zk))
        if self._stream is not None:
            log.warning("hub callback queue: %.3f s behind now, %.3f s at worst; accepting paused %d time(s)%s",
                        self._stream.lag.lag_s, self._stream.lag.worst_s, self._stream.pauses,
                        " (paused now)" if self._stream.gated else "")
        log.warning("%s", self.describe_slots())
        for slot, coordinator in sorted(self.coordinators.items()):
            log.warning("groups of slot %d: %s", slot, coordinator.describe_groups())

    def serve_forever(self) -> None:
        """Run until stopped. Raises ServerError if the ZooKeeper client has
        closed by itself (it should never; a supervisor restarting the process
        is the way back)."""
        while self._running:
            self._state_changed.wait(1.0)
            self._state_changed.clear()
            abuse_log.flush()  # what it held back is summed up even when the abuse has stopped
            if self._running and self.zk.client_state == KeeperState.CLOSED:
                self._resign_all()
                raise ServerError("the ZooKeeper client closed and will not reconnect")

    def _agree_slot_count(self) -> SlotCount:
        """The cluster's slot count: created by the first server. A server
        told another count refuses to start rather than split the groups
        differently from the others (an operator changes the count by
        setting the node: every server follows, _follow_count)."""
        wanted = self.config.coordinator_slots
        try:
            self.zk.create(layout.SLOTS, layout.encode_slot_count(wanted or DEFAULT_SLOTS), makepath=True)
        except NodeExistsError:
            pass
        data, stat = self.zk.get(layout.SLOTS)
        try:
            slots = validate_slot_count(layout.decode_slot_count(data))
        except layout.LayoutError as exc:
            raise ConfigError(f"cannot read the cluster's coordinator slot count: {exc}") from None
        if wanted is not None and wanted != slots:
            raise ConfigError(f"the cluster's groups are spread over {slots} coordinator slots, "
                              f"not {wanted}: the count is fixed once the first server has set it")
        return SlotCount(slots, stat.mzxid)

    def _read_slot_count(self) -> Optional[SlotCount]:
        """The cluster's slot count as it is now, watched; None if its node
        is missing or unreadable (said once, when that begins)."""
        try:
            data, stat = self.zk.get(layout.SLOTS, watch=self._wake_elector)
        except NoNodeError:
            if self.zk.exists(layout.SLOTS, watch=self._wake_elector) is not None:
                return self._read_slot_count()  # created between the two calls
            problem = f"{layout.SLOTS} is missing"
        else:
            try:
                return SlotCount(validate_slot_count(layout.decode_slot_count(data)), stat.mzxid)
            except (layout.LayoutError, ConfigError) as exc:
                problem = str(exc)
        if self._count is not None:
            log.error("server %d cannot read the cluster's coordinator slot count: %s", self.config.server_id,
                      problem)
        return None

    def _follow_count(self, count: Optional[SlotCount]) -> None:
        """The slot count changed, or can no longer be read: step down from
        every slot, then act under ``count`` (None: stand for nothing until
        the count can be read). Its groups may now fall in any slot, and a
        new coordinator of theirs waits for these to end (slots.py)."""
        held = sorted(self.coordinators)
        if count is None:
            log.warning("server %d steps down from every slot it holds (%s) until the slot count can be read",
                        self.config.server_id, held or "none")
        else:
            log.warning("server %d: the cluster's slot count changed to %d (was %d); it steps down from every "
                        "slot it holds (%s) and stands again under the new count", self.config.server_id,
                        count.slots, self.slots, held or "none")
            if self.config.coordinator_slots not in (None, count.slots):
                log.warning("server %d was told --coordinator-slots %d and follows the cluster's %d: restarted "
                            "so, it would refuse to start", self.config.server_id, self.config.coordinator_slots,
                            count.slots)
        self._resign_all()
        self._count = count
        if count is not None:
            self.slots = count.slots

    # -- ZooKeeper session ---------------------------------------------------------------------

    def _on_zk_state(self, state: str) -> None:
        # Called from kazoo's handler: never block here, hand work to greenlets.
        if state == KazooState.SUSPENDED:
            for coordinator in list(self.coordinators.values()):
                coordinator.session_changed(connected=False)
        elif state == KazooState.LOST:
            self._session_lost = True
            # Detached here and now, not when a greenlet gets its turn: the
            # elector may run on the new session first, and its coordinators
            # are not these. Nothing here may act again: suspended, they
            # send nothing, and no CONNECTED will resume them.
            lost, self.coordinators = self.coordinators, {}
            for coordinator in lost.values():
                coordinator.session_changed(connected=False)
            self.zk.handler.spawn(self._step_down_all, lost)
        elif state == KazooState.CONNECTED:
            if self._session_lost:
                self._session_lost = False
                self.zk.handler.spawn(self._handle_new_session)
            elif self.coordinators:
                log.info("ZooKeeper connection back on the same session: coordinators resume")
                for coordinator in list(self.coordinators.values()):
                    # The server it reconnected to may grant the session less
                    # than the one before: the office is dated from the least.
                    coordinator.session_changed(connected=True, granted_ms=self.zk_session_timeout_ms)
        self._state_changed.set()
        self._election_wanted.set()

    def _handle_new_session(self) -> None:
        """Seed 001's handleNewSession: state is gone; register again and re-elect."""
        log.warning("ZooKeeper session expired and renewed: re-registering and re-electing")
        self._register()
        if self._elector is None or self._elector.dead:
            self._elector = gevent.spawn(self._elect_forever)
        self._election_wanted.set()

    def _unregister(self) -> None:
        """Delete this server's node, if it is this session's."""
        self._delete_if_owned(layout.server_path(str(self.config.server_id)))

    def _server_info(self) -> layout.ServerInfo:
        return layout.ServerInfo(str(self.config.server_id), self.config.host, self.port,
                                 withdrawn=tuple(sorted(self.candidacy.withdrawn(time.monotonic()))))

    def _publish_candidacy(self, published: tuple[int, ...]) -> tuple[int, ...]:
        """Write this server's withdrawals into its registration if they
        differ from ``published``; what is published now."""
        info = self._server_info()
        if info.withdrawn != published:
            self.zk.set(layout.server_path(info.server_id), layout.encode_server(info))
            if info.withdrawn:
                log.info("server %d stands for no slot of %s for now", self.config.server_id, list(info.withdrawn))
            else:
                log.info("server %d stands for every slot again", self.config.server_id)
        return info.withdrawn

    def _register(self, stale_wait_s: float = 0.0) -> None:
        """Create this server's ephemeral node, waiting up to
        ``stale_wait_s`` for an earlier session's (a crashed predecessor's)
        to expire; one still there belongs to a live server with this id."""
        info = self._server_info()
        path = layout.server_path(str(self.config.server_id))
        if not create_own_ephemeral(self.zk, path, layout.encode_server(info), stale_wait_s):
            raise ConfigError(f"another live server already uses id {self.config.server_id} "
                              f"(its registration outlived a wait of {stale_wait_s:.1f} s)")

    # -- connections ----------------------------------------------------------------------------

    def _handle(self, sock: socket.socket, address) -> None:
        if not self._listener.admit(address[0]):
            sock.close()
            return
        try:
            self._serve_connection(sock, address)
        finally:
            self._listener.release(address[0])

    def _serve_connection(self, sock: socket.socket, address) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            # Here, not by StreamServer's ssl_context: gevent's handshake there has no deadline.
            try:
                sock = tls.accept(sock, self._tls, self.config.tls.handshake_timeout_s)
            except TlsError as exc:
                self._listener.refused(TLS_HANDSHAKE, "refused a connection from %s:%s: %s", address[0], address[1],
                                       exc)
                return
        channel = Channel(sock, max_frame_size=self.config.max_frame_size, guard=self._listener)
        channel.principal = tls.principal_of(sock)
        if channel.principal != ANONYMOUS:
            log.info("%s is %s by its TLS certificate", channel.peer, channel.principal)
        elif self.config.security.authentication_required:
            channel.account.must_authenticate()  # with the credential of a RegisterConsumer or ResetOffsets
        try:
            while self._running:
                frame = channel.receive(timeout=IDLE_TIMEOUT_S)
                if frame is None:
                    return
                channel.level = frame.version  # answered, and then spoken to, in its own version
                message = frame.message
                if isinstance(message, wire.ClusterMetadataRequest):
                    channel.send(self._metadata_for(message), frame.correlation_id)
                elif type(message) in access.CHECKS:
                    # Requests for the group's coordinator, which then owns the connection.
                    try:
                        principal = self._admit(channel, message)
                        channel.account.authenticated()
                    except wire.WireError as exc:
                        abuse_log.log(REFUSED_REGISTRATION, logging.INFO, "refused %s from %s: %s",
                                      type(message).__name__, channel.peer, exc)
                        if isinstance(exc, wire.AuthenticationFailed):
                            # As Kafka (connection.failed.authentication.delay.ms):
                            # answered late, so a password guesser is slowed down.
                            gevent.sleep(self.logins.failure_delay_s)
                        channel.send(wire.RESPONSES[type(message)](error_code=exc.code, error_message=str(exc)),
                                     frame.correlation_id)
                        return
                    coordinator = self._coordinator_of(message.group_id)
                    if coordinator is None:
                        channel.send(wire.RESPONSES[type(message)](
                            error_code=wire.ErrorCode.NOT_COORDINATOR,
                            error_message=self._not_coordinator(message.group_id)), frame.correlation_id)
                    elif isinstance(message, wire.RegisterConsumerRequest):
                        coordinator.serve_member(channel, message, frame.correlation_id, principal)
                    elif isinstance(message, wire.ResetOffsetsRequest):
                        coordinator.serve_reset(channel, message, frame.correlation_id)
                    else:
                        coordinator.serve_describe(channel, message, frame.correlation_id)
                    return
                else:
                    raise wire.IllegalState(
                        f"{type(message).__name__} is not a request a server answers",
                        correlation_id=frame.correlation_id,
                    )
        except wire.WireError as exc:
            channel.report_refusal(exc)
            try:
                channel.send(wire.ErrorResponse(error_code=exc.code, message=str(exc)), exc.correlation_id or 0)
            except ChannelClosed:
                pass
        except (ChannelClosed, TlsError):  # TLS: an alert from the client ends it as a close does
            pass
        finally:
            channel.close()

    def _admit(self, channel: Channel, message) -> Principal:
        """Who sent ``message`` (its credential, else what the connection
        proved, else ANONYMOUS), if that principal may do it; raises the wire
        error to answer with otherwise."""
        security = self.config.security
        principal = getattr(channel, "principal", ANONYMOUS)  # a TLS client certificate's
        host = channel.peer.rpartition(":")[0]
        name = getattr(message, "user", "")
        if name:
            try:
                self.logins.check_password(host, name, getattr(message, "password", ""))
            except AuthenticationFailed as exc:
                if exc.retriable:  # ZooKeeper unreachable, or too many checks waiting: the member tries again
                    raise wire.CoordinatorNotAvailable(str(exc)) from None
                raise wire.AuthenticationFailed(str(exc)) from None
            principal = user(name)
        elif getattr(message, "password", ""):
            raise wire.AuthenticationFailed("a password without a user")
        delegated = getattr(message, "on_behalf_of", "")
        if delegated:
            if principal not in security.super_principals:
                raise wire.AuthenticationFailed(f"{principal} may not register on behalf of {delegated}: "
                                                f"only a super user (a broker's credential) may")
            try:
                principal = Principal.parse(delegated)
            except ConfigError as exc:
                raise wire.AuthenticationFailed(f"on_behalf_of {delegated!r}: {exc}") from None
        if security.authentication_required and principal == ANONYMOUS:
            raise wire.AuthenticationFailed(
                f"authentication is required: {type(message).__name__} must carry a credential "
                f"(a user and password: RegisterConsumer version 3, ResetOffsets version 2) or come over TLS "
                f"with a client certificate")
        if self.acls is not None:
            access.CHECKS[type(message)](self.acls.acls, principal, host, message, security.super_principals)
        return principal

    def _coordinator_of(self, group_id: str) -> Optional[Coordinator]:
        """The coordinator this server runs for ``group_id``'s slot, if it does and is not deposed."""
        coordinator = self.coordinators.get(slot_of(group_id, self.slots))
        return None if coordinator is None or coordinator.deposed else coordinator

    def _not_coordinator(self, group_id: str) -> str:
        slot = slot_of(group_id, self.slots)
        holder = self.metadata.holder(slot) if self.metadata is not None else -1
        where = f"slot {slot} of {self.slots}, " if self.slots > 1 else ""
        who = f"server {holder}" if holder >= 0 and holder != self.config.server_id else "being elected"
        return (f"server {self.config.server_id} does not coordinate group {group_id!r} "
                f"({where}coordinator: {who})")

    def _metadata_for(self, request: wire.ClusterMetadataRequest) -> wire.ClusterMetadataResponse:
        """The answer to ``request``; held, if it asks, while its group's slot
        has no coordinator newer than the one it knows (MAX_METADATA_WAIT_S at most)."""
        if request.max_wait_ms <= 0 or self.metadata is None:
            return self.cluster_metadata(request.group_id)
        return self.metadata.answer_when(request.group_id, request.known_epoch,
                                         min(request.max_wait_ms / 1000.0, MAX_METADATA_WAIT_S))

    def cluster_metadata(self, group_id: str = "") -> wire.ClusterMetadataResponse:
        """The answer to ClusterMetadataRequest for ``group_id``, from memory (metadata.py)."""
        if self.metadata is None:
            return NOT_AVAILABLE
        return self.metadata.answer(group_id)
