"""Queue metrics for platform teams, through Airflow's own metrics system.

Emitted with ``airflow.sdk.observability.stats.Stats`` (what the deprecated ``airflow.stats.Stats`` is in
Airflow 3.3), so whatever ``[metrics]`` configures receives them: StatsD (``statsd_on``; its tags need
``statsd_influxdb_enabled`` or ``statsd_datadog_enabled``), or OpenTelemetry (``otel_on``). Names carry
Airflow's ``[metrics] statsd_prefix`` / ``otel_prefix`` in front (``airflow.`` by default).

| name | type | tags | what |
|---|---|---|---|
| ``kueue_ray.queued_until_quota_reserved`` | timer | queue, cluster_queue, priority, namespace | from submission (or the preemption / eviction before a re-admission) to Kueue reserving quota |
| ``kueue_ray.queued_until_admitted`` | timer | same | the same wait until ``Admitted=True`` (later than the reservation when admission checks must pass) |
| ``kueue_ray.admissions`` | counter | same | each admission |
| ``kueue_ray.preemptions`` | counter | same + reason | each preemption, with Kueue's reason (``InClusterQueue``, ``InCohortReclamation``, ...) |
| ``kueue_ray.pods_ready_evictions`` | counter | same | each eviction for pods not ready within Kueue's waitForPodsReady timeout |
| ``kueue_ray.inadmissible`` | counter | queue, priority, namespace, reason | a task given up on because Kueue cannot admit its RayJob |
| ``kueue_ray.outcome`` | counter | same as admissions + outcome | each wait's end: ``success``, ``failed``, ``deleted``, ``inadmissible``, ``queue_timeout``, ``run_timeout``, ``too_many_preemptions``, ``pods_not_ready`` |
| ``kueue_ray.tasks_waiting`` | gauge | queue, namespace, stage, hostname | tasks one triggerer waits for per LocalQueue; stage ``queued`` (not admitted) or ``admitted`` |

Who counts what, once. The trigger sees the transitions, so it counts them: every admission, preemption
and eviction its Timeline records, when it records it. A trigger's first look also finds what happened
before it started (a sensor that starts after Kueue admitted the RayJob); it counts that past only when it
is the first trigger of its deferral (started within ``FIRST_START_GRACE_SECONDS`` of it, the
``deferred_at`` the task passes). A trigger started later is a restart or a hand-over (a triggerer
crash, a rolling restart, another triggerer taking over): its predecessor counted the past, so it counts
only what happens from then on. Within one triggerer process each event of a RayJob (its uid and the
event's number) is counted at most once, whichever trigger sees it (``LEDGER``). What remains:

* a transition while no trigger runs (between a triggerer's death and the hand-over) is not counted;
* two triggerers running the same trigger at once (Airflow's brief at-least-once hand-over) may both count
  what they see live;
* ``outcome`` is counted by the trigger that fires, once per firing (a retried sensor that waits for the
  same finished RayJob counts its end again).

``tasks_waiting`` is each triggerer's own count, sent every ``HubSettings.gauge_interval`` seconds by its
watch hub and tagged with its ``hostname``: sum it over hostnames for a queue's total.
"""

from __future__ import annotations

import logging
import socket
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from kueue_ray.kube.api import parse_time
from kueue_ray.verdicts import VerdictStatus
from kueue_ray.workload import PODS_READY_TIMEOUT

PREFIX = "kueue_ray"
QUEUED_UNTIL_QUOTA_RESERVED = f"{PREFIX}.queued_until_quota_reserved"
QUEUED_UNTIL_ADMITTED = f"{PREFIX}.queued_until_admitted"
ADMISSIONS = f"{PREFIX}.admissions"
PREEMPTIONS = f"{PREFIX}.preemptions"
PODS_READY_EVICTIONS = f"{PREFIX}.pods_ready_evictions"
INADMISSIBLE = f"{PREFIX}.inadmissible"
OUTCOME = f"{PREFIX}.outcome"
TASKS_WAITING = f"{PREFIX}.tasks_waiting"
FIRST_START_GRACE_SECONDS = 300.0
"""A trigger that starts later than this after its task deferred is taken for a restart or a hand-over.
Airflow starts a new trigger within seconds; a busy triggerer at capacity may take minutes."""

log = logging.getLogger(__name__)


class StatsLike(Protocol):
    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict | None = None) -> None: ...
    def gauge(self, stat: str, value: float, *, tags: dict | None = None) -> None: ...
    def timing(self, stat: str, dt: Any, *, tags: dict | None = None) -> None: ...


def stats() -> StatsLike:
    """Airflow's metrics facade, configured by the process (the triggerer's ``[metrics]`` settings)."""
    from airflow.sdk.observability.stats import Stats

    return Stats


def tags(**values: Any) -> dict[str, str]:
    """Tags with a value: an unknown ClusterQueue or priority is left out rather than sent empty."""
    return {key: str(value) for key, value in values.items() if value not in (None, "")}


def hostname() -> str:
    """This triggerer's name as Airflow's own metrics tag it (``[core] hostname_callable``)."""
    try:
        from airflow.utils.net import get_hostname

        return get_hostname()
    except Exception:  # noqa: BLE001 - a name for a tag is not worth failing for
        return socket.gethostname()


class Ledger:
    """The events of RayJobs this process counted, so each is counted once (bounded: oldest forgotten)."""

    def __init__(self, capacity: int = 50_000) -> None:
        self.capacity = capacity
        self._counted: OrderedDict[str, dict[str, int]] = OrderedDict()

    def first(self, uid: str, kind: str, number: int) -> bool:
        """True, once, for event ``number`` (0-based) of ``kind`` of RayJob ``uid``: count it now."""
        counted = self._counted.get(uid)
        if counted is None:
            counted = self._counted[uid] = {}
            if len(self._counted) > self.capacity:
                self._counted.popitem(last=False)
        else:
            self._counted.move_to_end(uid)
        if number < counted.get(kind, 0):
            return False
        counted[kind] = number + 1
        return True


LEDGER = Ledger()


def _seconds_between(start: Any, end: Any) -> float | None:
    if start is None or end is None:
        return None
    return float(end) - float(start)


class WaitMetrics:
    """One trigger's counting of its RayJob's queue events (see the module docstring). Slotted: a triggerer
    holds one per waiting task."""

    __slots__ = ("uid", "base", "ledger", "sink", "count_past", "_seen", "_ended")

    def __init__(
        self,
        uid: str,
        *,
        queue: str | None,
        priority: str | None,
        namespace: str,
        deferred_at: str | None,
        started: datetime,
        ledger: Ledger = LEDGER,
        sink: StatsLike | None = None,
    ) -> None:
        self.uid = uid
        self.base = tags(queue=queue, priority=priority, namespace=namespace)
        self.ledger = ledger
        self.sink = sink
        deferred = parse_time(deferred_at)
        self.count_past = (
            deferred is None or (started - deferred).total_seconds() <= FIRST_START_GRACE_SECONDS
        )
        self._seen: tuple[int, int, int] | None = None
        self._ended = False

    def _stats(self) -> StatsLike:
        return self.sink if self.sink is not None else stats()

    def recorded(self, timeline: Any, cluster_queue: str | None) -> None:
        """Count what ``timeline`` recorded since the last call (on the first call: its past, if ours).

        Never raises: a metrics backend in trouble must not disturb the wait."""
        counts = (len(timeline.admissions), len(timeline.preemptions), len(timeline.evictions))
        start = self._seen if self._seen is not None else ((0, 0, 0) if self.count_past else counts)
        self._seen = counts
        if start == counts:
            return
        if cluster_queue is None and timeline.admissions:
            cluster_queue = timeline.admissions[-1].get("cluster_queue")
        try:
            for number in range(start[0], counts[0]):
                self._admission(number, timeline.admissions[number])
            for number in range(start[1], counts[1]):
                self._preemption(number, timeline.preemptions[number], cluster_queue)
            for number in range(start[2], counts[2]):
                self._eviction(number, timeline.evictions[number], cluster_queue)
        except Exception:  # noqa: BLE001 - see the docstring
            log.warning("Queue metrics of RayJob uid %s not sent", self.uid, exc_info=True)

    def ended(self, status: str, reason: str, cluster_queue: str | None) -> None:
        """The wait is over with verdict ``status`` (``kueue_ray.verdicts``); counted once per trigger."""
        if self._ended:
            return
        self._ended = True
        try:
            stats = self._stats()
            labels = {**self.base, **tags(cluster_queue=cluster_queue)}
            stats.incr(OUTCOME, tags={**labels, "outcome": str(status)})  # the value, not the member
            if status == VerdictStatus.INADMISSIBLE:
                stats.incr(INADMISSIBLE, tags={**self.base, **tags(reason=reason)})
        except Exception:  # noqa: BLE001 - as in recorded()
            log.warning("Outcome metric of RayJob uid %s not sent", self.uid, exc_info=True)

    def _admission(self, number: int, admission: Mapping[str, Any]) -> None:
        if not self.ledger.first(self.uid, "admission", number):
            return
        stats = self._stats()
        labels = {**self.base, **tags(cluster_queue=admission.get("cluster_queue"))}
        stats.incr(ADMISSIONS, tags=labels)
        since = admission.get("queued_since")
        for name, moment in (
            (QUEUED_UNTIL_QUOTA_RESERVED, admission.get("reserved_at")),
            (QUEUED_UNTIL_ADMITTED, admission.get("at")),
        ):
            waited = _seconds_between(since, moment)
            if waited is not None and waited >= 0:
                stats.timing(name, timedelta(seconds=waited), tags=labels)

    def _preemption(self, number: int, preemption: Mapping[str, Any], cluster_queue: str | None) -> None:
        if self.ledger.first(self.uid, "preemption", number):
            labels = {**self.base, **tags(cluster_queue=cluster_queue, reason=preemption.get("reason"))}
            self._stats().incr(PREEMPTIONS, tags=labels)

    def _eviction(self, number: int, eviction: Mapping[str, Any], cluster_queue: str | None) -> None:
        if eviction.get("reason") != PODS_READY_TIMEOUT:
            return
        if self.ledger.first(self.uid, "eviction", number):
            labels = {**self.base, **tags(cluster_queue=cluster_queue)}
            self._stats().incr(PODS_READY_EVICTIONS, tags=labels)
