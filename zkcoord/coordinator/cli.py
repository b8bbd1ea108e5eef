"""`zkcoord server`: run one server (coordinator candidate, with an embedded broker by default)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("server", help="run a zkcoord server in the foreground until SIGTERM")
    p.add_argument("--id", type=int, required=True, help="server id, unique in the cluster")
    p.add_argument("--zookeeper", required=True, help="ZooKeeper connect string (host:port,...[/chroot])")
    p.add_argument("--host", default="127.0.0.1", help="address to bind and advertise (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="coordinator-protocol port (default: a free one)")
    p.add_argument("--broker-port", type=int, default=0, help="embedded broker's Kafka port (default: a free one)")
    p.add_argument("--data-dir", type=Path, default=None, help="embedded broker's log directory")
    p.add_argument("--port-file", type=Path, default=None,
                   help="once serving, write the bound ports here as JSON (port, broker_port)")
    p.add_argument("--no-broker", action="store_true", help="run without the embedded broker")
    p.add_argument("--zk-session-timeout-ms", type=int, default=6000)
    p.add_argument("--coordinator-slots", type=int, default=None,
                   help="coordinator slots the groups are spread over, each elected on its own, so that every "
                        "server coordinates a share; set by a cluster's first server, fixed after that "
                        "(default: the cluster's count, 1 for a new cluster)")
    p.add_argument("--max-connections", type=int, default=None,
                   help="most connections served at once (default: as many as the open-file limit allows)")
    p.add_argument("--min-session-timeout-ms", type=int, default=1000,
                   help="smallest consumer session timeout accepted")
    p.add_argument("--max-session-timeout-ms", type=int, default=60_000)
    p.add_argument("--rebalance-timeout-ms", type=int, default=10_000,
                   help="how long a rebalance waits for every member's answer")
    p.add_argument("--max-rebalance-retries", type=int, default=4)
    p.add_argument("--rebalance-backoff-ms", type=int, default=500)
    p.add_argument("--offset-flush-interval-ms", type=int, default=1000)
    p.add_argument("--rebalance-delay-ms", type=int, default=100,
                   help="joins and leaves within this delay make one rebalance")
    p.add_argument("--initial-rebalance-delay-ms", type=int, default=1000,
                   help="a new group's first rebalance waits this long after each join, up to the rebalance "
                        "timeout, so that members joining together make one rebalance (0: no wait)")
    p.add_argument("--rebalance-protocol", choices=("incremental", "eager"), default="incremental",
                   help="incremental: stop only what moves (default); eager: seed 001's stop-all/start-all")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # gevent must patch the process before the networking modules are used.
    from gevent import monkey

    monkey.patch_all()
    import signal

    import gevent

    from zkcoord.coordinator.config import CoordinatorConfig
    from zkcoord.coordinator.server import Server, ServerConfig
    from zkcoord.errors import ConfigError

    coordinator = CoordinatorConfig(
        min_session_timeout_ms=args.min_session_timeout_ms,
        max_session_timeout_ms=args.max_session_timeout_ms,
        rebalance_timeout_ms=args.rebalance_timeout_ms,
        max_rebalance_retries=args.max_rebalance_retries,
        rebalance_backoff_ms=args.rebalance_backoff_ms,
        offset_flush_interval_ms=args.offset_flush_interval_ms,
        rebalance_delay_ms=args.rebalance_delay_ms,
        initial_rebalance_delay_ms=args.initial_rebalance_delay_ms,
        rebalance_protocol=args.rebalance_protocol,
    )
    broker = None
    if not args.no_broker:
        from zkcoord.broker.config import BrokerConfig

        if args.data_dir is None:
            raise ConfigError("--data-dir is required for the embedded broker (or pass --no-broker)")
        broker = BrokerConfig(broker_id=args.id, data_dir=str(args.data_dir), host=args.host, port=args.broker_port)
    server = Server(
        ServerConfig(
            server_id=args.id, zookeeper=args.zookeeper, host=args.host, port=args.port,
            zk_session_timeout_ms=args.zk_session_timeout_ms, max_connections=args.max_connections,
            coordinator=coordinator, broker=broker, coordinator_slots=args.coordinator_slots,
        )
    )
    server.start()
    gevent.signal_handler(signal.SIGTERM, server.stop)
    gevent.signal_handler(signal.SIGINT, server.stop)
    gevent.signal_handler(signal.SIGUSR1, server.log_state)  # kill -USR1: what every greenlet is doing
    broker_port = server.broker.port if server.broker is not None else None
    if args.port_file is not None:
        from zkcoord.readiness import write_port_file

        write_port_file(args.port_file, port=server.port, **({"broker_port": broker_port} if broker_port else {}))
    print(f"server {args.id} ready: coordinator protocol on {args.host}:{server.port}"
          + (f", broker on {args.host}:{broker_port}" if broker_port else ""), flush=True)
    server.serve_forever()
    return 0
