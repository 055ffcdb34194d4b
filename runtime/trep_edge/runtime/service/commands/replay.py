"""``trep-edge replay``: publish a recorded dataset to MQTT as sensor readings (``service/replay.py``)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from trep_edge.help_format import HelpFormatter


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge replay`` subcommand's arguments."""
    p = subparsers.add_parser(
        "replay",
        help="publish a recorded dataset to MQTT as sensor readings (a simulator)",
        description="Publish DATA as JSON readings {ts, values} with QoS 1, one stream per series, at --rate "
        "readings/s per stream or --speed times real time. Timestamps advance by --period per reading.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("data", help="UCR-anomaly .txt, sensor .csv (format: trep-edge train --help), or PhysioNet 2019 "
                   ".tar.gz (patients as beds); a path or a path under the data folder")
    p.add_argument("--topic", required=True, help="topic template with one {name} for the stream id, e.g. icu/{bed}/vitals")
    p.add_argument("--broker", default="127.0.0.1:1883", help="HOST:PORT")
    p.add_argument("--rate", type=float, help="readings per second per stream (0 = as fast as possible)")
    p.add_argument("--speed", type=float, help="multiple of real time (rate = speed / period); default 1")
    p.add_argument("--period", type=float, default=1.0, help="seconds between a stream's readings (timestamps)")
    p.add_argument("--channels", help="comma-separated dataset columns to send (PhysioNet default: the bedside vitals)")
    p.add_argument("--rename", help="DATA=MODEL channel renames, e.g. O2Sat=SpO2,Resp=RESP")
    p.add_argument("--max-series", type=int, help="at most this many streams (e.g. PhysioNet patients)")
    p.add_argument("--stream", help="stream id (single-series files) or stream name prefix (PhysioNet: bed)")
    p.add_argument("--start", type=int, default=0, help="first step to send")
    p.add_argument("--limit", type=int, help="send at most this many steps")
    p.add_argument("--qos", type=int, default=1, choices=[0, 1, 2], help="publish QoS")
    p.add_argument("--client-id", default="", help="MQTT client id ('' = random)")
    p.add_argument("--username", help="broker user (password: --password-file or $TREP_EDGE_MQTT_PASSWORD)")
    p.add_argument("--password-file", help="file holding the broker password")
    p.add_argument("--ca-file", help="CA certificate: connect with TLS")
    p.add_argument("--cert-file", help="client certificate (TLS)")
    p.add_argument("--key-file", help="client key (TLS)")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    return p


def _broker(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--broker must be HOST:PORT, got {text!r}")
    return host, int(port)


def run(args: argparse.Namespace) -> int:
    """``trep-edge replay``: publish a dataset as sensor readings."""
    from trep_edge.datasets.paths import resolve

    from trep_edge.runtime.service.replay import Publisher, load_series, parse_rename, replay, step_range

    if args.rate is not None and args.speed is not None:
        raise ValueError("give --rate (readings/s per stream) or --speed (multiple of real time), not both")
    rate = args.rate if args.rate is not None else (args.speed or 1.0) / args.period
    channels = args.channels.split(",") if args.channels else None
    series = load_series(resolve(args.data, args.data_root), channels, parse_rename(args.rename), args.max_series,
                         args.stream)  # fmt: skip
    host, port = _broker(args.broker)
    password = None
    if args.password_file:
        password = Path(args.password_file).read_text().rstrip("\r\n")
    elif args.username:
        password = os.environ.get("TREP_EDGE_MQTT_PASSWORD")
    publisher = Publisher(host, port, args.client_id, args.username or "", password, args.ca_file or "",
                          args.cert_file or "", args.key_file or "")  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        publisher.wait_connected()
        steps = len(step_range(series, args.start, args.limit))
        pace = "as fast as possible" if rate == 0 else f"{rate:g} readings/s per stream"
        print(f"replaying {len(series)} stream(s) x {steps} steps from {args.data} to {args.topic}, {pace}",
              flush=True)
        stats = replay(series, publisher, args.topic, rate, args.period, start=args.start, limit=args.limit,
                       qos=args.qos, stop=stop)  # fmt: skip
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        publisher.close()
    print(f"published {stats.published} readings of {stats.streams} stream(s) in {stats.seconds:.1f} s"
          + (f"; {stats.unconfirmed} QoS 1 publishes were not acknowledged" if stats.unconfirmed else ""))  # fmt: skip
    return 1 if stats.unconfirmed else 0
