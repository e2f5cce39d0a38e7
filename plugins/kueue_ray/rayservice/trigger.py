"""RayServiceTrigger: wait in the triggerer, event-driven, until a deployed RayService serves (or cannot).

The RayJob trigger's shape for a RayService: the trigger subscribes to the process-wide watch hub (one
RayService watch and one Workload watch per namespace, shared by every waiting task), feeds each change
through ``service_status.observe_service`` and writes every transition to the task log in Kueue's, KubeRay's
and Serve's own words, with the queue position: queued -> admitted -> cluster ready -> Serve deploying ->
serving, and for an upgrade the pending cluster taking over from the active one.

Waiting costs nothing while nothing changes: no request is made between two watch events (the hub's slow
relist is the only safety net), and a queue position is one visibility read shared with every other
trigger of the LocalQueue.

It fires exactly one TriggerEvent, when waiting is over (``ServiceWatchdog``): serving, a Serve failure
(``DEPLOY_FAILED`` / ``UNHEALTHY``), a spec KubeRay refused, a cluster Kueue can never admit (after
``inadmissible_grace``) or never will while the old one serves (``BLOCKED``), a timeout, too many
preemptions or pods-not-ready evictions, or the RayService deleted. API failures are never a reason: the
wait resumes after them.

``on_kill`` deletes the RayService only when this very task try created it (a new service) and still owns
it; an upgraded service keeps serving its previous version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.triggers.base import TriggerEvent

from kueue_ray.hub import NOTICE
from kueue_ray.kube.refusals import ApiNotServed, RefusedTooLong
from kueue_ray.kube.server_clock import server_clock
from kueue_ray.naming import AirflowIdentity
from kueue_ray.rayservice.waiting import ServiceTarget
from kueue_ray.trigger_base import WaitTrigger
from kueue_ray.wait_step import Read, WaitState, wait_step
from kueue_ray.waiting import access_verdict

if TYPE_CHECKING:
    from kueue_ray.rayservice.hook import AsyncRayServiceHook


class RayServiceTrigger(WaitTrigger):
    """Wait for one RayService (by name and uid) to serve the spec the deploy operator wrote.

    :param target: the fields of its ``ServiceTarget``: name / namespace / uid (the RayService; another
        object later created under the name is not ours), generation / switch_from / created (what
        "serving" means; ``created`` also lets ``on_kill`` delete it), queue / priority (for the queue
        position and the log), submitted_at (ISO time of the deploy, the queue clock's start).
    :param owner: the task try {dag_id, run_id, task_id, map_index, try_number}; ``on_kill`` deletes a
        created RayService only while this try still owns it.
    :param kubernetes_conn_id: the Airflow ``kubernetes`` connection.
    :param policy: when to stop waiting (``kueue_ray.wait_policy.WaitPolicy`` or its ``to_dict``; judged by
        ``ServiceWatchdog``); None: the defaults.
    :param timeline: a ServiceTimeline dict to continue.
    """

    kind = "RayService"
    target_type = ServiceTarget
    target: ServiceTarget

    def __init__(
        self, *, owner: dict[str, Any] | None = None, timeline: dict[str, Any] | None = None, **arguments: Any
    ) -> None:
        super().__init__(**arguments)
        self.owner = dict(owner) if owner else None
        self.timeline = timeline

    def arguments(self) -> dict[str, Any]:
        return {"owner": self.owner, "timeline": self.timeline}

    hook: AsyncRayServiceHook

    def make_hook(self) -> AsyncRayServiceHook:
        from kueue_ray.rayservice.hook import AsyncRayServiceHook

        return AsyncRayServiceHook(kubernetes_conn_id=self.kubernetes_conn_id)

    def start(self) -> WaitState:
        timeline = self.target.timeline(self.timeline)
        target = self.target
        what = f"replacing RayCluster {target.switch_from}" if target.switch_from else "new spec"
        self.log.info(
            "Waiting for RayService %s/%s (uid %s, generation %s, %s, queue %s, priority %s) through the "
            "shared watch",
            self.namespace,
            self.name,
            self.uid,
            target.generation,
            what,
            target.queue,
            target.priority,
        )
        return WaitState.start(target.kind(), self.policy, timeline)

    async def wait_once(self, state: WaitState) -> TriggerEvent:
        from kueue_ray.hub import HUB

        async with HUB.subscribe_service(
            self.kubernetes_conn_id,
            self.namespace,
            self.name,
            self.uid,
            self.policy.resync_interval,
            deployment=(self.owner or {}).get("deployment") or "",
            reader=self.hook,
        ) as subscription:
            try:
                return await self._follow(state, subscription)
            except (RefusedTooLong, ApiNotServed) as ended:
                # The wait can no longer read the cluster: fail with the reason, touching nothing.
                verdict = access_verdict(ended)
                self.log.error(verdict.message)
                return self.fire(self.target.payload(verdict, None, state.timeline))

    async def _follow(self, state: WaitState, subscription: Any) -> TriggerEvent:
        """``wait_once`` inside the subscription; raises ``RefusedTooLong`` or ``ApiNotServed`` when the
        reads it needs stop working for good."""
        kind = self.target.kind()
        read = Read(*await subscription.current())
        clock = server_clock(self.kubernetes_conn_id)
        while True:
            ended = subscription.access()
            if ended is not None:
                raise ended
            step = wait_step(kind, state, read, clock.now(), clock.offset_s)  # on the server's clock
            if step.gone:
                self.log.error(step.verdict.message)
            for line in step.lines:
                self.log.info(line)
            if step.news:
                position = await self._position(step.position_in, step.observation, subscription)
                self.log.info(step.transition_line(position))
            if step.confirm:
                # A clock ran out on what the cache holds, which may be behind: judge again on what the
                # API server says now.
                read = Read(*await subscription.current(reread_rayjob=True, reread_workload=True), fresh=True)
                continue
            if step.payload is not None:
                return self.fire(step.payload)
            update = await subscription.next_update(None if step.deadline is None else step.deadline + 0.05)
            # Every queued change is only "look again" (the cache holds the newest state); a notice
            # about waiting itself (e.g. polling while watches are refused) goes to the task log.
            while update is not None:
                if update.kind == NOTICE:
                    self.log.warning(update.message)
                update = None if subscription.updates.empty() else subscription.updates.get_nowait()
            read = Read(*subscription.snapshot())

    async def kill(self) -> None:
        """The task let go of the RayService (``WaitTrigger.on_kill``): delete it if this try created it and
        still owns it."""
        if not (self.target.created and self.owner):
            self.log.info(
                "Not deleting RayService %s/%s: this try did not create it (an upgrade keeps the previous "
                "version serving)",
                self.namespace,
                self.name,
            )
            return
        result = await self.hook.delete_rayservice_if_owned(
            self.name, self.namespace, self.uid, AirflowIdentity(**self.owner)
        )
        self.log.info(
            "Task killed: RayService %s/%s (uid %s): %s", self.namespace, self.name, self.uid, result
        )
