"""What a MultiKueue manager's Workload says about the worker cluster that runs a RayJob, in Kueue v0.19.2's
words (``pkg/controller/admissionchecks/multikueue/workload.go``)."""

from __future__ import annotations

import doctest

from kueue_ray import multikueue
from kueue_ray.multikueue import managed_by_multikueue, multikueue_check, worker_cluster


def test_the_module_examples_hold():
    assert doctest.testmod(multikueue).failed == 0


def check(state: str, message: str = "", name: str = "multikueue") -> dict:
    return {"name": name, "state": state, "message": message}


def test_the_worker_is_the_workloads_cluster_name_first():
    """``status.clusterName`` is immutable once set; the check's message may be a step behind it."""
    wl = {"status": {"clusterName": "gpu-east", "admissionChecks": [check("Pending")]}}
    assert worker_cluster(wl) == "gpu-east"


def test_a_ready_checks_message_names_the_worker_when_cluster_name_is_not_there_yet():
    wl = {"status": {"admissionChecks": [check("Ready", 'The workload was admitted on "gpu-west"')]}}
    assert worker_cluster(wl) == "gpu-west"


def test_no_worker_before_dispatch_after_a_retry_or_without_multikueue():
    assert worker_cluster({"status": {"admissionChecks": [check("Pending")]}}) is None
    # Kueue resets the check and clears clusterName when it evicts for a re-dispatch; a Retry's message
    # still quotes the old words with ``Previously``, which do not name a worker that runs the job.
    retry = check("Retry", 'Admitting remote lost, Previously: "Ready"')
    assert worker_cluster({"status": {"admissionChecks": [retry]}}) is None
    assert worker_cluster({"status": {}}) is None
    assert worker_cluster({}) is None


def test_multikueues_check_is_told_apart_by_its_words_or_as_the_only_check_of_a_managed_rayjob():
    provisioning = check("Pending", "Waiting for nodes", name="gpu-nodes")
    mk = check("Ready", 'The workload was admitted on "w1"')
    assert multikueue_check([provisioning, mk], managed=True) == mk
    assert multikueue_check([check("Pending")], managed=True) == check("Pending")
    assert multikueue_check([provisioning, check("Pending")], managed=True) is None
    assert multikueue_check([provisioning], managed=False) is None


def test_a_manager_rayjob_is_managed_by_multikueue_and_its_worker_copy_is_not():
    assert managed_by_multikueue({"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}})
    assert not managed_by_multikueue({"spec": {"managedBy": "ray.io/kuberay-operator"}})
    assert not managed_by_multikueue(None)


def test_a_followed_log_keeps_its_last_lines_across_chunks_and_restarts_with_a_new_stream():
    from kueue_ray import worker_log
    from kueue_ray.worker_log import LogBuffer, with_worker_tail

    assert doctest.testmod(worker_log).failed == 0
    buffer = LogBuffer(2)
    assert buffer.text() is None
    for chunk in (b"Job 'x' submitted successfully\n", b"step 1\nst", "ep 2 é\n".encode()):
        buffer.feed(chunk)
    assert buffer.text() == "step 1\nstep 2 é\n"
    buffer.restart()  # the stream was opened again from the log's beginning
    buffer.feed(b"Job 'x' submitted successfully\n")
    assert buffer.text() == "Job 'x' submitted successfully\n"
    # A character whose bytes the stream delivered in two chunks reads as itself, not as two U+FFFD.
    accuracy = "accuracy ≥ 0.9 ✓\n".encode()
    cut = accuracy.index("≥".encode()) + 1
    buffer.feed(accuracy[:cut])
    buffer.feed(accuracy[cut:])
    assert buffer.text() == "Job 'x' submitted successfully\naccuracy ≥ 0.9 ✓\n"
    buffer.restart()  # a cut character is not carried into the new stream
    buffer.feed("✓".encode()[:2])
    buffer.restart()
    buffer.feed(b"fresh\n")
    assert buffer.text() == "fresh\n"
    assert with_worker_tail({"status": "success"}, "tail")["driver_log_tail"] == "tail"
    assert with_worker_tail({"status": "success"}, None) == {"status": "success"}


def test_the_last_lines_of_a_followed_log():
    from kueue_ray.multikueue import last_lines

    assert last_lines("a\nb\nc\n", 2) == "b\nc\n"
    assert last_lines("a\nb", 5) == "a\nb"
    assert last_lines(None, 5) is None


def test_the_dashboard_link_of_a_rayjob_on_a_worker_is_rendered_from_the_workers_connection(monkeypatch):
    import json
    from types import SimpleNamespace

    from kueue_ray.links import PORT_FORWARD_URL, dashboard_template, dashboard_url

    operator = SimpleNamespace(
        ray_dashboard_url_template="https://manager.example/{name}", kubernetes_conn_id="k"
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUEUE_WORKER_GPU_EAST",
        json.dumps(
            {
                "conn_type": "kubernetes",
                "extra": {"ray_dashboard_url_template": "https://{worker_cluster}/{name}"},
            }
        ),
    )
    fields = {"name": "train", "namespace": "ml", "worker_cluster": "gpu-east"}
    assert dashboard_url(dashboard_template(operator, "gpu-east"), fields) == "https://gpu-east/train"
    # a worker without a connection (or without a template in it): the port-forward link, not the manager's
    assert dashboard_url(dashboard_template(operator, "gpu-west"), fields) == PORT_FORWARD_URL
    assert dashboard_template(operator) == "https://manager.example/{name}"
