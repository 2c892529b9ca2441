"""Prometheus metrics of one app (``GET /metrics``), in a registry of its own.

Two kinds: what the pools report as their jobs end (a latency histogram and an outcome counter
per pool: step, compile, sandbox, replay, doctor), and what is read from the app's state when
scraped (queue depths, open sessions and their endings, the models' readiness). Nothing lives in
a module global: two apps in one process (the tests) count apart.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from app.engine.factories.remote import RemoteEngines
from app.web.runtime.executors import Pools
from app.web.runtime.sessions import SessionStore

__all__ = ["CONTENT_TYPE", "ForwardFigures", "Metrics", "Watched"]

#: The exposition format's media type.
CONTENT_TYPE = CONTENT_TYPE_LATEST

# From a cached step (milliseconds) to a Doctor's examination or a compile at its time limit.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class ForwardFigures:
    """The local model's forward passes so far (all 0 before it is loaded).

    Attributes:
        batches: forward passes of one-token steps (each serves one batch).
        rows: the sessions' steps they served (over ``batches``: the mean batch size).
        prompts: prompts fed (a session's first step, or a prefix rebuilt).
        prompts_reused: those copied from an earlier session's identical prompt.
    """

    batches: int = 0
    rows: int = 0
    prompts: int = 0
    prompts_reused: int = 0


@dataclass(frozen=True)
class Watched:
    """What the metrics read from the app at each scrape.

    Attributes:
        pools: the worker pools (they also get the metrics' observers).
        sessions: the live sessions.
        remotes: the remote engines.
        ready: whether the local model is loaded.
        stopping: whether the server is shutting down.
        forward: the local model's forward passes so far.
    """

    pools: Pools
    sessions: SessionStore
    remotes: RemoteEngines
    ready: Callable[[], bool]
    stopping: Callable[[], bool]
    forward: Callable[[], ForwardFigures] = ForwardFigures


class Metrics:
    """The app's metrics: the pools report to it, ``/metrics`` renders it.

    Args:
        state: what to read at each scrape (its pools get this object's observers).
    """

    def __init__(self, state: Watched) -> None:
        self.registry = CollectorRegistry()
        self.seconds = Histogram(
            "maskscope_work_seconds",
            "Time a job ran on its pool's thread (step: a session's step, back or force, or a "
            "stream's run; compile: a compile that missed the cache; doctor: an examination)",
            ["pool"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.jobs = Counter(
            "maskscope_jobs",
            "Jobs by pool and outcome: ok, the error code they failed with (a sandbox's "
            "pydantic_error, source_refused...), or refused (a full queue)",
            ["pool", "outcome"],
            registry=self.registry,
        )
        self.registry.register(_StateCollector(state))
        for pool in state.pools.all():
            pool.observer = functools.partial(self._job, pool.label)

    def _job(self, pool: str, seconds: float | None, outcome: str) -> None:
        self.jobs.labels(pool, outcome).inc()
        if seconds is not None:
            self.seconds.labels(pool).observe(seconds)

    def render(self) -> bytes:
        """Every metric in Prometheus' text format."""
        return generate_latest(self.registry)


class _StateCollector(Collector):
    """What the app's state says at each scrape."""

    def __init__(self, state: Watched) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        state = self.state
        waiting = GaugeMetricFamily(
            "maskscope_queue_waiting", "Jobs waiting for a thread, by pool", labels=["pool"]
        )
        running = GaugeMetricFamily(
            "maskscope_queue_running", "Jobs running on a thread, by pool", labels=["pool"]
        )
        threads = GaugeMetricFamily(
            "maskscope_queue_threads", "Threads of each pool", labels=["pool"]
        )
        for pool in state.pools.all():
            waiting.add_metric([pool.label], pool.waiting)
            running.add_metric([pool.label], pool.running)
            threads.add_metric([pool.label], pool.threads)
        yield from (waiting, running, threads)
        open_now = len(state.sessions)
        yield GaugeMetricFamily("maskscope_sessions_open", "Live sessions", value=open_now)
        yield GaugeMetricFamily(
            "maskscope_sessions_memory_bytes",
            "KV caches and step records of the live sessions",
            value=state.sessions.memory_bytes(),
        )
        endings = CounterMetricFamily(
            "maskscope_sessions_ended",
            "Sessions ended by the server: expired (idle), evicted_client (the client's own "
            "cap), evicted_room (the server's cap), evicted_memory (the memory budget)",
            labels=["cause"],
        )
        for cause in ("expired", "evicted_client", "evicted_room", "evicted_memory"):
            endings.add_metric([cause], state.sessions.endings[cause])
        yield endings
        yield GaugeMetricFamily(
            "maskscope_model_ready", "Whether the local model is loaded", value=int(state.ready())
        )
        remote = GaugeMetricFamily(
            "maskscope_remote_engine_ready",
            "Whether each remote engine passed its check (1) or not (0)",
            labels=["engine"],
        )
        for engine_id, slot in state.remotes.slots.items():
            remote.add_metric([engine_id], int(slot.engine is not None))
        yield remote
        forward = state.forward()
        for name, value, what in (
            ("batches", forward.batches, "Forward passes of one-token steps on the local model"),
            ("batch_rows", forward.rows, "Sessions' steps those forward passes served"),
            ("prompts", forward.prompts, "Prompts fed to the local model"),
            ("prompts_reused", forward.prompts_reused, "Prompts copied from an identical one"),
        ):
            yield CounterMetricFamily(f"maskscope_forward_{name}", what, value=value)
        yield GaugeMetricFamily(
            "maskscope_shutting_down",
            "Whether the server is stopping (SIGTERM)",
            value=int(state.stopping()),
        )
