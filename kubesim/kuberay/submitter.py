"""The K8sJobMode submitter: the batch Job KubeRay creates, its pods, and what runs inside them.

KubeRay only creates the Job; Kubernetes' Job controller creates pods and a kubelet runs them. kubesim
has neither, so this module plays both for submitter Jobs (and only those): one pod at a time, a new
pod after a failed one (backoff 10 s, 20 s, ...) until ``backoffLimit``, then the Job's
``Complete`` / ``Failed`` conditions that KubeRay reads. The container runs ``ray job submit
--no-wait`` and ``ray job logs --follow`` against the simulated dashboard, so ``kubectl logs
job/<rayjob>`` shows the submission lines, the driver's progress and the verdict.
"""

from __future__ import annotations

import copy

from kubesim.errors import ApiError
from kubesim.kuberay.context import CREATED_BY, JOBS, OPERATOR, PODS, RAYJOBS, Context, owner_reference
from kubesim.kuberay.dashboard import Behaviour
from kubesim.kuberay.kubelet import pending_pod_status, running_pod_status, schedule_pod

SUBMITTER_CONTAINER = "ray-job-submitter"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
POD_START = 1.0  # simulated seconds from pod creation to a running submitter container
BACKOFF_BASE = 10.0  # the Job controller's pod failure backoff, doubled per failure


def submitter_labels(rayjob_name: str) -> dict[str, str]:
    return {
        "ray.io/originated-from-cr-name": rayjob_name,
        "ray.io/originated-from-crd": "RayJob",
        CREATED_BY: OPERATOR,
    }


def submitter_template(rayjob: dict, head_image: str) -> dict:
    """``getSubmitterTemplate``: the user's (or Kueue's) template, else KubeRay's default container."""
    spec = rayjob.get("spec") or {}
    status = rayjob.get("status") or {}
    template = copy.deepcopy(spec.get("submitterPodTemplate") or {})
    pod_spec = template.setdefault("spec", {})
    if not pod_spec.get("containers"):
        pod_spec["containers"] = [
            {
                "name": SUBMITTER_CONTAINER,
                "image": head_image,
                "resources": {
                    "requests": {"cpu": "500m", "memory": "200Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
            }
        ]
    pod_spec.setdefault("restartPolicy", "Never")
    container = pod_spec["containers"][0]
    address = "http://" + status.get("dashboardURL", "")
    job_id = status.get("jobId", "")
    if not container.get("command"):
        container["command"] = ["/bin/bash", "-ce", "--"]
        container["args"] = [
            f"if ! ray job status --address {address} {job_id} >/dev/null 2>&1 ; then ray job submit --address "
            f"{address} --no-wait --submission-id {job_id} -- {spec.get('entrypoint', '')} ; fi ; "
            f"ray job logs --address {address} --follow {job_id}"
        ]
    container.setdefault("env", []).extend(
        [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "RAY_DASHBOARD_ADDRESS", "value": status.get("dashboardURL", "")},
            {"name": "RAY_JOB_SUBMISSION_ID", "value": job_id},
        ]
    )
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update(submitter_labels(rayjob["metadata"]["name"]))
    return template


def create_submitter_job(ctx: Context, rayjob: dict, head_image: str) -> dict:
    """``createNewK8sJob``, plus the selector and pod labels the API server adds to every Job."""
    name = rayjob["metadata"]["name"]
    namespace = rayjob["metadata"]["namespace"]
    backoff_limit = ((rayjob.get("spec") or {}).get("submitterConfig") or {}).get("backoffLimit", 2)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": submitter_labels(name),
            "ownerReferences": [owner_reference(rayjob)],
        },
        "spec": {
            "backoffLimit": backoff_limit,
            "completions": 1,
            "parallelism": 1,
            "template": submitter_template(rayjob, head_image),
        },
    }
    created = ctx.store.create(JOBS, job, namespace=namespace)
    uid = created["metadata"]["uid"]
    created["spec"]["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
    created["spec"]["template"]["metadata"]["labels"].update(
        {CONTROLLER_UID: uid, JOB_NAME: name, "controller-uid": uid, "job-name": name}
    )
    return ctx.store.update(JOBS, created)


# -- the Job controller (for submitter Jobs) -------------------------------------------------------
def _finished(pod: dict) -> str | None:
    phase = (pod.get("status") or {}).get("phase")
    return phase if phase in ("Succeeded", "Failed") else None


def reconcile_submitter_job(ctx: Context, namespace: str, name: str) -> None:
    try:
        job = ctx.store.get(JOBS, name, namespace=namespace)
    except ApiError as exc:
        if exc.code == 404:
            return
        raise
    meta = job["metadata"]
    if meta.get("deletionTimestamp") or (meta.get("labels") or {}).get(CREATED_BY) != OPERATOR:
        return
    uid = meta["uid"]
    pods, _ = ctx.store.list(PODS, namespace=namespace, label_selector=f"{CONTROLLER_UID}={uid}")
    pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    succeeded = sum(1 for p in pods if _finished(p) == "Succeeded")
    failed = sum(1 for p in pods if _finished(p) == "Failed")
    active = [p for p in pods if not _finished(p)]
    old = job.get("status") or {}
    status = copy.deepcopy(old)
    now = ctx.clock.timestamp()
    status.setdefault("startTime", now)
    conditions = status.setdefault("conditions", [])
    done = any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions)
    backoff_limit = job["spec"].get("backoffLimit", 6)
    if not done and succeeded:
        for kind, reason, message in (
            ("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
            ("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
        ):
            conditions.append(_job_condition(kind, reason, message, now))
        status["completionTime"] = now
    elif not done and failed > backoff_limit:
        for kind in ("FailureTarget", "Failed"):
            conditions.append(
                _job_condition(
                    kind, "BackoffLimitExceeded", "Job has reached the specified backoff limit", now
                )
            )
    elif not done and not active:
        wait = _backoff_remaining(ctx, pods, failed)
        if wait > 0:
            ctx.requeue_after(("job", namespace, name), wait)
        else:
            _create_submitter_pod(ctx, job)
            active = [None]
    status.update(
        {
            "active": len(active),
            "succeeded": succeeded,
            "failed": failed,
            "ready": sum(1 for p in active if p and (p.get("status") or {}).get("phase") == "Running"),
            "terminating": 0,
            "uncountedTerminatedPods": {},
        }
    )
    for counter in ("active", "succeeded", "failed"):
        if status[counter] == 0:
            status.pop(counter)
    if status != old:
        ctx.write_status(JOBS, job, status)


def _job_condition(kind: str, reason: str, message: str, now: str) -> dict:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def _backoff_remaining(ctx: Context, pods: list[dict], failed: int) -> float:
    """Simulated seconds until the Job controller may replace the last failed pod."""
    if not failed:
        return 0.0
    finished = [
        (p["metadata"]["uid"], s["state"]["terminated"]["finishedAt"])
        for p in pods
        for s in (p.get("status") or {}).get("containerStatuses") or []
        if "terminated" in (s.get("state") or {})
    ]
    if not finished:
        return 0.0
    elapsed = min(ctx.simulated_since(uid, "finishedAt", at) for uid, at in finished)
    return BACKOFF_BASE * 2 ** (failed - 1) - elapsed


def _create_submitter_pod(ctx: Context, job: dict) -> None:
    template = job["spec"]["template"]
    meta = template.get("metadata") or {}
    namespace = job["metadata"]["namespace"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{job['metadata']['name']}-",
            "namespace": namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }
    created = ctx.store.create(PODS, pod, namespace=namespace)
    ctx.write_status(PODS, created, pending_pod_status(created, ctx.clock.timestamp()))
    name = created["metadata"]["name"]
    schedule_pod(ctx, namespace, name, POD_START, lambda: _start_container(ctx, namespace, name))


# -- the container ---------------------------------------------------------------------------------
def _start_container(ctx: Context, namespace: str, pod_name: str) -> None:
    try:
        pod = ctx.store.get(PODS, pod_name, namespace=namespace)
    except ApiError as exc:
        if exc.code == 404:
            return
        raise
    if pod["metadata"].get("deletionTimestamp"):
        return
    pod = ctx.write_status(PODS, pod, running_pod_status(pod, ctx.clock.timestamp()))
    ctx.start_process(pod["metadata"]["uid"], _run_submitter(ctx, pod))


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def _rayjob_of(ctx: Context, pod: dict) -> dict | None:
    namespace = pod["metadata"]["namespace"]
    try:
        job_name = pod["metadata"]["labels"][JOB_NAME]
        job = ctx.store.get(JOBS, job_name, namespace=namespace)
        owner = next(r for r in job["metadata"].get("ownerReferences") or [] if r["kind"] == "RayJob")
        return ctx.store.get(RAYJOBS, owner["name"], namespace=namespace)
    except (KeyError, StopIteration, ApiError):
        return None


async def _run_submitter(ctx: Context, pod: dict) -> None:
    """The submitter container's process; its exit code decides the pod's phase."""
    namespace, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    container = pod["spec"]["containers"][0]
    container_name = container.get("name", SUBMITTER_CONTAINER)
    env = _env(container)
    address, job_id = env.get("RAY_DASHBOARD_ADDRESS", ""), env.get("RAY_JOB_SUBMISSION_ID", "")
    cluster = address.split("-head-svc")[0]

    def log(line: str) -> None:
        ctx.logs.append(namespace, pod_name, container_name, line)

    exit_code = 1
    try:
        rayjob = _rayjob_of(ctx, pod)
        failed_so_far = ((rayjob or {}).get("status") or {}).get("failed", 0)
        behaviour = Behaviour.for_attempt(rayjob, failed_so_far)
        entrypoint = ((rayjob or {}).get("spec") or {}).get("entrypoint", "")
        if behaviour.outcome == "SubmissionFailed":
            for line in _submission_failure(address, job_id):
                log(line)
        else:
            run = ctx.dashboards.get_job(namespace, cluster, job_id)
            if run is None:
                for line in _submission_lines(address, job_id):
                    log(line)
                run = ctx.dashboards.submit(namespace, cluster, job_id, entrypoint, behaviour)
            async for line in run.follow():
                log(line)
            exit_code = 1 if run.gone else 0
            if run.gone:
                log(f"ConnectionError: lost the connection to the Ray dashboard at http://{address}")
    finally:
        ctx.logs.close(namespace, pod_name)
    _terminate(ctx, namespace, pod_name, exit_code)


def _terminate(ctx: Context, namespace: str, pod_name: str, exit_code: int) -> None:
    try:
        pod = ctx.store.get(PODS, pod_name, namespace=namespace)
    except ApiError as exc:
        if exc.code == 404:
            return
        raise
    now = ctx.stamp(pod["metadata"]["uid"], "finishedAt")
    status = copy.deepcopy(pod.get("status") or {})
    status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
    for condition in status.get("conditions") or []:
        if condition["type"] in ("Ready", "ContainersReady"):
            condition.update({"status": "False", "reason": "PodCompleted", "lastTransitionTime": now})
    for container in status.get("containerStatuses") or []:
        started = (container.get("state") or {}).get("running", {}).get("startedAt", now)
        container["ready"] = False
        container["started"] = False
        container["state"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": started,
                "finishedAt": now,
            }
        }
    ctx.write_status(PODS, pod, status)


def _submission_lines(address: str, job_id: str) -> list[str]:
    rule = "-" * 55
    return [
        f"Job submission server address: http://{address}",
        "",
        rule,
        f"Job '{job_id}' submitted successfully",
        rule,
        "",
        "Next steps",
        "  Query the logs of the job:",
        f"    ray job logs {job_id}",
        "  Query the status of the job:",
        f"    ray job status {job_id}",
        "  Request the job to be stopped:",
        f"    ray job stop {job_id}",
        "",
        "Tailing logs until the job exits (disconnecting will not stop the job):",
    ]


def _submission_failure(address: str, job_id: str) -> list[str]:
    return [
        f"Job submission server address: http://{address}",
        "Traceback (most recent call last):",
        '  File "/home/ray/anaconda3/bin/ray", line 8, in <module>',
        "    sys.exit(main())",
        '  File "/home/ray/anaconda3/lib/python3.11/site-packages/ray/dashboard/modules/job/sdk.py", line 254, '
        "in submit_job",
        "    self._raise_error(r)",
        f"RuntimeError: Request failed with status code 500: Failed to submit job {job_id} "
        "(kubesim.dev/outcome=SubmissionFailed).",
    ]
