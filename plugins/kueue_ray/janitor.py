"""DeleteOrphanedRayJobsOperator: the sweep that frees the quota of RayJobs no task waits for any more,
and deletes finished ones once their retention period has passed.

The rules are :mod:`kueue_ray.orphans` and :mod:`kueue_ray.retention` (pure); this module only gathers
their inputs and acts on their verdicts.
Airflow's states come from the task's own execution API (``RuntimeTaskInstance.get_dr_count`` and
``get_task_states``), so the janitor needs no database access and no REST credentials: it runs as a plain
task on any worker, like the pipelines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from kueue_ray.naming import AirflowIdentity
from kueue_ray.options import SECTION
from kueue_ray.orphans import janitor_selectors, needs_decision, orphan_reason
from kueue_ray.retention import (
    CONFIG_OPTION,
    DEFAULT_RETENTION_DAYS,
    expiry_reason,
    needs_retention_decision,
    parse_retention_days,
    past_retention,
)

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from airflow.sdk import Context

    from kueue_ray.deletion import DeleteOutcome

DECISIONS = 5
"""How often one orphan is judged again when it changes between the judgement and the deletion."""
EXPIRED = "Expired"
"""How the log names a finished RayJob deleted after its retention period (an orphan is "Orphaned")."""
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
    deleted if it still is an orphan).

        Finished RayJobs are deleted once they have been finished for longer than the retention period,
        and only once their DAG run and the task that collects their result have ended (see
        :mod:`kueue_ray.retention`); their Workload, submitter Job and pods follow by garbage collection.
        Returns one record per orphan or expired RayJob found.

        .. code-block:: python

            DeleteOrphanedRayJobsOperator(task_id="delete_orphans", namespaces=["ray", "team-a"])

        :param namespaces: where to look (templated).
        :param kubernetes_conn_id: Airflow ``kubernetes`` connection.
        :param dry_run: only report what would be deleted (templated, e.g. from a Param with
            ``render_template_as_native_obj=True``).
        :param retention_days: days a finished RayJob is kept (templated; fractions allowed); None: the
            Airflow option ``[kueue_ray] retention_days`` (default 7).
    """

    template_fields: Sequence[str] = ("namespaces", "dry_run", "retention_days")

    def __init__(
        self,
        *,
        namespaces: Sequence[str] | str = ("ray",),
        kubernetes_conn_id: str = "kubernetes_default",
        dry_run: bool = False,
        retention_days: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deployment: str | None = None
        self.namespaces = namespaces
        self.kubernetes_conn_id = kubernetes_conn_id
        self.dry_run = dry_run
        self.retention_days = retention_days

    def execute(self, context: Context) -> list[dict[str, str]]:
        from kueue_ray.deployment import current
        from kueue_ray.hook import RayJobHook

        retention = self._retention()
        hook = RayJobHook(kubernetes_conn_id=self.kubernetes_conn_id)
        ti = context["ti"]
        self.deployment = current()
        namespaces = [self.namespaces] if isinstance(self.namespaces, str) else list(self.namespaces)
        found: list[dict[str, str]] = []
        for namespace in namespaces:
            listings = [
                hook.managed_rayjobs(namespace, label_selector=selector)
                for selector in janitor_selectors(self.deployment)
            ]
            rayjobs = [job for listing in listings for job in listing.items]
            candidates = [job for job in rayjobs if needs_decision(job, self.deployment)]
            self.log.info(
                "%s: %d active RayJobs submitted by this Airflow deployment (%s), or before RayJobs carried one",
                namespace,
                len(candidates),
                self.deployment,
            )
            for run, of_run in _by_dag_run(candidates).items():
                run_exists, states = _airflow_view(ti, *run)
                for rayjob in of_run:
                    reason = orphan_reason(rayjob, run_exists=run_exists, task_states=states)
                    if reason is not None:
                        found.append(self._delete(hook, ti, rayjob, reason))
            finished = [job for job in rayjobs if needs_retention_decision(job)]
            found.extend(self._expire_all(hook, ti, finished, listings[0].server_time, retention))
        self.log.info(
            "%d orphaned or expired RayJobs %s", len(found), "found (dry run)" if self.dry_run else "handled"
        )
        return found

    def _retention(self) -> timedelta:
        """The retention period: this task's ``retention_days``, else ``[kueue_ray] retention_days``."""
        if self.retention_days not in (None, "", "None"):  # a Param left empty, rendered natively or not
            return parse_retention_days(self.retention_days, source="retention_days (janitor argument)")
        from airflow.configuration import conf

        configured = conf.get(SECTION, CONFIG_OPTION, fallback=None)
        if configured in (None, ""):
            return parse_retention_days(DEFAULT_RETENTION_DAYS)
        return parse_retention_days(configured, source=f"[kueue_ray] {CONFIG_OPTION}")

    def _expire_all(
        self, hook: Any, ti: Any, finished: list[dict], now: datetime | None, retention: timedelta
    ) -> list[dict[str, str]]:
        """Delete the finished RayJobs whose retention has passed; ``now`` is the API server's time of the
        list (its ``Date``), so ages are measured on the clock that wrote their ``endTime``."""
        if now is None:
            from kueue_ray.kube.api import utcnow

            self.log.warning("The API server's answer had no Date header: measuring retention on this clock")
            now = utcnow()
        due = [job for job in finished if past_retention(job, now=now, retention=retention)]
        self.log.info(
            "%d finished RayJobs submitted by Airflow, %d of them finished more than %s ago",
            len(finished),
            len(due),
            retention,
        )
        records = []
        for run, rayjobs in _by_dag_run(due).items():
            run_state, states = _run_view(ti, *run)
            for rayjob in rayjobs:
                judge = _retention_judge(now, retention, run_state, states)
                reason = judge(rayjob)
                if reason is not None:
                    records.append(self._expire(hook, rayjob, reason, judge))
        return records

    def _expire(
        self, hook: Any, rayjob: dict, reason: str, judge: Callable[[dict], str | None]
    ) -> dict[str, str]:
        """Delete one expired RayJob with the uid and version it was judged on; when it changed since
        (409), judge what is there now (a finished RayJob changes only in its metadata)."""
        from kueue_ray.deletion import KEPT_CHANGING, DeleteOutcome, DeleteResult

        metadata = rayjob["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        if self.dry_run:
            return self._report(name, namespace, reason, DRY_RUN, EXPIRED)
        for _ in range(DECISIONS):
            result = hook.delete_rayjob(name, namespace, metadata["uid"], metadata.get("resourceVersion"))
            if result is not DeleteResult.CONFLICT:
                return self._report(name, namespace, reason, DeleteOutcome(result), EXPIRED)
            current = hook.get_rayjob(name, namespace)
            if current is None or current["metadata"].get("uid") != metadata["uid"]:
                return self._report(name, namespace, reason, DeleteOutcome(DeleteResult.GONE), EXPIRED)
            again = judge(current)
            if again is None:
                return self._report(
                    name,
                    namespace,
                    reason,
                    DeleteOutcome.not_deleted("it changed since it was read"),
                    EXPIRED,
                )
            reason, metadata = again, current["metadata"]
        return self._report(name, namespace, reason, KEPT_CHANGING, EXPIRED)

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

    def _report(
        self, name: str, namespace: str, reason: str, outcome: DeleteOutcome | str, kind: str = "Orphaned"
    ) -> dict[str, str]:
        """One XCom record; ``result`` is the outcome's text ("deleted", "not deleted: <why>"), a plain
        string so that the record reads the same in JSON as in the log."""
        self.log.info("%s RayJob %s/%s: %s; %s", kind, namespace, name, reason, outcome)
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


def _run_view(ti: Any, dag_id: str, run_id: str) -> tuple[str | None, dict[str, str | None]]:
    """(the DAG run's state, None when it no longer exists; its task states) from the execution API."""
    if not ti.get_dr_count(dag_id=dag_id, run_ids=[run_id]):
        return None, {}
    state = ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)
    return str(getattr(state, "value", state)), dict(
        ti.get_task_states(dag_id=dag_id, run_ids=[run_id]).get(run_id) or {}
    )


def _retention_judge(
    now: datetime, retention: timedelta, run_state: str | None, states: dict[str, str | None]
) -> Callable[[dict], str | None]:
    """The retention rule with this DAG run's view bound: RayJob -> reason to delete it, or None."""

    def judge(rayjob: dict) -> str | None:
        if not needs_retention_decision(rayjob):
            return None
        return expiry_reason(rayjob, now=now, retention=retention, run_state=run_state, task_states=states)

    return judge
