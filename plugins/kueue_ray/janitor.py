"""DeleteOrphanedRayJobsOperator: the sweep that frees the quota of RayJobs no task waits for any more.

The rule is :mod:`kueue_ray.orphans` (pure); this module only gathers its inputs and acts on its verdict.
Airflow's states come from the task's own execution API (``RuntimeTaskInstance.get_dr_count`` and
``get_task_states``), so the janitor needs no database access and no REST credentials: it runs as a plain
task on any worker, like the pipelines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from kueue_ray.naming import AirflowIdentity
from kueue_ray.orphans import janitor_selectors, needs_decision, orphan_reason

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kueue_ray.deletion import DeleteOutcome

DECISIONS = 5
"""How often one orphan is judged again when it changes between the judgement and the deletion."""
DRY_RUN = "not deleted (dry run)"
"""The result a dry run reports for an orphan it would delete."""


class DeleteOrphanedRayJobsOperator(BaseOperator):
    """Delete the active RayJobs (created by this integration in this Airflow deployment) that no Airflow
    task will wait for again; another deployment's RayJobs are never listed.

        An orphan is a RayJob whose DAG run is gone, whose registered waiting sensor has ended, or whose
        submitting task failed for good with no sensor waiting (see :mod:`kueue_ray.orphans` for the exact
        rule and why it never touches a RayJob a task may still adopt). Each deletion carries the RayJob's uid
        and the resourceVersion the decision was made on, so a retry that adopts the RayJob meanwhile (and
        re-annotates it) turns the deletion into a 409, after which the RayJob is read and judged again (and
    deleted if it still is an orphan). Returns one record per orphan found.

        .. code-block:: python

            DeleteOrphanedRayJobsOperator(task_id="delete_orphans", namespaces=["ray", "team-a"])

        :param namespaces: where to look (templated).
        :param kubernetes_conn_id: Airflow ``kubernetes`` connection.
        :param dry_run: only report what would be deleted (templated, e.g. from a Param with
            ``render_template_as_native_obj=True``).
    """

    template_fields: Sequence[str] = ("namespaces", "dry_run")

    def __init__(
        self,
        *,
        namespaces: Sequence[str] | str = ("ray",),
        kubernetes_conn_id: str = "kubernetes_default",
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deployment: str | None = None
        self.namespaces = namespaces
        self.kubernetes_conn_id = kubernetes_conn_id
        self.dry_run = dry_run

    def execute(self, context: Context) -> list[dict[str, str]]:
        from kueue_ray.deployment import current
        from kueue_ray.hook import RayJobHook

        hook = RayJobHook(kubernetes_conn_id=self.kubernetes_conn_id)
        ti = context["ti"]
        self.deployment = current()
        namespaces = [self.namespaces] if isinstance(self.namespaces, str) else list(self.namespaces)
        found: list[dict[str, str]] = []
        for namespace in namespaces:
            listed = [
                job
                for selector in janitor_selectors(self.deployment)
                for job in hook.list_managed_rayjobs(namespace, label_selector=selector)
            ]
            candidates = [job for job in listed if needs_decision(job, self.deployment)]
            self.log.info(
                "%s: %d active RayJobs submitted by this Airflow deployment (%s), or before RayJobs carried one",
                namespace,
                len(candidates),
                self.deployment,
            )
            for run, rayjobs in _by_dag_run(candidates).items():
                run_exists, states = _airflow_view(ti, *run)
                for rayjob in rayjobs:
                    reason = orphan_reason(rayjob, run_exists=run_exists, task_states=states)
                    if reason is not None:
                        found.append(self._delete(hook, ti, rayjob, reason))
        self.log.info("%d orphaned RayJobs %s", len(found), "found (dry run)" if self.dry_run else "handled")
        return found

    def _delete(self, hook: Any, ti: Any, rayjob: dict, reason: str) -> dict[str, str]:
        """Delete one orphan with the uid and version it was judged on. When it changed since (409), it
        is read again and judged again, with Airflow asked again too: a retry that adopted it meanwhile
        re-annotated it, and its task is running again."""
        from kueue_ray.deletion import KEPT_CHANGING, DeleteOutcome, DeleteResult

        metadata = rayjob["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        if self.dry_run:
            return self._report(name, namespace, reason, DRY_RUN)
        for _ in range(DECISIONS):
            result = hook.delete_rayjob(name, namespace, metadata["uid"], metadata.get("resourceVersion"))
            if result is not DeleteResult.CONFLICT:
                return self._report(name, namespace, reason, DeleteOutcome(result))
            current = hook.get_rayjob(name, namespace)
            if current is None or current["metadata"].get("uid") != metadata["uid"]:
                return self._report(name, namespace, reason, DeleteOutcome(DeleteResult.GONE))
            if not needs_decision(current, self.deployment):
                return self._report(
                    name, namespace, reason, DeleteOutcome.not_deleted("it finished since it was read")
                )
            identity = AirflowIdentity.from_annotations(current["metadata"].get("annotations"))
            run_exists, states = _airflow_view(ti, identity.dag_id, identity.run_id)
            again = orphan_reason(current, run_exists=run_exists, task_states=states)
            if again is None:
                return self._report(
                    name,
                    namespace,
                    reason,
                    DeleteOutcome.not_deleted("it changed since it was read and a task may wait for it now"),
                )
            self.log.info(
                "RayJob %s/%s changed since it was read and is still an orphan: %s", namespace, name, again
            )
            reason, metadata = again, current["metadata"]
        return self._report(name, namespace, reason, KEPT_CHANGING)

    def _report(self, name: str, namespace: str, reason: str, outcome: DeleteOutcome | str) -> dict[str, str]:
        """One XCom record; ``result`` is the outcome's text ("deleted", "not deleted: <why>"), a plain
        string so that the record reads the same in JSON as in the log."""
        self.log.info("Orphaned RayJob %s/%s: %s; %s", namespace, name, reason, outcome)
        return {"name": name, "namespace": namespace, "reason": reason, "result": str(outcome)}


def _by_dag_run(rayjobs: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """RayJobs grouped by (dag_id, run_id), so Airflow is asked once per DAG run."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for rayjob in rayjobs:
        identity = AirflowIdentity.from_annotations(rayjob["metadata"].get("annotations"))
        if identity is not None:
            runs.setdefault((identity.dag_id, identity.run_id), []).append(rayjob)
    return runs


def _airflow_view(ti: Any, dag_id: str, run_id: str) -> tuple[bool, dict[str, str | None]]:
    """(does the DAG run exist, its task states keyed as ``orphans.state_key``) from the execution API."""
    if not ti.get_dr_count(dag_id=dag_id, run_ids=[run_id]):
        return False, {}
    return True, dict(ti.get_task_states(dag_id=dag_id, run_ids=[run_id]).get(run_id) or {})
