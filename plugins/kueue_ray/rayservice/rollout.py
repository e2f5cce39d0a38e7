"""Bringing a RayService to the spec a deploy task rendered: create it, adopt the one an earlier try of the
same run deployed, or update the one an earlier run deployed, the way KubeRay upgrades (a new cluster
config makes KubeRay start a pending cluster and switch traffic; a new Serve config is applied in place).

Apart from ``kueue_ray.serving`` because it runs only in a worker: a DAG file imports the operator, and a
parse must not pay for this module or the hook and manifests it uses.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from kueue_ray.naming import CLUSTER_CONFIG_ANNOTATION, AirflowIdentity

if TYPE_CHECKING:
    from kueue_ray.rayservice.hook import RayServiceHook

ROLLOUT_ANNOTATION = "kueue-ray.airflow.apache.org/rollout"
"""On the head pod template of a RayService's cluster config: the run and try that rolled it out again
after an earlier try's rollout had finished (a Clear). It is part of the config KubeRay hashes, so KubeRay
brings up a new cluster and switches traffic to it, as ``kubectl rollout restart`` does for a Deployment."""
REPLACES_ANNOTATION = "kueue-ray.airflow.apache.org/replaces"
"""On a RayService the deploy operator updated: the active RayCluster the update replaces ("" when KubeRay
keeps its cluster). A retry of the same deploy reads it back to wait for the same switch."""
SERVICE_WORKLOAD_BLOCKS = (
    "Kueue admits this RayService as one Workload (the shipped integrations.frameworks include "
    "ray.io/rayservice): for a new cluster config it would delete that Workload and create none while "
    "the current cluster serves, so KubeRay's new cluster would never start"
)


@dataclass(frozen=True)
class Deployment:
    """What the operator did to the cluster, and so what to wait for."""

    service: dict
    created: bool
    switch_from: str | None
    """The active cluster an upgrade replaces (KubeRay switches traffic away from it), or None."""
    action: str


def _serve_config(spec: Mapping[str, Any]) -> Any:
    import yaml

    try:
        return yaml.safe_load(spec.get("serveConfigV2") or "")
    except yaml.YAMLError:
        return spec.get("serveConfigV2")


def _is_ready(service: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (service.get("status") or {}).get("conditions") or ()
    )


def _rolled_out(service: dict) -> bool:
    """Whether the last rollout of ``service`` finished: Ready, no pending cluster, the spec observed."""
    status = service.get("status") or {}
    pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName")
    observed = status.get("observedGeneration")
    generation = service["metadata"].get("generation")
    return _is_ready(service) and not pending and (observed is None or observed == generation)


def _stamped(body: dict, identity: AirflowIdentity) -> dict:
    """``body`` with this run and try in its head pod template (``ROLLOUT_ANNOTATION``) and the cluster
    config digest to match: a new cluster config, so KubeRay rolls the service out again."""
    import copy

    from kueue_ray.manifests import cluster_config_digest

    stamped = copy.deepcopy(body)
    config = stamped["spec"]["rayClusterConfig"]
    template = config.setdefault("headGroupSpec", {}).setdefault("template", {})
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[ROLLOUT_ANNOTATION] = f"{identity.run_id} try {identity.try_number}"
    stamped["metadata"]["annotations"][CLUSTER_CONFIG_ANNOTATION] = cluster_config_digest(config)
    return stamped


def foreign_service(holder: AirflowIdentity | None, identity: AirflowIdentity) -> str | None:
    """Whose RayService this is, when it is not this task's to upgrade: another Airflow deployment's,
    another task's, or not Airflow's at all; None when it is this task's (legacy: no deployment yet)."""
    if holder is None:
        return "was not created by an Airflow task"
    if holder.deployment and holder.deployment != identity.deployment:
        return (
            f"belongs to another Airflow deployment, {holder.deployment} (DAG {holder.dag_id}, task "
            f"{holder.task_id}, run {holder.run_id})"
        )
    if (holder.dag_id, holder.task_id, holder.map_index) != (
        identity.dag_id,
        identity.task_id,
        identity.map_index,
    ):
        return f"belongs to another task, {holder.dag_id}.{holder.task_id} (run {holder.run_id})"
    return None


class Rollout:
    """One deploy task's create-or-update of its RayService in ``namespace``, logging what it did."""

    def __init__(self, namespace: str, log: logging.Logger, *, take_over: bool = False) -> None:
        self.namespace = namespace
        self.log = log
        self.take_over = take_over

    def deploy(self, hook: RayServiceHook, body: dict, identity: AirflowIdentity) -> Deployment:
        """Create the RayService, adopt the one an earlier try of this run deployed, or update the one an
        earlier run deployed (``upgrade``): whatever brings the cluster to ``body``."""
        name = body["metadata"]["name"]
        service, created = hook.create_or_get_rayservice(body, self.namespace)
        if created:
            self.log.info(
                "Created RayService %s/%s (uid %s)", self.namespace, name, service["metadata"]["uid"]
            )
            return Deployment(service, created=True, switch_from=None, action="created")
        holder = AirflowIdentity.from_annotations(service["metadata"].get("annotations"))
        refusal = foreign_service(holder, identity)
        if refusal is not None and not self.take_over:
            raise AirflowFailException(
                f"RayService {self.namespace}/{name} {refusal}; this task ({identity.dag_id}.{identity.task_id} "
                f"of Airflow deployment {identity.deployment}) does not upgrade it. Choose another "
                f"service_name, or pass take_over=True to DeployRayServiceOperator to take it over deliberately"
            )
        if refusal is not None:
            self.log.warning(
                "take_over=True: RayService %s/%s %s; upgrading it, and from now on it is this task's",
                self.namespace,
                name,
                refusal,
            )
            holder = AirflowIdentity(
                identity.dag_id, identity.task_id, "", identity.map_index, 0, identity.deployment
            )
        if (
            holder.run_id == identity.run_id
            and holder.try_number != identity.try_number
            and _rolled_out(service)
        ):
            if self._admitted_as_one_workload(hook, service):
                self.log.warning(
                    "RayService %s/%s was rolled out to the end by try %s of this run; try %s cannot roll it "
                    "out again: %s. The service is checked as it is (smoke request, teardown)",
                    self.namespace,
                    name,
                    holder.try_number,
                    identity.try_number,
                    SERVICE_WORKLOAD_BLOCKS,
                )
            else:
                self.log.info(
                    "RayService %s/%s was rolled out to the end by try %s of this run; try %s rolls it out "
                    "again (a Clear re-runs the deploy: KubeRay brings up a new cluster and switches traffic)",
                    self.namespace,
                    name,
                    holder.try_number,
                    identity.try_number,
                )
                body = _stamped(body, identity)
        for _ in range(10):
            deployment = self._update(hook, service, body, identity, holder)
            if deployment is not None:
                return deployment
            service = hook.get_rayservice(name, self.namespace)
            if service is None:
                return self.deploy(hook, body, identity)
        raise AirflowException(
            f"RayService {self.namespace}/{name} kept changing while updating it; retry the task"
        )

    def _update(
        self,
        hook: RayServiceHook,
        current: dict,
        body: dict,
        identity: AirflowIdentity,
        holder: AirflowIdentity,
    ) -> Deployment | None:
        """One optimistic update of ``current`` towards ``body``; None when someone wrote in between."""
        from kueue_ray.manifests import cluster_config_digest

        name = current["metadata"]["name"]
        annotations = current["metadata"].get("annotations") or {}
        spec = current.get("spec") or {}
        cluster_before = annotations.get(CLUSTER_CONFIG_ANNOTATION) or cluster_config_digest(
            spec.get("rayClusterConfig")
        )
        cluster_changed = cluster_before != body["metadata"]["annotations"][CLUSTER_CONFIG_ANNOTATION]
        serve_changed = _serve_config(spec) != _serve_config(body["spec"])
        same_run = holder.run_id == identity.run_id
        active = ((current.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterName")
        admitted_whole = False
        if same_run and not cluster_changed and not serve_changed:
            replaces = annotations.get(REPLACES_ANNOTATION)
            action = f"adopted from try {holder.try_number}"
            created = replaces is None
            switch_from = replaces or None
        else:
            admitted_whole = cluster_changed and self._admitted_as_one_workload(hook, current)
            if admitted_whole and _is_ready(current):
                raise AirflowFailException(
                    f"cannot upgrade RayService {self.namespace}/{name} to a new cluster config: "
                    f"{SERVICE_WORKLOAD_BLOCKS}. Nothing was changed; RayCluster {active} keeps serving. Use "
                    f"mode='new_service', change only serveConfigV2, or let Kueue admit RayServices through "
                    f"their RayClusters (drop ray.io/rayservice from integrations.frameworks)"
                )
            switch_from = active if cluster_changed and active else None
            replaces = switch_from or ""
            created = False
            action = "upgraded: new cluster config" if cluster_changed else (
                "updated: new Serve config" if serve_changed else "unchanged"
            )  # fmt: skip
        updated = dict(current)
        metadata = dict(current["metadata"])
        metadata["labels"] = {**(metadata.get("labels") or {}), **body["metadata"]["labels"]}
        metadata["annotations"] = {
            **annotations,
            **body["metadata"]["annotations"],
            REPLACES_ANNOTATION: replaces,
        }
        if created:
            metadata["annotations"].pop(REPLACES_ANNOTATION)
        updated["metadata"] = metadata
        new_spec = dict(spec)
        new_spec["serveConfigV2"] = body["spec"].get("serveConfigV2")
        for key, value in body["spec"].items():
            if key not in ("rayClusterConfig", "serveConfigV2"):
                new_spec[key] = value
        if cluster_changed:
            config = dict(body["spec"]["rayClusterConfig"])
            if admitted_whole:
                config["suspend"] = (
                    True  # as Kueue's webhook would: no cluster before the new Workload's admission
                )
            new_spec["rayClusterConfig"] = config
        updated["spec"] = new_spec
        updated.pop("status", None)
        written = hook.replace_rayservice(updated)
        if written is None:
            return None
        self.log.info(
            "RayService %s/%s (uid %s, generation %s) %s%s",
            self.namespace,
            name,
            written["metadata"]["uid"],
            written["metadata"].get("generation"),
            action,
            f"; KubeRay brings up a new cluster and switches traffic from RayCluster {switch_from}"
            if switch_from
            else "",
        )
        return Deployment(written, created=created, switch_from=switch_from, action=action)

    def _admitted_as_one_workload(self, hook: RayServiceHook, service: dict) -> bool:
        """Whether Kueue admits this RayService as one Workload (the shipped configuration) rather than
        through its RayClusters: its Workload exists, or Kueue's webhook suspended it."""
        from kueue_ray.rayservice.status import service_workload

        config = (service.get("spec") or {}).get("rayClusterConfig") or {}
        if config.get("suspend") is not None:
            return True
        return service_workload(service, hook.list_job_workloads(self.namespace)) is not None
