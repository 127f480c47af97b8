"""Prometheus metrics (own registry) and the small HTTP server for /metrics, health and debug.

Endpoints: ``/metrics``; ``/healthz`` (process alive); ``/readyz`` (initial lists applied
and, with leader election, leading or standing by); ``/debug/state`` (per-node counted
totals as JSON); ``POST /debug/audit`` (run an audit now, answer with its result).

The server binds to 127.0.0.1 unless given another address, which then needs a token.
With a token the ``/debug/*`` endpoints need ``Authorization: Bearer <token>`` (401
without, 403 wrong); the first three stay open for probes and Prometheus. ``POST
/debug/audit`` runs at most once per audit window (429 with ``Retry-After`` inside it;
requests refused by the token check do not use up the window). See
:mod:`decice_scheduler.debugaccess`.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from decice_scheduler.debugaccess import AuditWindow, BearerAuth, require_token_off_loopback

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

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(p + name, doc, labels, registry=r)

        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(p + name, doc, labels, registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(p + name, doc, buckets=buckets, registry=r)

        self.scheduled = counter("scheduled", "Pods bound by this scheduler")
        self.unschedulable = counter(
            "unschedulable", "Scheduling attempts that found no feasible node"
        )
        self.bind_errors = counter("bind_errors", "Failed binds by reason", "reason")
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
        self.queue_depth = gauge("queue_depth", "Pending pods by queue", "queue")
        self.drift_nodes = gauge("drift_nodes", "Nodes that drifted at the last audit")
        self.drift = counter("drift", "Drifted nodes found by audits (cumulative)")
        self.audits = counter("audits", "Audits run")
        self.relists = counter("relists", "Full relists of nodes and pods", "reason")
        self.gap_deletions = counter(
            "gap_deletions",
            "Objects found deleted by a relist (their DELETED event was missed)",
            "resource",
        )
        self.watch_restarts = counter("watch_restarts", "Watch streams re-opened", "resource")
        self.events = counter(
            "events", "Event writes (creates and series updates) by reason", "reason"
        )
        self.events_dropped = counter(
            "events_dropped",
            "Events not written: queue-full, rate-limit (FailedScheduling), write-error",
            "cause",
        )
        self.scores_published = counter(
            "placement_scores_published", "AddOnPlacementScore status writes"
        )
        self.scores_seconds = histogram(
            "placement_scores_seconds",
            "CPU time of one placement-score computation (the loop thread's)",
            _DECISION_BUCKETS,
        )
        self.nodes = gauge("nodes", "Nodes in the state")
        self.pods = gauge("pods", "Pods in the state")
        self.leader = gauge("leader", "1 while this instance may schedule")
        self.ready = gauge("ready", "1 once the initial lists are applied")
        self.gang_groups = gauge("gang_groups", "Pod groups by state (waiting, placed)", "state")
        self.gang_reserved = gauge(
            "gang_reserved_pods", "Group members reserved (assumed, not bound)"
        )
        self.gang_placed = counter(
            "gang_placed", "Pod groups placed (minMember fitted at once, binds issued)"
        )
        self.gang_timeouts = counter(
            "gang_timeouts", "Pod groups whose reservations were released at their timeout"
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


IDLE_TIMEOUT = 10.0  # seconds a connection may send nothing before it is closed
MAX_CONNECTIONS = 32  # served at once; one more is closed at once


class _BoundedServer(ThreadingHTTPServer):
    """At most MAX_CONNECTIONS connections at once (each times out when idle): a local
    client opening hundreds can no longer hold a thread each."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("metrics server: more than %d connections at once", MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _BoundedServer6(_BoundedServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """A threaded HTTP server; handlers for debug endpoints are plain callables.

    ``token`` None is allowed on a loopback ``host`` only (ValueError otherwise);
    ``audit_window`` is the least number of seconds between two HTTP-requested audits.
    """

    def __init__(
        self,
        port: int,
        metrics: Metrics,
        *,
        ready: Callable[[], bool],
        state: Callable[[], Any],
        audit: Callable[[], Any],
        host: str = "127.0.0.1",
        token: str | None = None,
        audit_window: float = 10.0,
    ) -> None:
        require_token_off_loopback(host, token)
        auth = BearerAuth(token)
        window = AuditWindow(audit_window)

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT  # an idle connection is closed, its thread freed

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("http: " + format, *args)

            def _send(
                self,
                code: int,
                body: bytes,
                ctype: str = "text/plain",
                headers: dict[str, str] | None = None,
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _allowed(self) -> bool:
                code = auth.check(self.headers.get("Authorization"))
                if code == 200:
                    return True
                log.info("debug endpoint %s: %d for %s", self.path, code, self.client_address[0])
                if code == 401:
                    self._send(
                        401,
                        b"a bearer token is required",
                        headers={"WWW-Authenticate": 'Bearer realm="decice-scheduler"'},
                    )
                else:
                    self._send(403, b"wrong token")
                return False

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
                    if self._allowed():
                        self._json(state)
                else:
                    self._send(404, b"not found")

            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != "/debug/audit":
                    self._send(404, b"not found")
                    return
                if not self._allowed():
                    return
                wait = window.acquire()
                if wait > 0:
                    retry = str(max(1, math.ceil(wait)))
                    self._send(
                        429,
                        f"one audit per {window.seconds:g} s; retry in {retry} s".encode(),
                        headers={"Retry-After": retry},
                    )
                    return
                self._json(audit)

            def _json(self, fn: Callable[[], Any]) -> None:
                try:
                    data = fn()
                except Exception as exc:  # a debug endpoint reports, never kills the server
                    self._send(500, str(exc).encode())
                    return
                self._send(200, json.dumps(data).encode(), "application/json")

        server = _BoundedServer6 if ":" in host else _BoundedServer
        self._server = server((host, port), Handler)
        self.host = host
        self.port = self._server.server_address[1]
        self.authenticated = auth.enabled
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
