"""DeployRayServiceOperator: serve a model as a KubeRay RayService that Kueue queues, prioritises and admits.

The RayJob operator's surface for serving, from the same base (``kueue_ray.submitting``): a template with
values, a LocalQueue and a priority decided by the same run-type policy, the same preflight, deterministic
names adopted on retry, and waiting deferred to the triggerer's shared watch. This module keeps what is a
RayService's: the name per ``mode``, the rollout, the smoke request and the teardown. Importing it (every
DAG file that serves does) stays as cheap as importing ``kueue_ray.operators``: the hook, manifests, status
model and trigger are imported where they run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from kueue_ray.naming import (
    DAG_ID_LABEL,
    MANAGED_BY_SELECTOR,
    TASK_ID_LABEL,
    AirflowIdentity,
    label_value,
    rayjob_name,
    service_name,
)
from kueue_ray.results import RAYSERVICE_XCOM_KEY
from kueue_ray.submitting import KueueSubmitOperator, bad_input_fails, task_identity
from kueue_ray.verdicts import VerdictStatus

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kueue_ray.rayservice.hook import RayServiceHook
    from kueue_ray.rayservice.rollout import Deployment
    from kueue_ray.rayservice.waiting import ServiceTarget

UPGRADE = "upgrade"
NEW_SERVICE = "new_service"
MODES = (UPGRADE, NEW_SERVICE)


def serve_service(name: str) -> str:
    """The Kubernetes Service KubeRay points at the serving cluster: ``<name>-serve-svc``, port 8000."""
    return f"{name}-serve-svc"


class DeployRayServiceOperator(KueueSubmitOperator):
    """Create or update a RayService in a Kueue LocalQueue with a WorkloadPriorityClass, and wait until it
    serves: the new cluster active and every Serve application RUNNING with every deployment HEALTHY.

    The RayService is built from a Jinja template (``kueue_ray/templates/<name>.yaml.j2`` or your own, a
    path, or a dict) and checked before anything reaches the cluster, as ``SubmitRayJobOperator`` checks a RayJob:
    manifest, LocalQueue, WorkloadPriorityClass, and that one Ray cluster of it fits the ClusterQueue's
    maximum capacity.

    ``mode`` decides what a new run deploys to:

    * ``"upgrade"`` (default): one RayService per task, kept across runs (``service_name``, or a name derived
      from the DAG and task). A new run updates its spec. When the cluster config changes (e.g. a new model
      in the pods' environment), KubeRay brings up a pending cluster, switches traffic to it once it serves
      and then removes the old one: no downtime, and the task waits until the new cluster is the active one,
      reporting the pending cluster's queueing, admission and preemptions. When only ``serveConfigV2``
      changes, Serve updates the applications in place. A cluster change needs Kueue to admit RayServices
      through their RayClusters (``ray.io/rayservice`` left out of its ``integrations.frameworks``): with the
      shipped config Kueue admits the RayService as one Workload and would never start the new cluster while
      the old one serves, so the task fails before changing anything, saying so.
    * ``"new_service"``: a new RayService for every run (its name includes the run), admitted as its own
      Workload; earlier ones keep serving until ``teardown_previous`` removes them.

    A retry of the same run adopts what the earlier try deployed (and waits for the same switch). With
    ``teardown_previous`` the RayServices earlier runs of this task deployed under other names are deleted
    once this one serves, never the one just deployed. With ``smoke_url`` one GET must answer 2xx once it
    serves.

    The task fails with Serve's message when an application ends ``DEPLOY_FAILED`` or ``UNHEALTHY``, with
    Kueue's when the cluster can never be admitted (after ``inadmissible_grace``), and on the timeouts and
    limits below. A RayService this try created is deleted when the task gives up on it; an upgraded one
    keeps serving its previous version.

    .. code-block:: python

        from kueue_ray.serving import DeployRayServiceOperator

        serve = DeployRayServiceOperator(
            task_id="serve",
            template="aurora-serve",
            values={"model_path": "{{ ti.xcom_pull(task_ids='publish')['path'] }}"},
            local_queue="team-a",
            priority="prod-priority",
            service_name="aurora-forecast",
            smoke_url="http://{serve_service}.{namespace}.svc:8000/healthz",
            teardown_previous=True,
        )

    :param template: a template name looked up in ``template_searchpath`` and then in the shipped
        ``kueue_ray/templates``, a file path, or a RayService dict.
    :param template_searchpath: folder(s) holding your own templates; default: the DAG's
        ``template_searchpath``.
    :param values: template variables.
    :param local_queue: Kueue LocalQueue in ``namespace`` (templated); ``queue=`` is its deprecated
        name (``queue`` is ``BaseOperator``'s executor queue: set that with ``executor_queue``).
    :param priority: WorkloadPriorityClass; with ``priority_policy`` the DAG's default priority.
    :param priority_policy: run-type-aware priorities, as for ``SubmitRayJobOperator``.
    :param namespace: namespace of the RayService.
    :param mode: ``"upgrade"`` or ``"new_service"`` (templated).
    :param service_name: the RayService's name in ``"upgrade"`` mode (templated; a DNS-1035 label of at most
        47 characters); default derived from the DAG and task ids.
    :param image / runtime_env / worker_replicas / ray_resources / annotations: overrides applied to the
        rendered RayService (see ``kueue_ray.manifests.build_rayservice``).
    :param kubernetes_conn_id: Airflow ``kubernetes`` connection.
    :param deferrable: wait in the triggerer (default) instead of holding a worker slot.
    :param queue_timeout: seconds the cluster may wait for admission (templated); unset: 24 h, ``"inf"``:
        no limit.
    :param ready_timeout: seconds from the cluster's admission until it serves (templated); unset: 1 h,
        ``"inf"``: no limit.
    :param fail_on_inadmissible / inadmissible_grace / max_preemptions / max_pods_ready_evictions: as for
        ``SubmitRayJobOperator`` (``kueue_ray.wait_policy.WaitPolicy``, judged by
        ``kueue_ray.rayservice.waiting.ServiceWatchdog``).
    :param smoke_url: URL to GET once serving (templated, then ``str.format``-ed with ``service``,
        ``serve_service`` and ``namespace``); None sends nothing.
    :param smoke_timeout: seconds for that request.
    :param teardown_previous: delete the RayServices earlier runs of this task deployed (templated).
    :param take_over: upgrade a RayService named ``service_name`` that another Airflow deployment (or another
        task) created, deliberately, making it this task's; without it such a service is refused, naming
        its owner.
    :param poll_interval: seconds between reads when waiting in the worker (``deferrable=False``).
    :param resync_interval: the longest a missed watch event may go unnoticed while deferred, seconds.
    """

    template_fields: Sequence[str] = (
        *KueueSubmitOperator.template_fields,
        "mode",
        "service_name",
        "smoke_url",
        "teardown_previous",
        "ready_timeout",
    )
    template_fields_renderers = {"values": "json", "runtime_env": "json", "template": "yaml"}
    ui_color = "#eaf6ec"

    def __init__(
        self,
        *,
        mode: str = UPGRADE,
        service_name: str | None = None,
        ready_timeout: float | str | None = None,
        smoke_url: str | None = None,
        smoke_timeout: float = 30.0,
        teardown_previous: bool | str = False,
        take_over: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.mode = mode
        self.service_name = service_name
        self.ready_timeout = ready_timeout
        self.smoke_url = smoke_url
        self.smoke_timeout = smoke_timeout
        self.teardown_previous = teardown_previous
        self.take_over = take_over

    def new_hook(self) -> RayServiceHook:
        from kueue_ray.rayservice.hook import RayServiceHook

        return RayServiceHook(kubernetes_conn_id=self.kubernetes_conn_id)

    # --- decisions -----------------------------------------------------------------------------------

    def target_name(self, identity: AirflowIdentity) -> str:
        """The RayService this run deploys to (see ``mode``); bad input raises naming the field."""
        from kueue_ray.errors import ManifestError

        if self.mode not in MODES:
            raise ManifestError(
                "unknown mode", field="mode", value=self.mode, fix=f"use one of {list(MODES)}"
            )
        if self.mode == NEW_SERVICE:
            if self.service_name:
                raise ManifestError(
                    "a fixed name cannot hold a new RayService per run",
                    field="service_name",
                    value=self.service_name,
                    fix="leave service_name unset with mode='new_service', or use mode='upgrade'",
                )
            # one per run, the same for every try of it (a retry adopts what an earlier try deployed)
            return rayjob_name(
                identity.dag_id,
                identity.task_id,
                identity.run_id,
                identity.map_index,
                None,
                identity.deployment,
            )
        return self.service_name or self.default_service_name(identity)

    def default_service_name(self, identity: AirflowIdentity) -> str:
        """The RayService this task keeps across runs in this deployment; the name it had before RayServices
        carried their deployment while a service of that name deployed by this task still exists (it is
        upgraded in place and becomes this deployment's, rather than a second service deployed beside it)."""
        legacy = service_name(identity.dag_id, identity.task_id, identity.map_index)
        found = self.hook.get_rayservice(legacy, self.namespace)
        holder = AirflowIdentity.from_annotations((found or {}).get("metadata", {}).get("annotations"))
        if (
            holder is not None
            and not holder.deployment
            and (holder.dag_id, holder.task_id, holder.map_index)
            == (
                identity.dag_id,
                identity.task_id,
                identity.map_index,
            )
        ):
            self.log.info(
                "RayService %s/%s was deployed by this task before RayServices carried their Airflow "
                "deployment; it is upgraded in place and becomes deployment %s's",
                self.namespace,
                legacy,
                identity.deployment,
            )
            return legacy
        return service_name(identity.dag_id, identity.task_id, identity.map_index, identity.deployment)

    # --- execution -----------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        from kueue_ray.manifests import build_rayservice
        from kueue_ray.quantity import describe_resources
        from kueue_ray.rayservice.waiting import ServiceWorkerWait
        from kueue_ray.wait_policy import WaitPolicy

        with bad_input_fails():
            identity, priority, built, capacity = self.prepare(context, build_rayservice, self.target_name)
            self.log.info(
                "Preflight ok: LocalQueue %s -> ClusterQueue %s; one Ray cluster of RayService %s requests %s",
                self.local_queue,
                capacity.cluster_queue,
                built.name,
                describe_resources(built.total_request),
            )
            deployment = self.deploy(self.hook, built.body, identity)
        service = deployment.service
        metadata = service["metadata"]
        context["ti"].xcom_push(
            key=RAYSERVICE_XCOM_KEY, value=self.details(service, priority, deployment.switch_from)
        )
        target, policy = self.wait_target(deployment, priority), WaitPolicy.of(self, context)
        if self.deferrable and not target.observe(service, []).serving:
            from kueue_ray.rayservice.trigger import RayServiceTrigger

            trigger = RayServiceTrigger(
                **vars(target),
                owner=vars(identity).copy(),
                kubernetes_conn_id=self.kubernetes_conn_id,
                policy=policy,
                deferred_at=datetime.now(UTC).isoformat(),
            )
            self.defer(trigger=trigger, method_name="execute_complete")
        self.log.info("Waiting in the worker for RayService %s/%s", self.namespace, metadata["name"])
        return self.execute_complete(context, ServiceWorkerWait(target, policy, self.log).wait(self.hook))

    def deploy(self, hook: RayServiceHook, body: dict, identity: AirflowIdentity) -> Deployment:
        """Create the RayService, adopt the one an earlier try of this run deployed, or update the one an
        earlier run deployed (``upgrade``): ``kueue_ray.rayservice.rollout``."""
        from kueue_ray.rayservice.rollout import Rollout

        return Rollout(self.namespace, self.log, take_over=self.take_over).deploy(hook, body, identity)

    def wait_target(self, deployment: Deployment, priority: str) -> ServiceTarget:
        """What to wait for after ``deployment``."""
        from kueue_ray.rayservice.waiting import ServiceTarget

        metadata = deployment.service["metadata"]
        return ServiceTarget(
            name=metadata["name"],
            namespace=self.namespace,
            uid=metadata["uid"],
            generation=int(metadata.get("generation") or 1),
            switch_from=deployment.switch_from,
            created=deployment.created,
            queue=self.local_queue,
            priority=priority,
            submitted_at=datetime.now(UTC).isoformat(),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after waiting: the story to the log and XCom, then the smoke request and the teardown."""
        name, namespace = event["name"], event["namespace"]
        timeline = event.get("timeline") or {}
        self.log.info(
            "RayService %s/%s ended %s after %.1fs queued and %.1fs starting; %d admission(s), %d preemption(s)",
            namespace,
            name,
            event.get("phase") or event["status"],
            timeline.get("queued_seconds") or 0.0,
            timeline.get("starting_seconds") or 0.0,
            len(timeline.get("admissions") or ()),
            timeline.get("preemption_count") or 0,
        )
        for preemption in timeline.get("preemptions") or ():
            self.log.info(
                "  RayCluster %s preempted at %s: %s",
                preemption.get("cluster"),
                preemption.get("at"),
                preemption.get("message"),
            )
        details = {
            "name": name,
            "namespace": namespace,
            "uid": event["uid"],
            "active_cluster": event.get("active_cluster"),
            "replaced_cluster": event.get("switch_from"),
            "serve_service": serve_service(name),
            "queue": event.get("queue"),
            "priority": event.get("priority"),
            "timeline": timeline,
        }
        context["ti"].xcom_push(key=RAYSERVICE_XCOM_KEY, value=details)
        if event["status"] != VerdictStatus.SUCCESS:
            self._give_up(context, event)
            raise AirflowException(
                f"RayService {namespace}/{name} is not serving ({event['status']}, {event.get('reason')}): "
                f"{event.get('message')}"
            )
        self.log.info("RayService %s/%s serves: %s", namespace, name, event.get("message"))
        if event.get("switch_from"):
            self.log.info(
                "Traffic switched from RayCluster %s to RayCluster %s (Service %s)",
                event["switch_from"],
                event.get("active_cluster"),
                serve_service(name),
            )
        if self.smoke_url:
            self.smoke(name, namespace)
        if str(self.teardown_previous).lower() in ("true", "1", "yes"):
            details["torn_down"] = self.tear_down_previous(name, event["uid"], task_identity(context))
        return details

    def _give_up(self, context: Context, event: dict[str, Any]) -> None:
        """A RayService this try created and that never served is deleted (it would hold quota for nothing);
        an upgraded one keeps serving its previous version."""
        name, namespace = event["name"], event["namespace"]
        if not event.get("created"):
            active = event.get("active_cluster")
            if active:
                self.log.info(
                    "RayService %s/%s keeps serving from RayCluster %s; to go back, deploy the previous "
                    "version again (kubectl -n %s describe rayservice %s shows where the upgrade stands)",
                    namespace,
                    name,
                    active,
                    namespace,
                    name,
                )
            return
        result = self.hook.delete_rayservice_if_owned(name, namespace, event["uid"], task_identity(context))
        self.log.info(
            "Gave up on RayService %s/%s (%s): delete -> %s", namespace, name, event["status"], result
        )

    def smoke(self, name: str, namespace: str) -> None:
        """One GET to the Serve endpoint; anything but 2xx (or no answer) fails the task."""
        import httpx

        url = str(self.smoke_url).format(service=name, serve_service=serve_service(name), namespace=namespace)
        try:
            response = httpx.get(url, timeout=self.smoke_timeout)
        except httpx.HTTPError as exc:
            raise AirflowException(f"smoke request to {url} failed: {exc}") from exc
        if not response.is_success:
            raise AirflowException(
                f"smoke request to {url} answered HTTP {response.status_code}: {response.text[:200]}"
            )
        self.log.info("Smoke request to %s answered HTTP %d", url, response.status_code)

    def tear_down_previous(self, current: str, current_uid: str, identity: AirflowIdentity) -> list[str]:
        """Delete the RayServices earlier runs of this task deployed, sparing ``current`` (by name and uid)."""
        hook = self.hook
        selector = (
            f"{MANAGED_BY_SELECTOR},{DAG_ID_LABEL}={label_value(identity.dag_id)},"
            f"{TASK_ID_LABEL}={label_value(identity.task_id)}"
        )
        deleted = []
        for service in hook.list_rayservices(self.namespace, selector):
            metadata = service["metadata"]
            if metadata["name"] == current or metadata.get("uid") == current_uid:
                continue
            holder = AirflowIdentity.from_annotations(metadata.get("annotations"))
            if holder is None or (holder.dag_id, holder.task_id) != (identity.dag_id, identity.task_id):
                continue
            result = hook.delete_rayservice(metadata["name"], self.namespace, metadata["uid"])
            self.log.info("Tore down earlier RayService %s/%s: %s", self.namespace, metadata["name"], result)
            deleted.append(metadata["name"])
        if not deleted:
            self.log.info("No earlier RayService of %s.%s to tear down", identity.dag_id, identity.task_id)
        return deleted

    def details(self, service: dict, priority: str, switch_from: str | None = None) -> dict[str, Any]:
        """The ``rayservice`` XCom. ``generation`` and ``switch_from`` are what the wait judges "serving"
        by (``observe_service``); the Kueue tab reads them too, so that it does not call the old cluster's
        traffic SERVING before KubeRay has acted on this deploy."""
        metadata = service["metadata"]
        return {
            "name": metadata["name"],
            "namespace": metadata.get("namespace") or self.namespace,
            "uid": metadata["uid"],
            "serve_service": serve_service(metadata["name"]),
            "queue": self.local_queue,
            "priority": priority,
            "generation": int(metadata.get("generation") or 1),
            "switch_from": switch_from,
        }
