"""A refusal that does not go away ends the waits after ``refusal_timeout``, one that goes away within it
costs nothing, and a cluster that stops serving Kueue's API ends them at once, through the triggerer's
shared watch hub against kubesim (403 rules and ``unserved_groups``: what a deleted RoleBinding and an
uninstalled Kueue answer). Nothing of the clients is patched.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kueue_ray.hub import HUB, HubSettings

from tests.integration.kueue_ray.test_hub import first_event, namespace_requests, submit_many

WINDOW = 3.0
WAITED_FOR = ["rayjobs.ray.io", "workloads.kueue.x-k8s.io"]


@pytest.fixture(autouse=True)
def hub_settings(monkeypatch):
    """Production backs off up to 30 s; the same logic runs here with short delays and a 3 s window."""
    settings = HubSettings(
        backoff_initial=0.05,
        backoff_max=2.0,
        first_list_budget_seconds=2,
        degraded_list_interval=0.5,
        refusal_timeout=WINDOW,
    )
    monkeypatch.setattr(HUB, "settings", settings)
    return settings


@pytest.fixture
def faults(kubesim):
    kubesim.reset_faults()
    yield kubesim
    kubesim.reset_faults()


def revoke(faults, queues) -> None:
    faults.set_faults(
        rules=[
            {
                "code": 403,
                "verbs": ["get", "list", "watch"],
                "resources": WAITED_FOR,
                "namespace": queues.namespace,
            }
        ],
        drop_watches=True,
    )


def test_a_refusal_that_lasts_the_window_ends_every_wait_naming_what_was_refused(
    faults, queues, rayjob_body, task_context
):
    triggers = submit_many(queues, rayjob_body, task_context, count=3, duration="600")

    async def scenario():
        waiting = asyncio.gather(*(first_event(t) for t in triggers))
        await asyncio.sleep(1.5)  # every trigger follows its RayJob through the hub
        faults.clear_requests()
        revoke(faults, queues)
        started = time.monotonic()
        events = await waiting
        return events, time.monotonic() - started

    events, took = asyncio.run(scenario())

    assert [e["status"] for e in events] == ["refused"] * 3
    assert WINDOW - 0.5 <= took <= WINDOW + 3, took
    message = events[0]["message"]
    assert f"in namespace {queues.namespace}" in message and f"for {WINDOW:g}s in a row" in message
    assert any(f"refused to {verb} {r}" in message for verb in ("list", "watch", "get") for r in WAITED_FOR)
    assert "kubectl auth can-i " in message and f"-n {queues.namespace}" in message
    refused = [r for r in namespace_requests(faults, queues) if r["code"] == 403]
    # Per resource, paced by the backoff (and one request at the window's end), not per waiting task.
    assert len(refused) <= 20, len(refused)


def test_a_refusal_that_clears_within_the_window_costs_nothing(faults, queues, rayjob_body, task_context):
    triggers = submit_many(queues, rayjob_body, task_context, count=2, duration="20")

    async def scenario():
        waiting = asyncio.gather(*(first_event(t) for t in triggers))
        await asyncio.sleep(1.0)
        revoke(faults, queues)
        await asyncio.sleep(WINDOW * 0.6)
        faults.reset_faults()
        return await waiting

    events = asyncio.run(scenario())

    assert [e["status"] for e in events] == ["success"] * 2
    assert any(r["code"] == 403 for r in faults.requests()), "the refusal was never met: nothing was shown"


def test_kueue_uninstalled_under_a_waiting_task_ends_it_saying_so(faults, queues, rayjob_body, task_context):
    [trigger] = submit_many(queues, rayjob_body, task_context, count=1, duration="600")

    async def scenario():
        waiting = asyncio.ensure_future(first_event(trigger))
        await asyncio.sleep(1.0)
        faults.set_faults(unserved_groups=["kueue.x-k8s.io"], drop_watches=True)
        started = time.monotonic()
        event = await waiting
        return event, time.monotonic() - started

    event, took = asyncio.run(scenario())

    assert event["status"] == "api_not_served"
    assert event["message"] == (
        "Kueue API kueue.x-k8s.io/v1beta2 is not served by this cluster: install Kueue ≥ v0.19"
    )
    assert took < 5, took


def worker_op(queues, rayjob_body, **kwargs):
    from kueue_ray.operators import SubmitRayJobOperator

    return SubmitRayJobOperator(
        task_id="train",
        template=rayjob_body(duration="600", cpu="50m", memory="100M", gpu="0"),
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        log_tail_lines=0,
        **kwargs,
    )


def test_a_wait_in_a_worker_slot_ends_after_the_window_too(
    faults, queues, rayjob_body, task_context, monkeypatch
):
    from airflow.sdk.exceptions import AirflowException

    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT", str(WINDOW))
    op = worker_op(queues, rayjob_body, deferrable=False, poll_interval=0.2)
    context = task_context("train")
    timer = threading.Timer(2.0, revoke, (faults, queues))
    timer.start()
    try:
        with pytest.raises(AirflowException) as failed:
            op.execute(context)
    finally:
        timer.cancel()
        faults.reset_faults()

    message = str(failed.value)
    assert "(refused, Refused)" in message and f"for {WINDOW:g}s in a row" in message
    assert f"refused to get rayjobs.ray.io in namespace {queues.namespace}" in message
    assert f"kubectl auth can-i get rayjobs.ray.io -n {queues.namespace}" in message


def test_the_preflight_names_a_refused_read_and_a_missing_kueue_and_creates_nothing(
    faults, queues, rayjob_body, task_context
):
    from kueue_ray.errors import ClusterAccessError

    faults.refuse(403, verbs=["get"], resources=["localqueues.kueue.x-k8s.io"], namespace=queues.namespace)
    faults.clear_requests()
    with pytest.raises(ClusterAccessError) as refused:
        worker_op(queues, rayjob_body).execute(task_context("train"))
    faults.set_faults(rules=[], unserved_groups=["kueue.x-k8s.io"])
    started = time.monotonic()
    with pytest.raises(ClusterAccessError) as missing:
        worker_op(queues, rayjob_body).execute(task_context("train"))
    took = time.monotonic() - started

    assert str(refused.value) == (
        f"The API server refused to get localqueues.kueue.x-k8s.io in namespace {queues.namespace} to "
        "the connection's user (connection kubernetes_default) (403 Forbidden: localqueues.kueue.x-k8s.io "
        f'"{queues.local_queue}" is forbidden: User "system:serviceaccount:ray:airflow" cannot get resource '
        f'"localqueues" in API group "kueue.x-k8s.io" in the namespace "{queues.namespace}"). Check: kubectl '
        f"auth can-i get localqueues.kueue.x-k8s.io -n {queues.namespace}. Fix: grant it "
        "(include/manifests/rbac/rbac.yaml)."
    )
    assert str(missing.value) == (
        "Kueue API kueue.x-k8s.io/v1beta2 is not served by this cluster: install Kueue ≥ v0.19"
    )
    assert took < 5
    assert not [r for r in faults.requests() if r["verb"] == "create"], "nothing was created"


def test_a_rayservice_wait_ends_after_the_window_too(faults, queues):
    from tests.integration.kueue_ray.serve_support import defer, deploy_op, run_context, service_body
    from tests.integration.kueue_ray.serve_support import first_event as service_event

    trigger = defer(deploy_op(queues, service_body()), run_context("manual__1"))
    faults.set_faults(
        rules=[
            {
                "code": 403,
                "verbs": ["get", "list", "watch"],
                "resources": ["rayservices.ray.io", "workloads.kueue.x-k8s.io"],
                "namespace": queues.namespace,
            }
        ]
    )
    started = time.monotonic()

    event = asyncio.run(service_event(trigger))

    assert event["status"] == "refused", event
    assert time.monotonic() - started <= WINDOW + 5
    assert f"in namespace {queues.namespace} " in event["message"]
    assert "rayservices.ray.io" in event["message"] or "workloads.kueue.x-k8s.io" in event["message"]
