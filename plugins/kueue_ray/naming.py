"""Deterministic names and the label / annotation keys our objects carry.

Every object belongs to one Airflow *deployment* (``kueue_ray.deployment``: one metadata database, e.g.
staging or prod sharing a cluster) and one task try. A RayJob's name hashes the deployment, the task
instance and its try number, so two deployments running the same DAG and run id, and two tries of one
task, never meet on a name. Every RayJob of one task instance (all its tries) also carries the
``task-instance`` label, so a later try finds what earlier tries submitted with one list: it adopts an
unfinished one (a worker died mid-wait) and submits afresh after a finished one (Clear, retry).

Labels are for selection (our watch selects on ``managed-by``) and must be valid label values, so they
are sanitised; annotations carry the full, unmodified identity used for ownership checks.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "airflow-kueue-ray"
MANAGED_BY_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
DAG_ID_LABEL = "airflow.apache.org/dag-id"
TASK_ID_LABEL = "airflow.apache.org/task-id"

DEPLOYMENT_LABEL = "kueue-ray.airflow.apache.org/deployment"
"""Label and annotation: the Airflow deployment that created the object (``kueue_ray.deployment``)."""
TASK_INSTANCE_LABEL = "kueue-ray.airflow.apache.org/task-instance"
"""Label: a hash of (deployment, dag, run, task, map index), the same on every try's RayJob."""

DAG_ID_ANNOTATION = "airflow.apache.org/dag-id"
RUN_ID_ANNOTATION = "airflow.apache.org/run-id"
TASK_ID_ANNOTATION = "airflow.apache.org/task-id"
MAP_INDEX_ANNOTATION = "airflow.apache.org/map-index"
TRY_NUMBER_ANNOTATION = "airflow.apache.org/try-number"
CLUSTER_CONFIG_ANNOTATION = "kueue-ray.airflow.apache.org/cluster-config"
"""On a RayService: the digest of the ``rayClusterConfig`` the deploy operator wrote
(``manifests.cluster_config_digest``), so the next deploy knows whether KubeRay will bring up a new
cluster without reading the config back (Kueue may have rewritten it since)."""
WAITER_ANNOTATION = "kueue-ray.airflow.apache.org/waiter"
"""``<task_id>/<map_index>/<try_number>`` of the sensor try now waiting for the RayJob: the latest try to
register wins, so a killed older try knows the RayJob is no longer its to delete."""

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
PRIORITY_CHANGED_BY_ANNOTATION = "kueue-ray.airflow.apache.org/priority-changed-by"
"""``<user>: <previous class> -> <new class>``: set with the label by a change from the Kueue tab."""
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"

MAX_RAYJOB_NAME = 47
"""KubeRay's limit: it appends "-<5 random>" to build child names that must fit in 53 characters."""
MAX_LABEL_VALUE = 63

_HASH_LEN = 10
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class AirflowIdentity:
    """The task instance a RayJob belongs to (full values, as written into the annotations).

    ``deployment`` is the Airflow deployment that created it; "" for an object created before objects
    carried one (a *legacy* object: see ``kueue_ray.deployment`` for how each part treats those)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1
    deployment: str = ""

    def annotations(self) -> dict[str, str]:
        annotations = {
            DAG_ID_ANNOTATION: self.dag_id,
            RUN_ID_ANNOTATION: self.run_id,
            TASK_ID_ANNOTATION: self.task_id,
            MAP_INDEX_ANNOTATION: str(self.map_index),
            TRY_NUMBER_ANNOTATION: str(self.try_number),
        }
        if self.deployment:
            annotations[DEPLOYMENT_LABEL] = self.deployment
        return annotations

    def labels(self) -> dict[str, str]:
        labels = {
            MANAGED_BY_LABEL: MANAGED_BY_VALUE,
            DAG_ID_LABEL: label_value(self.dag_id),
            TASK_ID_LABEL: label_value(self.task_id),
        }
        if self.deployment:
            labels[DEPLOYMENT_LABEL] = self.deployment
            labels[TASK_INSTANCE_LABEL] = self.task_instance_key()
        return labels

    def rayjob_name(self) -> str:
        """This try's RayJob: distinct per deployment, task instance and try."""
        return rayjob_name(
            self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number, self.deployment
        )

    def legacy_rayjob_name(self) -> str:
        """The name a RayJob of this task instance had before names carried the deployment and the try
        (the same for every try): a retry right after an upgrade looks for it once."""
        return rayjob_name(self.dag_id, self.task_id, self.run_id, self.map_index)

    def task_instance_key(self) -> str:
        """``TASK_INSTANCE_LABEL``'s value: the same for every try of this task instance in this deployment."""
        return _digest(self.deployment, self.dag_id, self.run_id, self.task_id, self.map_index)

    def task_instance_selector(self) -> str:
        """The label selector of every try's RayJob of this task instance in this deployment."""
        return (
            f"{MANAGED_BY_SELECTOR},{DEPLOYMENT_LABEL}={self.deployment},"
            f"{TASK_INSTANCE_LABEL}={self.task_instance_key()}"
        )

    def same_task(self, other: AirflowIdentity | None) -> bool:
        """Same deployment and task instance, any try: a retry may adopt what an earlier try submitted."""
        return other is not None and (
            self.deployment,
            self.dag_id,
            self.task_id,
            self.run_id,
            self.map_index,
        ) == (other.deployment, other.dag_id, other.task_id, other.run_id, other.map_index)

    def with_deployment(self, deployment: str) -> AirflowIdentity:
        return AirflowIdentity(
            self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number, deployment
        )

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str] | None) -> AirflowIdentity | None:
        """Read the identity back from an object's annotations; None if they are missing or garbled."""
        annotations = annotations or {}
        try:
            return cls(
                dag_id=annotations[DAG_ID_ANNOTATION],
                task_id=annotations[TASK_ID_ANNOTATION],
                run_id=annotations[RUN_ID_ANNOTATION],
                map_index=int(annotations.get(MAP_INDEX_ANNOTATION, "-1")),
                try_number=int(annotations.get(TRY_NUMBER_ANNOTATION, "0")),
                deployment=annotations.get(DEPLOYMENT_LABEL, ""),
            )
        except (KeyError, ValueError):
            return None


@dataclass(frozen=True)
class Waiter:
    """The sensor try registered in ``WAITER_ANNOTATION``, written and read only here."""

    task_id: str
    map_index: int
    try_number: int

    @classmethod
    def of(cls, identity: AirflowIdentity) -> Waiter:
        return cls(task_id=identity.task_id, map_index=identity.map_index, try_number=identity.try_number)

    def stamp(self) -> str:
        """``<task_id>/<map_index>/<try_number>``: a task id may contain "/" (task groups), so it is read
        back from the right."""
        return f"{self.task_id}/{self.map_index}/{self.try_number}"

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str] | None) -> Waiter | None:
        """The registered waiter; None if there is none or the stamp is garbled."""
        stamp = (annotations or {}).get(WAITER_ANNOTATION)
        parts = (stamp or "").rsplit("/", 2)
        if len(parts) != 3 or not parts[0]:
            return None
        try:
            return cls(task_id=parts[0], map_index=int(parts[1]), try_number=int(parts[2]))
        except ValueError:
            return None


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()[:_HASH_LEN]


def rayjob_name(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int = -1,
    try_number: int | None = None,
    deployment: str = "",
) -> str:
    """``<short dag>-<short task>-<hash>``: a DNS-1035 label of at most 47 characters.

    The 10-hex hash covers the deployment, dag_id, run_id, task_id, map_index and try number, so the name
    is distinct for every deployment, run, mapped instance and try even when the readable parts are
    truncated identically. Without ``try_number`` and ``deployment`` it is the name RayJobs had before
    they carried either (``AirflowIdentity.legacy_rayjob_name``).
    """
    if try_number is None and not deployment:
        digest = _digest(dag_id, run_id, task_id, map_index)
    else:
        digest = _digest(deployment, dag_id, run_id, task_id, map_index, try_number)
    return _readable_name(dag_id, task_id, digest)


def service_name(dag_id: str, task_id: str, map_index: int = -1, deployment: str = "") -> str:
    """The RayService a deploy task keeps across runs: like ``rayjob_name`` without the run id and the try,
    so the next run updates the same service (KubeRay's zero-downtime upgrade) instead of deploying
    another one; with the deployment, so staging and prod deploy a service each."""
    digest = (
        _digest(dag_id, task_id, map_index)
        if not deployment
        else _digest(deployment, dag_id, task_id, map_index)
    )
    return _readable_name(dag_id, task_id, digest)


def _readable_name(dag_id: str, task_id: str, suffix: str) -> str:
    dag, task = _dns_words(dag_id), _dns_words(task_id)
    if not (dag or task)[:1].isalpha():
        dag = f"r{dag}" if dag else "r"
    dag, task = _share_budget(dag, task, MAX_RAYJOB_NAME - len(suffix) - 1)
    prefix = "-".join(part for part in (dag, task) if part)
    return f"{prefix}-{suffix}"


def _dns_words(text: str) -> str:
    """Lower-case, every run of characters outside [a-z0-9] becomes one dash, no dashes at the ends."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _share_budget(dag: str, task: str, budget: int) -> tuple[str, str]:
    """Truncate the two words so that ``dag-task`` fits ``budget``; a short one donates its room."""
    if not task:
        return dag[:budget].rstrip("-"), ""
    room = budget - 1
    if len(dag) + len(task) > room:
        half = room // 2
        if len(dag) <= half:
            task = task[: room - len(dag)]
        elif len(task) <= room - half:
            dag = dag[: room - len(task)]
        else:
            dag, task = dag[:half], task[: room - half]
    return dag.rstrip("-"), task.strip("-")


def is_dns1035_label(name: str) -> bool:
    return bool(_DNS_1035.match(name)) and len(name) <= MAX_LABEL_VALUE


def is_label_value(value: str) -> bool:
    return len(value) <= MAX_LABEL_VALUE and bool(_LABEL_VALUE.match(value))


def label_value(text: str) -> str:
    """Make ``text`` a valid label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends.

    Invalid characters become "_". A value that had to be cut gets a hash suffix so two long ids that
    share a prefix still select differently.
    """
    if is_label_value(text):
        return text
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", text)
    cleaned = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)
    if len(cleaned) <= MAX_LABEL_VALUE and cleaned:
        return cleaned
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH_LEN]
    head = re.sub(r"[^A-Za-z0-9]+$", "", cleaned[: MAX_LABEL_VALUE - _HASH_LEN - 1])
    return f"{head}-{digest}" if head else digest
