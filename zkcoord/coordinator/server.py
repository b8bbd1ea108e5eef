"""One zkcoord server: ZooKeeper session, election, the socket server, the embedded broker.

Every server registers under /zkcoord/servers/<id>, answers ClusterMetadata
from anyone and runs the elector on /consumers/coordinator (seed 001 section 3).
The one elected claims a new coordinator epoch and runs the
:class:`~zkcoord.coordinator.runtime.Coordinator`; the others send consumers
that try to register to it with NOT_COORDINATOR.

This module owns the ZooKeeper session: its state changes drive the
coordinator (SUSPENDED: stop deciding; LOST: step down, and on the new
session re-register and re-elect, seed 001's handleNewSession).
Runs under gevent; the caller has monkey-patched the process.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
from dataclasses import dataclass, field
from typing import Optional

import gevent
import gevent.event
import gevent.pool
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError
from zkcoord.zk.gevent_handler import GeventHandler
from kazoo.protocol.states import KeeperState
from kazoo.retry import KazooRetry

from zkcoord import wire
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.coordinator.admission import GatedStreamServer
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.metadata import MetadataView
from zkcoord.coordinator.runtime import Coordinator
from zkcoord.coordinator.store import CoordinatorStore
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.zk import layout
from zkcoord.zk.reads import ZooKeeperTooOld, check_multi_read
from zkcoord.zk.session import SessionTimeoutWitness

log = logging.getLogger(__name__)

# How long a connection may sit without sending its first request.
IDLE_TIMEOUT_S = 60.0
# Reconnecting to ZooKeeper: for ever, backing off to at most this between rounds.
ZK_RECONNECT_MAX_DELAY_S = 2.0
# Takeovers failing in a row before this server lets another one try.
MAX_FAILED_TAKEOVERS = 3
# Open files a server keeps free beyond its members' connections and what it
# has open at start: ZooKeeper, the embedded broker's new segments and clients.
RESERVED_FILES = 200


class ServerError(ZkcoordError):
    """The server could not start: ZooKeeper unreachable, its port taken."""


@dataclass(frozen=True)
class ServerConfig:
    server_id: int
    zookeeper: str
    host: str = "127.0.0.1"
    port: int = 0
    zk_session_timeout_ms: int = 6000
    max_connections: Optional[int] = None  # None: as many as the open-file limit leaves room for
    max_frame_size: int = wire.MAX_FRAME_SIZE
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    broker: Optional[object] = None  # a BrokerConfig to embed a broker, or None

    def __post_init__(self) -> None:
        if not isinstance(self.server_id, int) or not 0 <= self.server_id <= 2**31 - 1:
            raise ConfigError(f"server id must be an integer in [0, 2^31-1], got {self.server_id!r}")
        if not self.zookeeper:
            raise ConfigError("a ZooKeeper connect string is required")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        if self.zk_session_timeout_ms < 500:
            raise ConfigError("zk_session_timeout_ms must be at least 500")
        if (self.max_connections is not None and self.max_connections < 1) or self.max_frame_size < 1024:
            raise ConfigError("max_connections must be positive and max_frame_size at least 1024")


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


class Server:
    def __init__(self, config: ServerConfig):
        self.config = config
        handler = GeventHandler()
        self._zk_log = SessionTimeoutWitness()
        self.zk = KazooClient(
            logger=self._zk_log,
            hosts=config.zookeeper,
            handler=handler,
            timeout=config.zk_session_timeout_ms / 1000.0,
            # kazoo's default gives up after one failed round of reconnecting
            # and closes the client for good; a server never gives up.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=ZK_RECONNECT_MAX_DELAY_S,
                                        sleep_func=handler.sleep_func),
        )
        self.coordinator: Optional[Coordinator] = None
        self.broker = None
        self._stream: Optional[GatedStreamServer] = None
        self._running = False
        self._session_lost = False
        self._state_changed = gevent.event.Event()
        self._elector: Optional[gevent.Greenlet] = None
        self._failed_takeovers = 0
        self.metadata = MetadataView(self.zk)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._stream.server_port if self._stream else self.config.port

    def start(self) -> None:
        self._running = True
        self.zk.add_listener(self._on_zk_state)
        try:
            self.zk.start(timeout=30)
        except (Exception, gevent.Timeout) as exc:  # kazoo's errors; its gevent timeout is a BaseException
            self.zk.close()
            detail = str(exc) or "no session within 30 s"
            raise ServerError(f"cannot reach ZooKeeper at {self.config.zookeeper}: {detail}") from None
        try:
            check_multi_read(self.zk)
        except ZooKeeperTooOld as exc:
            self.zk.stop()
            self.zk.close()
            raise ServerError(str(exc)) from None
        granted = self.zk_session_timeout_ms
        if granted is None:  # only if kazoo's logging changed: the office could not be dated
            self.zk.stop()
            self.zk.close()
            raise ServerError("kazoo did not report the session timeout ZooKeeper granted")
        if granted != self.config.zk_session_timeout_ms:
            log.warning("ZooKeeper granted a session timeout of %d ms (asked for %d ms)",
                        granted, self.config.zk_session_timeout_ms)
        try:
            listener = socket.create_server((self.config.host, self.config.port), backlog=1024)
        except OSError as exc:
            self.zk.stop()
            self.zk.close()
            raise ServerError(f"cannot listen on {self.config.host}:{self.config.port}: {exc}") from None
        if self.config.broker is not None:
            from zkcoord.broker import Broker

            self.broker = Broker(self.config.broker, self.zk)
            self.broker.start()  # first: its logs' files count against the connections' room
        limit = connection_limit(self.config.max_connections,
                                 others=self.config.broker.max_connections if self.broker is not None else 0)
        log.info("server %d serves at most %d connections", self.config.server_id, limit)
        self._stream = GatedStreamServer(listener, self._handle, spawn=gevent.pool.Pool(limit))
        self._stream.start()
        self._register()
        self.metadata.start()
        self._elector = gevent.spawn(self._elect_forever)
        log.info("server %d listening on %s:%d", self.config.server_id, self.config.host, self.port)

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop: resign (flushing offsets), stop accepting, drain, close."""
        self._running = False
        self._state_changed.set()
        if self._elector is not None:
            self._elector.kill(block=False)
        self._resign()
        self.metadata.stop()
        if self._stream is not None:
            self._stream.stop(timeout=timeout)
        if self.broker is not None:
            self.broker.stop(timeout)
        self.zk.stop()
        self.zk.close()

    @property
    def zk_session_timeout_ms(self) -> Optional[int]:
        """The timeout ZooKeeper granted our session, once connected."""
        return self._zk_log.negotiated_ms

    def log_state(self) -> None:
        """Log every greenlet's stack and the coordinator's groups (on SIGUSR1)."""
        import gevent.util

        log.warning("state of server %d:\n%s", self.config.server_id, "\n".join(gevent.util.format_run_info()))
        log.warning("%s", self.zk.handler.describe(self.zk))
        if self._stream is not None:
            log.warning("hub callback queue: %.3f s behind now, %.3f s at worst; accepting paused %d time(s)%s",
                        self._stream.lag.lag_s, self._stream.lag.worst_s, self._stream.pauses,
                        " (paused now)" if self._stream.gated else "")
        if self.coordinator is not None:
            log.warning("groups: %s", self.coordinator.describe_groups())

    def serve_forever(self) -> None:
        """Run until stopped. Raises ServerError if the ZooKeeper client has
        closed by itself (it should never; a supervisor restarting the process
        is the way back)."""
        while self._running:
            self._state_changed.wait(1.0)
            self._state_changed.clear()
            if self._running and self.zk.client_state == KeeperState.CLOSED:
                self._resign()
                raise ServerError("the ZooKeeper client closed and will not reconnect")

    # -- ZooKeeper session ---------------------------------------------------------------------

    def _on_zk_state(self, state: str) -> None:
        # Called from kazoo's handler: never block here, hand work to greenlets.
        if state == KazooState.SUSPENDED:
            if self.coordinator is not None:
                self.coordinator.session_changed(connected=False)
        elif state == KazooState.LOST:
            self._session_lost = True
            self.zk.handler.spawn(self._resign)
        elif state == KazooState.CONNECTED:
            if self._session_lost:
                self._session_lost = False
                self.zk.handler.spawn(self._handle_new_session)
            elif self.coordinator is not None:
                log.info("ZooKeeper connection back on the same session: coordinator resumes")
                self.coordinator.session_changed(connected=True)
        self._state_changed.set()

    def _handle_new_session(self) -> None:
        """Seed 001's handleNewSession: state is gone; register again and re-elect."""
        log.warning("ZooKeeper session expired and renewed: re-registering and re-electing")
        self._register()
        if self._elector is None or self._elector.dead:
            self._elector = gevent.spawn(self._elect_forever)

    def _register(self) -> None:
        info = layout.ServerInfo(str(self.config.server_id), self.config.host, self.port)
        path = layout.server_path(str(self.config.server_id))
        try:
            self.zk.create(path, layout.encode_server(info), ephemeral=True, makepath=True)
        except NodeExistsError:
            data, stat = self.zk.get(path)
            if stat.ephemeralOwner != self.zk.client_id[0]:
                raise ConfigError(f"another live server already uses id {self.config.server_id}") from None

    # -- election -------------------------------------------------------------------------------

    def _elect_forever(self) -> None:
        """Elect at once; otherwise watch /consumers/coordinator and try again when it goes."""
        while self._running:
            try:
                self._elect_once()
            except Exception as exc:  # connection trouble: kazoo raises its own errors; never give up
                log.warning("election attempt failed: %s", exc)
                gevent.sleep(0.5)

    def _elect_once(self) -> None:
        """One round: keep office, take it, or wait for it to fall vacant.
        Holding the election node without a working coordinator (a takeover
        that failed half way) is repaired here: we take office again."""
        if self.coordinator is not None and self.coordinator.deposed:
            self._resign()  # someone newer holds the epoch: give the node up
            return
        if self.coordinator is not None:
            gone = gevent.event.Event()
            if self.zk.exists(layout.COORDINATOR_PATH, watch=lambda event: gone.set()) is None:
                gone.set()
            gone.wait(1.0)
            if self.coordinator is not None and self.coordinator.deposed:
                self._resign()
            return
        try:
            self.zk.create(
                layout.COORDINATOR_PATH, layout.encode_coordinator(str(self.config.server_id)),
                ephemeral=True, makepath=True,
            )
        except NodeExistsError:
            gone = gevent.event.Event()
            stat = self.zk.exists(layout.COORDINATOR_PATH, watch=lambda event: gone.set())
            if stat is None or stat.ephemeralOwner != self.zk.client_id[0]:
                if stat is not None:
                    gone.wait(5.0)  # bounded: re-check even if a watch was lost
                return
            log.warning("server %d holds the election without a coordinator; taking office again",
                        self.config.server_id)
        try:
            self._become_coordinator()
            self._failed_takeovers = 0
        except Exception as exc:  # kazoo's connection errors too: never a zombie in office
            self._failed_takeovers += 1
            log.error("could not take office (attempt %d): %s: %s", self._failed_takeovers, type(exc).__name__, exc)
            if self._failed_takeovers >= MAX_FAILED_TAKEOVERS:
                self._give_up_election()  # let another server try
                self._failed_takeovers = 0
            gevent.sleep(0.5)

    def _become_coordinator(self) -> None:
        """Claim a new epoch and start a coordinator; on any failure, nothing
        is left running (the election node stays ours, and the next round of
        the elector tries again)."""
        store = CoordinatorStore(self.zk, self.config.server_id)
        epoch = store.claim_epoch()
        coordinator = Coordinator(store, self.config.coordinator, epoch.number, self.zk_session_timeout_ms)
        # Published before it starts, so that a suspension meanwhile reaches it.
        if self.zk.state != KazooState.CONNECTED:
            coordinator.session_changed(connected=False)
        self.coordinator = coordinator
        try:
            coordinator.start()
        except BaseException:
            self.coordinator = None
            coordinator.stop()
            raise
        log.info("server %d is the coordinator, epoch %d", self.config.server_id, epoch.number)

    def _give_up_election(self) -> None:
        """Delete our election node, if it is still ours."""
        try:
            data, stat = self.zk.get(layout.COORDINATOR_PATH)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(layout.COORDINATOR_PATH, version=stat.version)
        except Exception:  # gone already, or no connection: the session's end removes it
            pass

    def _resign(self) -> None:
        coordinator, self.coordinator = self.coordinator, None
        if coordinator is None:
            return
        coordinator.stop()
        self._give_up_election()
        log.info("server %d resigned as coordinator (epoch %d)", self.config.server_id, coordinator.epoch)

    # -- connections ----------------------------------------------------------------------------

    def _handle(self, sock: socket.socket, address) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        channel = Channel(sock, max_frame_size=self.config.max_frame_size)
        try:
            while self._running:
                frame = channel.receive(timeout=IDLE_TIMEOUT_S)
                if frame is None:
                    return
                message = frame.message
                if isinstance(message, wire.ClusterMetadataRequest):
                    channel.send(self.cluster_metadata(), frame.correlation_id)
                elif isinstance(message, wire.RegisterConsumerRequest):
                    coordinator = self.coordinator
                    if coordinator is None or coordinator.deposed:
                        channel.send(
                            wire.RegisterConsumerResponse(
                                error_code=wire.ErrorCode.NOT_COORDINATOR,
                                error_message=f"server {self.config.server_id} is not the coordinator",
                            ),
                            frame.correlation_id,
                        )
                        return
                    coordinator.serve_member(channel, message, frame.correlation_id)
                    return
                else:
                    raise wire.IllegalState(
                        f"{type(message).__name__} is not a request a server answers",
                        correlation_id=frame.correlation_id,
                    )
        except wire.WireError as exc:
            log.info("closing %s after a bad frame: %s", channel.peer, exc)
            try:
                channel.send(wire.ErrorResponse(error_code=exc.code, message=str(exc)), exc.correlation_id or 0)
            except ChannelClosed:
                pass
        except ChannelClosed:
            pass
        finally:
            channel.close()

    def cluster_metadata(self) -> wire.ClusterMetadataResponse:
        """The answer to ClusterMetadataRequest, from memory (metadata.py)."""
        return self.metadata.answer()

