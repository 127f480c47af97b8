"""Prometheus metrics (own registry) and the small HTTP server for /metrics, health and debug.

Endpoints: ``/metrics``; ``/healthz`` (process alive); ``/readyz`` (initial lists applied
and, with leader election, leading or standing by); ``/debug/state`` (per-node counted
totals as JSON); ``POST /debug/audit`` (run an audit now, answer with its result).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Metrics", "MetricsServer"]

log = logging.getLogger("decice_scheduler.metrics")

# Fine buckets for one decision (tens of microseconds to a few milliseconds matter).
_DECISION_BUCKETS = (
    0.00005,
    0.0001,
    0.0002,
    0.0003,
    0.0004,
    0.0005,
    0.00075,
    0.001,
    0.00125,
    0.0015,
    0.00175,
    0.002,
    0.0025,
    0.003,
    0.004,
    0.005,
    0.0075,
    0.01,
    0.02,
    0.05,
    0.1,
    0.5,
)
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    """Every metric of the scheduler, registered in its own registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "decice_scheduler_"
        self.scheduled = Counter(p + "scheduled", "Pods bound by this scheduler", registry=r)
        self.unschedulable = Counter(
            p + "unschedulable", "Scheduling attempts that found no feasible node", registry=r
        )
        self.bind_errors = Counter(
            p + "bind_errors", "Failed binds by reason", ["reason"], registry=r
        )

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(p + name, doc, buckets=buckets, registry=r)

        self.e2e_latency = histogram(
            "e2e_scheduling_seconds",
            "From the pod first seen pending to its bind succeeding",
            _LATENCY_BUCKETS,
        )
        self.bind_latency = histogram(
            "bind_seconds", "Duration of the binding POST", _LATENCY_BUCKETS
        )
        self.algorithm_latency = histogram(
            "algorithm_seconds",
            "Duration of one scheduling cycle (filter + score)",
            _LATENCY_BUCKETS,
        )
        self.decision_latency = histogram(
            "decision_seconds",
            "One scheduling decision: pod parsed, snapshot taken, filtered and scored",
            _DECISION_BUCKETS,
        )
        self.decision_cpu = histogram(
            "decision_cpu_seconds",
            "CPU time of one scheduling decision (the loop thread's own CPU: without the "
            "time other processes held the core)",
            _DECISION_BUCKETS,
        )
        self.queue_depth = Gauge(p + "queue_depth", "Pending pods by queue", ["queue"], registry=r)
        self.drift_nodes = Gauge(
            p + "drift_nodes", "Nodes that drifted at the last audit", registry=r
        )
        self.drift = Counter(p + "drift", "Drifted nodes found by audits (cumulative)", registry=r)
        self.audits = Counter(p + "audits", "Audits run", registry=r)
        self.relists = Counter(
            p + "relists", "Full relists of nodes and pods", ["reason"], registry=r
        )
        self.gap_deletions = Counter(
            p + "gap_deletions",
            "Objects found deleted by a relist (their DELETED event was missed)",
            ["resource"],
            registry=r,
        )
        self.watch_restarts = Counter(
            p + "watch_restarts", "Watch streams re-opened", ["resource"], registry=r
        )
        self.events = Counter(p + "events", "FailedScheduling events written", registry=r)
        self.events_dropped = Counter(
            p + "events_dropped", "FailedScheduling events skipped by the rate limit", registry=r
        )
        self.nodes = Gauge(p + "nodes", "Nodes in the state", registry=r)
        self.pods = Gauge(p + "pods", "Pods in the state", registry=r)
        self.leader = Gauge(p + "leader", "1 while this instance may schedule", registry=r)
        self.ready = Gauge(p + "ready", "1 once the initial lists are applied", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """A threaded HTTP server; handlers for debug endpoints are plain callables."""

    def __init__(
        self,
        port: int,
        metrics: Metrics,
        *,
        ready: Callable[[], bool],
        state: Callable[[], Any],
        audit: Callable[[], Any],
        host: str = "0.0.0.0",
    ) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug("http: " + format, *args)

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    self._send(200, b"ok")
                elif path == "/readyz":
                    ok = ready()
                    self._send(200 if ok else 503, b"ok" if ok else b"not ready")
                elif path == "/debug/state":
                    self._json(state)
                else:
                    self._send(404, b"not found")

            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] == "/debug/audit":
                    self._json(audit)
                else:
                    self._send(404, b"not found")

            def _json(self, fn: Callable[[], Any]) -> None:
                try:
                    data = fn()
                except Exception as exc:  # a debug endpoint reports, never kills the server
                    self._send(500, str(exc).encode())
                    return
                self._send(200, json.dumps(data).encode(), "application/json")

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
