"""``zkcoord broker``: run one broker alone, in the foreground, until SIGTERM
or SIGINT. Also runnable as ``python -m zkcoord.broker.cli``."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("broker", help="run a Kafka-protocol broker alone",
                                   description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


# Kafka's own port: a broker started alone listens where Kafka's clients look
# first (a server's embedded broker picks a free port unless told).
KAFKA_PORT = 9092
# A broker started alone asks ZooKeeper for a session of 10 s unless told (a
# server asks for ZooKeeperConfig's default).
STANDALONE_SESSION_TIMEOUT_MS = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from zkcoord import settings
    from zkcoord.broker.config import BrokerConfig, LogConfig
    from zkcoord.limits import ConnectionLimits
    from zkcoord.metrics.config import MetricsConfig
    from zkcoord.security.config import TlsConfig
    from zkcoord.security.config import add_options as security_options
    from zkcoord.zk.config import ZooKeeperConfig
    from zkcoord.zk.security import ZkSecurity

    parser.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, chroot allowed")
    settings.add_options(parser, ZkSecurity)
    # A gateway needs what only a server has (Kafka's Metadata, from --kafka-bootstrap).
    settings.add_options(parser, BrokerConfig, defaults={"port": KAFKA_PORT}, exclude=("gateway",))
    settings.add_options(parser, LogConfig)
    settings.add_options(parser, MetricsConfig)
    settings.add_options(parser, TlsConfig)
    settings.add_options(parser, ConnectionLimits)
    security_options(parser)
    parser.add_argument("--port-file", help="write the bound ports here once serving (port, metrics_port)")
    parser.add_argument("--zk-timeout", type=float, default=15.0,
                        help="seconds to wait for ZooKeeper at start (default 15)")
    settings.add_options(parser, ZooKeeperConfig, defaults={"session_timeout_ms": STANDALONE_SESSION_TIMEOUT_MS})
    parser.add_argument("--zk-session-timeout", type=float, default=None,
                        help="the ZooKeeper session timeout in seconds (an older spelling of --zk-session-timeout-ms)")


def zookeeper_session(args: argparse.Namespace):
    """The ZooKeeperConfig the command line describes (--zk-session-timeout, in seconds, wins where given)."""
    from zkcoord import settings
    from zkcoord.zk.config import ZooKeeperConfig

    if args.zk_session_timeout is not None:
        return ZooKeeperConfig(session_timeout_ms=round(args.zk_session_timeout * 1000))
    return settings.from_args(ZooKeeperConfig, args)


def config_from(args: argparse.Namespace):
    """The BrokerConfig the command line describes."""
    from zkcoord import settings
    from zkcoord.broker.config import BrokerConfig, LogConfig
    from zkcoord.limits import ConnectionLimits
    from zkcoord.security.config import TlsConfig
    from zkcoord.security.config import from_args as security_from_args

    return settings.from_args(BrokerConfig, args, log=settings.from_args(LogConfig, args),
                              tls=settings.from_args(TlsConfig, args), limits=settings.from_args(ConnectionLimits, args),
                              security=security_from_args(args))


def run(args) -> int:
    from gevent import monkey

    if not monkey.is_module_patched("socket"):
        monkey.patch_all()

    import logging

    import gevent.event
    from zkcoord.zk import client as zk_client
    from zkcoord.zk.gevent_handler import GeventHandler
    from zkcoord.zk.security import ZkSecurity

    from zkcoord import settings
    from zkcoord.broker.server import Broker
    from zkcoord.limits import Guard
    from zkcoord.security.checks import LoginChecks
    from zkcoord.zk.cluster_hosts import ClusterHosts
    from zkcoord.zk.security_store import CredentialStore
    from zkcoord.metrics import families
    from zkcoord.metrics.config import MetricsConfig
    from zkcoord.metrics.endpoint import MetricsEndpoint
    from zkcoord.readiness import write_port_file
    from zkcoord.errors import ZkcoordError
    from zkcoord.interrupts import on_stop

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    registry = families.new_registry()  # this process's own
    zk_metrics = families.ZooKeeperMetrics(registry)
    try:
        config = config_from(args)
        metrics_config = settings.from_args(MetricsConfig, args)
        zk_security = settings.from_args(ZkSecurity, args)
        client = zk_client.open_client(args.zookeeper, zk_security,
                                       handler=GeventHandler(on_request=zk_metrics.observe),
                                       timeout=zookeeper_session(args).session_timeout_ms / 1000.0)
    except ZkcoordError as exc:
        print(f"zkcoord broker: {exc}", file=sys.stderr)
        return 2
    zk_metrics.watch(lambda: client.connected)
    try:
        zk_client.start(client, timeout=args.zk_timeout)
    except Exception as exc:
        print(f"zkcoord broker: cannot reach ZooKeeper at {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    try:
        zk_client.check_adopted_nodes(client, zk_security)
    except ZkcoordError as exc:
        print(f"zkcoord broker: {exc}", file=sys.stderr)
        client.stop()
        client.close()
        return 1
    broker = Broker(config, client, metrics=families.BrokerMetrics(registry),
                    guard=Guard(config.limits, families.ListenerMetrics(registry).refused),
                    logins=LoginChecks(CredentialStore(client), config.security, ClusterHosts(client),
                                       families.LoginMetrics(registry)))
    endpoint = None
    try:
        if metrics_config.enabled:
            endpoint = MetricsEndpoint(registry, metrics_config.host or config.host, metrics_config.port).start()
        broker.start()
    except ZkcoordError as exc:
        print(f"zkcoord broker: {exc}", file=sys.stderr)
        if endpoint is not None:
            endpoint.stop()
        client.stop()
        return 1
    if args.port_file:
        write_port_file(args.port_file, port=broker.port,
                        **({"metrics_port": endpoint.port} if endpoint is not None else {}))
    done = gevent.event.Event()
    on_stop(done.set, greenlet=True)
    done.wait()
    broker.stop(timeout=10)
    if endpoint is not None:
        endpoint.stop()
    client.stop()
    client.close()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="zkcoord broker", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
