"""What the RayJob trigger tells in the task log besides transitions and positions: why the job is still
queued (``kueue_ray.why_queued``) and, while its Ray cluster starts, its pods (``kueue_ray.pod_states``).

Apart from ``kueue_ray.trigger`` because both read the cluster on their own rhythm (the explanation with
the queue position; the pods of every starting Ray cluster of a namespace in one read every
``POD_CHECK_SECONDS``); ``trigger`` is the ``RayJobTrigger`` (its hook, log, namespace, name and queue).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from kueue_ray.hub.reads import shared_read
from kueue_ray.naming import PRIORITY_CHANGED_BY_ANNOTATION as CHANGED_BY_ANNOTATION
from kueue_ray.narration import POD_CHECK_SECONDS, Story
from kueue_ray.phases import POSITION_PHASES
from kueue_ray.pod_states import CLUSTER_LABEL, describe_pods, pod_states
from kueue_ray.status import Observation


async def tell_pods(trigger: Any, story: Story, observation: Observation, subscription: Any) -> None:
    """While the Ray cluster starts: its pods' phase and the scheduler's or kubelet's reason, written
    when they change (``kueue_ray.pod_states``), checked every ``POD_CHECK_SECONDS``."""
    check = story.pods_check_in(observation, time.monotonic())
    if check is None or check > 0:
        return
    pods, again_at = await starting_pods(trigger, observation.ray_cluster, subscription)
    story.pods_checked_at = again_at - POD_CHECK_SECONDS
    if pods is None:
        return
    line = story.pods_line(trigger.namespace, trigger.name, describe_pods(pod_states(pods)), time.monotonic())
    if line:
        trigger.log.info(line)


POD_READ_CHUNK = 100
"""Ray clusters per pod list (``ray.io/cluster in (...)``): a selector of a few KB."""
POD_TOP_UP_SECONDS = 1.0
"""A cluster that asks after the namespace's last read began waits at most this long for a read that
includes it (then every cluster that asked meanwhile is listed together)."""


@dataclass(frozen=True)
class _PodRead:
    began: float
    covered: frozenset[str]
    """The Ray clusters it listed the pods of."""
    pods: dict[str, list[dict]]
    failed: bool = False


_pods_wanted: dict[tuple[str, str], dict[str, float]] = {}
"""(conn, namespace) -> starting Ray cluster -> monotonic time a trigger last asked for its pods."""
_pod_reads: dict[tuple[str, str], _PodRead] = {}
_pod_reads_in_flight: dict[tuple[str, str], asyncio.Task] = {}


async def starting_pods(trigger: Any, ray_cluster: str, subscription: Any) -> tuple[list[dict] | None, float]:
    """(The pods of ``ray_cluster`` or None, the monotonic time to ask again), from one read per namespace
    every ``POD_CHECK_SECONDS`` shared by every trigger of this triggerer whose Ray cluster is starting
    (``POD_READ_CHUNK`` clusters a request), plus at most one a ``POD_TOP_UP_SECONDS`` for clusters that
    asked after a read began: thousands of starting clusters cost a few lists, not one per task. None when
    the read failed or did not include this cluster yet."""
    key = (trigger.kubernetes_conn_id or "", trigger.namespace)
    wanted = _pods_wanted.setdefault(key, {})
    wanted[ray_cluster] = time.monotonic()
    cached = _pod_reads.get(key)
    now = time.monotonic()
    if (
        cached is None
        or now >= cached.began + POD_CHECK_SECONDS
        or (ray_cluster not in cached.covered and now >= cached.began + POD_TOP_UP_SECONDS)
    ):
        await shared_read(
            _pod_reads_in_flight, ("pods", "/".join(key)), lambda: _read_pods(trigger, key, subscription)
        )
        cached = _pod_reads[key]
    if ray_cluster not in cached.covered:
        return None, cached.began + (POD_CHECK_SECONDS if cached.failed else POD_TOP_UP_SECONDS)
    return cached.pods.get(ray_cluster, []), cached.began + POD_CHECK_SECONDS


async def _read_pods(trigger: Any, key: tuple[str, str], subscription: Any) -> None:
    began = time.monotonic()
    wanted = _pods_wanted[key]
    for gone in [c for c, asked in wanted.items() if began - asked > 3 * POD_CHECK_SECONDS]:
        del wanted[gone]  # its trigger stopped asking: its job runs, ended or was evicted
    clusters = sorted(wanted)
    found: dict[str, list[dict]] = {}
    try:
        async with subscription.api_client() as client:
            for start in range(0, len(clusters), POD_READ_CHUNK):
                chunk = clusters[start : start + POD_READ_CHUNK]
                pods = await trigger.hook.clusters_pods(chunk, key[1], api_client=client)
                if pods is None:  # may not be read: nothing to tell
                    raise PermissionError(f"list pods in {key[1]}")
                for pod in pods:
                    labels = (pod.get("metadata") or {}).get("labels") or {}
                    found.setdefault(labels.get(CLUSTER_LABEL, ""), []).append(pod)
    except Exception:  # noqa: BLE001 - the pods are told after the next read
        _pod_reads[key] = _PodRead(began, frozenset(), {}, failed=True)
        return
    _pod_reads[key] = _PodRead(began, frozenset(clusters), found)


QUEUE_STATE_TTL_SECONDS = 30.0
"""How long one read of a LocalQueue's ClusterQueue (and its cohort's) serves every trigger waiting in it."""
QUEUE_STATE_RETRY_SECONDS = 10.0
"""After a failed read, how long every trigger of that LocalQueue goes without the explanation before one
reads again: an outage costs a read per queue per this, not one per waiting task."""
_queue_states: dict[tuple[str, str, str], tuple[float, Any]] = {}
"""(conn, namespace, LocalQueue) -> (monotonic time until which it serves, the state or None after a failure)."""
_queue_reads: dict[tuple[str, str], asyncio.Task] = {}


async def queue_state(
    trigger: Any, local_queue: str, subscription: Any
) -> tuple[dict | None, list[dict]] | None:
    """(the ClusterQueue behind ``local_queue``, the cohort's ClusterQueues), read once per
    ``QUEUE_STATE_TTL_SECONDS`` for every trigger of this triggerer waiting in that LocalQueue, one read in
    flight however many ask meanwhile (``hub.reads.shared_read``): thousands of queued tasks cost a read per
    queue, not per task. None while a failed read is not retried yet. The Workloads come from the hub's
    watch."""
    key = (trigger.kubernetes_conn_id or "", trigger.namespace, local_queue)
    cached = _queue_states.get(key)
    if cached is not None and time.monotonic() < cached[0]:
        return cached[1]

    async def read() -> None:
        try:
            async with subscription.api_client() as client:
                cluster_queue = await trigger.hook.cluster_queue_of(local_queue, key[1], api_client=client)
                state = (cluster_queue, await trigger.hook.cohort_queues(cluster_queue, api_client=client))
        except Exception:  # noqa: BLE001 - the explanation waits for the next read
            _queue_states[key] = (time.monotonic() + QUEUE_STATE_RETRY_SECONDS, None)
            return
        _queue_states[key] = (time.monotonic() + QUEUE_STATE_TTL_SECONDS, state)

    await shared_read(_queue_reads, ("queue-state", "/".join(key)), read)
    return _queue_states[key][1]


async def tell_why_queued(
    trigger: Any, story: Story, rayjob: dict, observation: Observation, subscription: Any, force: bool = False
) -> None:
    """While it waits for quota: who holds it, whether this priority may take it, whether borrowing
    helps, and whether waiting can admit it at all (``kueue_ray.why_queued``). Read with the position:
    after a transition line, and when a Workload of the namespace changed since the last check."""
    if observation.phase not in POSITION_PHASES or not observation.workload_name:
        return
    queue = trigger.target.queue_of(rayjob)
    if not queue:
        return
    state = await queue_state(trigger, queue, subscription)
    if state is None:  # not read now: the explanation waits for the next check
        return
    cluster_queue, queues = state
    own = subscription.workload()
    if own is None or own["metadata"].get("name") != observation.workload_name:
        return  # the cache moved on to a newer Workload: the next check explains that one
    for line in story.why_lines(
        trigger.namespace,
        trigger.name,
        subscription.why_queued(cluster_queue, own, queues),
        force,
    ):
        trigger.log.info(line)


def tell_priority(trigger: Any, story: Story, rayjob: dict, workload: dict | None) -> None:
    """A priority change of the Workload (the RayJob relabelled, e.g. from the Kueue tab), once."""
    annotations = (rayjob.get("metadata") or {}).get("annotations") or {}
    line = story.priority_line(
        trigger.namespace, trigger.name, workload, annotations.get(CHANGED_BY_ANNOTATION)
    )
    if line:
        trigger.log.info(line)
