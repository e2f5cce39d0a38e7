"""What the RayJob trigger tells in the task log besides transitions and positions: why the job is still
queued (``kueue_ray.why_queued``) and, while its Ray cluster starts, its pods (``kueue_ray.pod_states``).

Apart from ``kueue_ray.trigger`` because both read the cluster on their own rhythm (the explanation with
the queue position, the pods every ``POD_CHECK_SECONDS`` while admitted); ``trigger`` is the
``RayJobTrigger`` (its hook, log, namespace, name and queue).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kueue_ray.hub.reads import shared_read
from kueue_ray.naming import PRIORITY_CHANGED_BY_ANNOTATION as CHANGED_BY_ANNOTATION
from kueue_ray.naming import QUEUE_LABEL
from kueue_ray.narration import Story
from kueue_ray.phases import POSITION_PHASES
from kueue_ray.pod_states import describe_pods, pod_states
from kueue_ray.status import Observation
from kueue_ray.why_queued import why_queued_sentences


async def tell_pods(trigger: Any, story: Story, observation: Observation, subscription: Any) -> None:
    """While the Ray cluster starts: its pods' phase and the scheduler's or kubelet's reason, written
    when they change (``kueue_ray.pod_states``), read every ``POD_CHECK_SECONDS``."""
    check = story.pods_check_in(observation, time.monotonic())
    if check is None or check > 0:
        return
    try:
        async with subscription.api_client() as client:
            pods = await trigger.hook.cluster_pods(
                observation.ray_cluster, trigger.namespace, api_client=client
            )
    except Exception:  # noqa: BLE001 - the pods are told at the next check
        story.pods_checked_at = time.monotonic()
        return
    if pods is None:
        story.pods_checked_at = time.monotonic()
        return
    line = story.pods_line(trigger.namespace, trigger.name, describe_pods(pod_states(pods)), time.monotonic())
    if line:
        trigger.log.info(line)


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
    queue = trigger.queue or ((rayjob.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    if not queue:
        return
    state = await queue_state(trigger, queue, subscription)
    if state is None:  # not read now: the explanation waits for the next check
        return
    cluster_queue, queues = state
    workloads = subscription.workloads()
    for line in story.why_lines(
        trigger.namespace,
        trigger.name,
        why_queued_sentences(
            cluster_queue, workloads, queues, observation.workload_name, subscription.rayjob_by_uid
        ),
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
