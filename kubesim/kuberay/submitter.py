"""The K8sJobMode submitter: the batch Job KubeRay creates for a RayJob, and the ray CLI that runs in it.

KubeRay only creates the Job (``createNewK8sJob``): owned by the RayJob, ``backoffLimit`` from
``submitterConfig``, no Kueue queue label (Kueue admits the RayJob, never its submitter). The cluster's Job
controller (``kubesim.batch.controller``) makes its pods, replaces failed ones after its backoff until
``backoffLimit`` and writes the ``Complete`` / ``Failed`` conditions KubeRay reads. What its container
runs is the Ray image's ``ray job submit --no-wait`` and ``ray job logs --follow`` against the simulated
dashboard (``ray_job_cli``, a program the kubelet runs), so ``kubectl logs job/<rayjob>`` shows the
submission lines, the driver's progress and the verdict.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from kubesim.batch.container import shell_line
from kubesim.errors import ApiError
from kubesim.job_strategy import JOB_NAME
from kubesim.kubelet import ContainerProgram, Process
from kubesim.kuberay.context import CREATED_BY, JOBS, OPERATOR, RAYJOBS, Context, owner_reference
from kubesim.kuberay.dashboard import Behaviour

SUBMITTER_CONTAINER = "ray-job-submitter"
RAY_JOB_COMMANDS = ("ray job submit", "ray job logs")


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
    """``createNewK8sJob``; the API server adds the selector and the pod labels, as to every Job."""
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
    return ctx.store.create(JOBS, job, namespace=namespace)


# -- the ray CLI in the submitter container --------------------------------------------------------
def ray_job_cli(ctx: Context) -> ContainerProgram:
    """The program of a container whose command runs ``ray job submit`` / ``ray job logs``: it talks to
    the dashboard KubeRay names in ``RAY_DASHBOARD_ADDRESS`` about submission ``RAY_JOB_SUBMISSION_ID``
    (the same address and id KubeRay writes into the default command)."""

    def program(pod: dict, container: dict) -> Process | None:
        line = shell_line(container)
        if not any(command in line for command in RAY_JOB_COMMANDS):
            return None

        async def process(log: Callable[[str], None]) -> int:
            return await _run_submitter(ctx, pod, container, log)

        return process

    return program


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


async def _run_submitter(ctx: Context, pod: dict, container: dict, log: Callable[[str], None]) -> int:
    """Submit the Ray job (unless the dashboard knows it already), then follow its driver log: exit 0
    once the job ended, 1 when the submission is refused or the dashboard goes away under it."""
    namespace = pod["metadata"]["namespace"]
    env = _env(container)
    address, job_id = env.get("RAY_DASHBOARD_ADDRESS", ""), env.get("RAY_JOB_SUBMISSION_ID", "")
    cluster = address.split("-head-svc")[0]
    rayjob = _rayjob_of(ctx, pod)
    failed_so_far = ((rayjob or {}).get("status") or {}).get("failed", 0)
    behaviour = Behaviour.for_attempt(rayjob, failed_so_far)
    entrypoint = ((rayjob or {}).get("spec") or {}).get("entrypoint", "")
    if behaviour.outcome == "SubmissionFailed":
        for line in _submission_failure(address, job_id):
            log(line)
        return 1
    run = ctx.dashboards.get_job(namespace, cluster, job_id)
    if run is None:
        for line in submission_lines(address, job_id):
            log(line)
        run = ctx.dashboards.submit(namespace, cluster, job_id, entrypoint, behaviour)
    async for line in run.follow():
        log(line)
    if run.gone:
        log(f"ConnectionError: lost the connection to the Ray dashboard at http://{address}")
        return 1
    return 0


def submission_lines(address: str, job_id: str) -> list[str]:
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
