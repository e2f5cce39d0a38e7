"""Kueue's RayJob integration rules: Workload naming, pod sets, start/stop of the pod templates."""

from kubesim.kueue import jobs, podset_info
from kubesim.kueue.jobs import RAYCLUSTER, RAYJOB


def rayjob(**spec) -> dict:
    base = {
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": {
            "headGroupSpec": {
                "template": {
                    "spec": {"containers": [{"name": "head", "resources": {"requests": {"cpu": "1"}}}]}
                }
            },
            "workerGroupSpecs": [
                {
                    "groupName": "GPU-Workers",
                    "replicas": 2,
                    "numOfHosts": 2,
                    "template": {
                        "metadata": {"labels": {"team": "a"}},
                        "spec": {
                            "containers": [
                                {"name": "w", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}
                            ]
                        },
                    },
                }
            ],
        },
    }
    base.update(spec)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": "train-42",
            "namespace": "ml",
            "uid": "6f1c2d3e-4b5a-4c7d-9e8f-0a1b2c3d4e5f",
            "labels": {jobs.QUEUE_LABEL: "user-queue"},
        },
        "spec": base,
    }


def test_workload_name_matches_upstream_hash():
    assert jobs.workload_name_for(RAYJOB, rayjob()) == "rayjob-train-42-123ec"


def test_workload_name_prefix_is_truncated_to_fit_253_chars():
    name = jobs.workload_name("RayJob", "ray.io", "x" * 300, "uid")
    assert len(name) == 253 and name.startswith("rayjob-xxx")


def test_pod_sets_head_workers_and_default_submitter():
    pod_sets = jobs.build_pod_sets(RAYJOB, rayjob())
    assert [(ps["name"], ps["count"]) for ps in pod_sets] == [
        ("head", 1),
        ("gpu-workers", 4),
        ("submitter", 1),
    ]
    submitter = pod_sets[2]["template"]["spec"]["containers"][0]
    assert submitter["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}


def test_the_default_submitter_runs_the_head_image_in_the_pod_set_and_the_template_kueue_writes():
    """``getSubmitterTemplate`` (Kueue) and ``GetDefaultSubmitterContainer`` (KubeRay): the head's image, so
    a submitter never needs an image the cluster's own pods do not use."""
    job = rayjob()
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = "ray:2.52"
    [*_, submitter] = jobs.build_pod_sets(RAYJOB, job)
    assert submitter["template"]["spec"]["containers"][0]["image"] == "ray:2.52"
    wl = jobs.build_workload(RAYJOB, job, priority=0, priority_class=None)
    wl["status"] = {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": ps["name"], "flavors": {}, "count": ps["count"]} for ps in wl["spec"]["podSets"]
            ],
        }
    }
    started = podset_info.start_job(RAYJOB, job, podset_info.pod_set_infos(wl, {}, "user-queue"))
    assert started["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["image"] == "ray:2.52"
    # A head without an image (refused later, when its pod is created) gives a container without one.
    del job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert "image" not in jobs.build_pod_sets(RAYJOB, job)[-1]["template"]["spec"]["containers"][0]


def test_worker_group_without_replicas_counts_zero_as_the_crd_defaults_it():
    job = rayjob()
    del job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"]
    assert jobs.build_pod_sets(RAYJOB, job)[1]["count"] == 0


def test_http_mode_has_no_submitter_pod_set():
    names = [ps["name"] for ps in jobs.build_pod_sets(RAYJOB, rayjob(submissionMode="HTTPMode"))]
    assert names == ["head", "gpu-workers"]


def test_limits_stand_in_for_missing_requests():
    workers = jobs.build_pod_sets(RAYJOB, rayjob())[1]
    assert jobs.pod_requests(workers["template"]["spec"]) == {"cpu": 2000, "nvidia.com/gpu": 1}


def test_workload_is_owned_labelled_and_queued():
    wl = jobs.build_workload(RAYJOB, rayjob(), priority=1000, priority_class="prod")
    assert wl["metadata"]["labels"] == {jobs.JOB_UID_LABEL: "6f1c2d3e-4b5a-4c7d-9e8f-0a1b2c3d4e5f"}
    owner = wl["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["controller"], owner["blockOwnerDeletion"]) == ("RayJob", True, True)
    assert wl["spec"]["queueName"] == "user-queue"
    assert wl["spec"]["priority"] == 1000
    assert wl["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "prod",
    }


def test_start_injects_flavor_and_stop_restores_the_templates():
    job = rayjob()
    wl = jobs.build_workload(RAYJOB, job, priority=0, priority_class=None)
    wl["status"] = {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": name, "flavors": {"cpu": "gpu"}, "count": 1}
                for name in ("head", "gpu-workers", "submitter")
            ],
        }
    }
    flavors = {
        "gpu": {
            "spec": {
                "nodeLabels": {"accelerator": "nvidia"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            }
        }
    }
    started = podset_info.start_job(RAYJOB, job, podset_info.pod_set_infos(wl, flavors, "user-queue"))
    assert started["spec"]["suspend"] is False
    worker = started["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    assert worker["spec"]["nodeSelector"] == {"accelerator": "nvidia"}
    assert worker["metadata"]["labels"][jobs.PODSET_LABEL] == "gpu-workers"
    assert worker["metadata"]["labels"]["team"] == "a"
    submitter = started["spec"]["submitterPodTemplate"]
    assert submitter["metadata"]["labels"][jobs.PODSET_LABEL] == "submitter"

    stopped = podset_info.stop_job(RAYJOB, started, wl["spec"]["podSets"])
    assert stopped["spec"]["suspend"] is True
    worker = stopped["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    assert worker["metadata"]["labels"] == {"team": "a"}
    assert "nodeSelector" not in worker["spec"] and "tolerations" not in worker["spec"]
    head = stopped["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert "labels" not in head.get("metadata", {})


def test_active_and_finished_follow_kuberay_states():
    job = rayjob()
    for state, active in (("", False), ("Suspended", False), ("Initializing", True), ("Suspending", True)):
        job["status"] = {"jobDeploymentStatus": state}
        assert jobs.is_active(RAYJOB, job) is active
    job["status"] = {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED", "message": "stopped"}
    assert jobs.finished(RAYJOB, job) == (True, "Failed", "stopped")
    job["status"] = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "ok"}
    assert jobs.finished(RAYJOB, job) == (True, "Succeeded", "ok")
    job["status"] = {"jobDeploymentStatus": "ValidationFailed"}
    assert jobs.is_on_hold(RAYJOB, job)


def test_cluster_selector_only_and_owned_clusters_are_not_managed():
    assert not jobs.is_managed(RAYJOB, rayjob(rayClusterSpec=None, clusterSelector={"ray.io/cluster": "c"}))
    cluster = {
        "metadata": {
            "labels": {jobs.QUEUE_LABEL: "q"},
            "ownerReferences": [{"kind": "RayJob", "controller": True, "name": "j", "uid": "u"}],
        },
        "spec": {},
    }
    assert not jobs.is_managed(RAYCLUSTER, cluster)
    cluster["metadata"]["ownerReferences"] = []
    assert jobs.is_managed(RAYCLUSTER, cluster)
