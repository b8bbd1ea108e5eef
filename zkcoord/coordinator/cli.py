"""`zkcoord server`: run one server (coordinator candidate, with an embedded broker by default).

Its options are the settings of ServerConfig, CoordinatorConfig and the
embedded broker's (zkcoord.settings), so a default is written once.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from zkcoord import settings
    from zkcoord.broker.config import BrokerConfig, LogConfig
    from zkcoord.coordinator.config import CoordinatorConfig, ServerConfig
    from zkcoord.limits import ConnectionLimits
    from zkcoord.metrics.config import MetricsConfig
    from zkcoord.security.config import TlsConfig
    from zkcoord.security.config import add_options as security_options
    from zkcoord.zk.config import ZooKeeperConfig
    from zkcoord.zk.security import ZkSecurity

    p = subparsers.add_parser("server", help="run a zkcoord server in the foreground until SIGTERM")
    settings.add_options(p, ServerConfig)
    settings.add_options(p, CoordinatorConfig)
    p.add_argument("--no-broker", action="store_true", help="run without the embedded broker")
    # The embedded broker shares the server's id and host.
    settings.add_options(p, BrokerConfig, only=("port", "data_dir", "group_consumer_heartbeat_interval_ms",
                                                "group_consumer_session_timeout_ms", "fetch_fence_idle_ms", "gateway"),
                         flags={"port": "--broker-port"}, optional=("data_dir",))
    settings.add_options(p, LogConfig)
    settings.add_options(p, MetricsConfig)
    settings.add_options(p, TlsConfig)
    settings.add_options(p, ZkSecurity)
    settings.add_options(p, ZooKeeperConfig)
    settings.add_options(p, ConnectionLimits)
    security_options(p)
    p.add_argument("--port-file", type=Path, default=None,
                   help="once serving, write the bound ports here as JSON (port, broker_port, metrics_port)")
    p.set_defaults(func=run)


def config_from(args: argparse.Namespace):
    """The ServerConfig the command line describes."""
    from zkcoord import settings
    from zkcoord.broker.config import BrokerConfig, LogConfig
    from zkcoord.coordinator.config import CoordinatorConfig, ServerConfig
    from zkcoord.errors import ConfigError
    from zkcoord.limits import ConnectionLimits
    from zkcoord.metrics.config import MetricsConfig
    from zkcoord.security.config import TlsConfig
    from zkcoord.security.config import from_args as security_from_args
    from zkcoord.zk.config import ZooKeeperConfig
    from zkcoord.zk.security import ZkSecurity

    tls = settings.from_args(TlsConfig, args)  # both listeners: a client reaching one reaches the other alike
    limits = settings.from_args(ConnectionLimits, args)  # both listeners'
    security = security_from_args(args)  # both: who may do what
    broker = None
    if args.no_broker and getattr(args, "BrokerConfig.gateway"):
        raise ConfigError("--gateway is a mode of the embedded broker: it cannot go with --no-broker")
    if not args.no_broker:
        broker = settings.from_args(BrokerConfig, args, broker_id=getattr(args, "ServerConfig.server_id"),
                                    host=getattr(args, "ServerConfig.host"),
                                    log=settings.from_args(LogConfig, args), tls=tls, limits=limits,
                                    security=security)
    return settings.from_args(ServerConfig, args, coordinator=settings.from_args(CoordinatorConfig, args),
                              broker=broker, metrics=settings.from_args(MetricsConfig, args), tls=tls,
                              zk_security=settings.from_args(ZkSecurity, args),
                              zk_session=settings.from_args(ZooKeeperConfig, args), limits=limits, security=security)


def run(args: argparse.Namespace) -> int:
    # gevent must patch the process before the networking modules are used.
    from gevent import monkey

    monkey.patch_all()
    import signal

    import gevent

    from zkcoord.coordinator.server import Server
    from zkcoord.interrupts import on_stop

    config = config_from(args)
    server = Server(config)
    server.start()
    on_stop(server.stop, greenlet=True)
    gevent.signal_handler(signal.SIGUSR1, server.log_state)  # kill -USR1: what every greenlet is doing
    broker_port = server.broker.port if server.broker is not None else None
    ports = {"broker_port": broker_port, "metrics_port": server.metrics_port}
    ports = {name: port for name, port in ports.items() if port is not None}
    if args.port_file is not None:
        from zkcoord.readiness import write_port_file

        write_port_file(args.port_file, port=server.port, **ports)
    print(f"server {config.server_id} ready: coordinator protocol on {config.host}:{server.port}"
          + (f", broker on {config.host}:{broker_port}" if broker_port else "")
          + (f", metrics on {server.metrics_host}:{server.metrics_port}" if server.metrics_port else ""), flush=True)
    server.serve_forever()
    return 0
