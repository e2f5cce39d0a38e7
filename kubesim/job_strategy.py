"""What the API server itself does to a batch/v1 Job before storing it: defaulting, the generated
selector, and the validation a client meets (pure functions, run as the first store admission hook).

* Defaulting (``SetDefaults_Job``): ``parallelism`` and ``completions`` 1 when both are unset,
  ``parallelism`` 1, ``backoffLimit`` 6, ``completionMode`` NonIndexed, ``suspend`` false,
  ``podReplacementPolicy`` TerminatingOrFailed; the pod template's ``restartPolicy`` Always (so a Job
  that forgot it is refused, as by a real API server), ``dnsPolicy`` ClusterFirst, ``schedulerName``,
  ``terminationGracePeriodSeconds`` 30.
* Selector (``generateSelector``, unless ``manualSelector``): the template gets ``controller-uid``,
  ``batch.kubernetes.io/controller-uid``, ``job-name`` and ``batch.kubernetes.io/job-name``, the
  selector matches ``batch.kubernetes.io/controller-uid``.
* Validation (422 Invalid): ``restartPolicy`` OnFailure or Never, at least one container, non-negative
  counts, a selector that matches the template's labels; on update the selector, ``completions``,
  ``completionMode`` and the pod template are immutable, except the template's scheduling directives
  (labels, annotations, nodeSelector, tolerations, schedulingGates) while the Job is suspended and has no
  ``status.startTime``: what lets Kueue inject a flavor's node labels when it admits the Job.
"""

from __future__ import annotations

import copy
import json

from kubesim.errors import cause, invalid
from kubesim.selectors import match_label_selector_obj

JOBS = "jobs.batch"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
RESTART_POLICIES = ("OnFailure", "Never")
SCHEDULING_DIRECTIVES = ("nodeSelector", "tolerations", "schedulingGates")
"""Pod template fields a suspended, never-started Job may change (``JobMutableNodeSchedulingDirectives``)."""
IMMUTABLE = "field is immutable"


def default_job(job: dict) -> None:
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    for field, value in (
        ("parallelism", 1),
        ("backoffLimit", 6),
        ("completionMode", "NonIndexed"),
        ("suspend", False),
        ("podReplacementPolicy", "TerminatingOrFailed"),
    ):
        if spec.get(field) is None:
            spec[field] = value
    pod_spec = spec.setdefault("template", {}).setdefault("spec", {})
    for field, value in (
        ("restartPolicy", "Always"),
        ("dnsPolicy", "ClusterFirst"),
        ("schedulerName", "default-scheduler"),
        ("terminationGracePeriodSeconds", 30),
    ):
        if pod_spec.get(field) is None:
            pod_spec[field] = value


def generate_selector(job: dict) -> None:
    """``generateSelector``: labels that tie the pods to this Job (by uid) and name it, and the selector."""
    meta = job["metadata"]
    spec = job["spec"]
    if spec.get("manualSelector"):
        return
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    for key in (LEGACY_JOB_NAME, JOB_NAME):
        labels.setdefault(key, meta["name"])
    for key in (LEGACY_CONTROLLER_UID, CONTROLLER_UID):
        labels.setdefault(key, meta["uid"])
    selector = spec.get("selector") or {}
    selector.setdefault("matchLabels", {}).setdefault(CONTROLLER_UID, meta["uid"])
    spec["selector"] = selector


def _go(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def validation_causes(job: dict) -> list[dict]:
    """``ValidateJob``: the causes of a 422 for a Job as stored (after defaulting)."""
    spec = job.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    causes = []
    for field in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < 0):
            message = f"Invalid value: {_go(value)}: must be greater than or equal to 0"
            causes.append(cause(f"spec.{field}", "FieldValueInvalid", message))
    if not pod_spec.get("containers"):
        causes.append(cause("spec.template.spec.containers", "FieldValueRequired", "Required value"))
    policy = pod_spec.get("restartPolicy")
    if policy not in RESTART_POLICIES:
        supported = ", ".join(f'"{p}"' for p in RESTART_POLICIES)
        message = f"Unsupported value: {_go(policy)}: supported values: {supported}"
        causes.append(cause("spec.template.spec.restartPolicy", "FieldValueNotSupported", message))
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if selector is None:
        causes.append(cause("spec.selector", "FieldValueRequired", "Required value"))
    elif not match_label_selector_obj(selector, labels):
        message = f"Invalid value: {_go(labels)}: `selector` does not match template `labels`"
        causes.append(cause("spec.template.metadata.labels", "FieldValueInvalid", message))
    return causes


def _scheduling_view(template: dict) -> dict:
    """The template without what a suspended, never-started Job may change."""
    view = copy.deepcopy(template)
    meta = view.setdefault("metadata", {})
    meta.pop("labels", None)
    meta.pop("annotations", None)
    for field in SCHEDULING_DIRECTIVES:
        view.setdefault("spec", {}).pop(field, None)
    return view


def update_causes(old: dict, new: dict) -> list[dict]:
    """``ValidateJobUpdate``: what may not change once a Job exists."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    causes = []
    for field in ("selector", "completions", "completionMode", "podFailurePolicy"):
        if old_spec.get(field) != new_spec.get(field):
            message = f"Invalid value: {_go(new_spec.get(field))}: {IMMUTABLE}"
            causes.append(cause(f"spec.{field}", "FieldValueInvalid", message))
    old_template, new_template = old_spec.get("template") or {}, new_spec.get("template") or {}
    if old_template != new_template:
        may_schedule = old_spec.get("suspend") and not (old.get("status") or {}).get("startTime")
        if not may_schedule or _scheduling_view(old_template) != _scheduling_view(new_template):
            message = f"Invalid value: core.PodTemplateSpec{{...}}: {IMMUTABLE}"
            causes.append(cause("spec.template", "FieldValueInvalid", message))
    return causes


def admission_hook(operation: str, rt, obj: dict, old: dict | None) -> None:
    """The Job strategy as a store hook (``PrepareForCreate`` + ``Validate`` / ``ValidateUpdate``)."""
    if rt.key != JOBS:
        return
    default_job(obj)
    if operation == "CREATE":
        generate_selector(obj)
        causes = validation_causes(obj)
    else:
        causes = validation_causes(obj) + update_causes(old or {}, obj)
    if causes:
        raise invalid(rt, obj["metadata"].get("name", ""), causes)
