"""Every list the plugin makes reads in pages: against kubesim answering at most 2 items per page (an API
server may return fewer than ``limit``), the janitor's and hooks' lists and the list+watch loop behind the
triggerer's hub and the UI cache see every object, one request per page."""

from __future__ import annotations

import asyncio

import pytest
from kueue_ray.hook import RayJobHook
from kueue_ray.ui.cache import ClusterCache

from tests.integration.kueue_ray.test_janitor import AirflowStates, janitor, submit
from tests.integration.kueue_ray.test_ui_cache import QUICK, until

PAGE = 2
JOBS = 5


@pytest.fixture
def five_rayjobs(kubesim, queues, rayjob_body, task_context):
    """Five RayJobs of this integration (one runs, four queue), then kubesim's page cap set to 2."""
    jobs = [
        submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id=f"r{i}"), "submit")
        for i in range(JOBS)
    ]
    kubesim.set_faults(max_page_size=PAGE)
    kubesim.clear_requests()
    yield jobs
    kubesim.reset_faults()


def lists_of(kubesim, queues, resource: str) -> list[dict]:
    return [
        r
        for r in kubesim.requests()
        if r["verb"] == "list" and r["resource"] == resource and r["namespace"] == queues.namespace
    ]


def test_the_janitor_and_the_hooks_follow_continue(kubesim, queues, five_rayjobs):
    assert len(RayJobHook().list_managed_rayjobs(queues.namespace)) == JOBS
    assert len(lists_of(kubesim, queues, "rayjobs")) == 3, "pages of 2, 2 and 1"

    kubesim.clear_requests()
    states = AirflowStates({f"r{i}": {"submit": "running"} for i in range(JOBS)})
    assert janitor(queues, states) == []
    assert sorted(states.asked) == [f"r{i}" for i in range(JOBS)], "every RayJob judged"
    # this deployment's RayJobs in pages of 2, 2 and 1, then the (empty) list of legacy ones
    assert len(lists_of(kubesim, queues, "rayjobs")) == 4


def test_the_list_watch_loop_follows_continue(kubesim, queues, five_rayjobs, connection):
    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], QUICK)
        await cache.start()
        try:
            await until(
                lambda: len(cache.snapshot().rayjobs) == JOBS and len(cache.snapshot().workloads) == JOBS,
                what="every RayJob and Workload in the cache",
            )
        finally:
            await cache.stop()

    asyncio.run(scenario())
    assert len(lists_of(kubesim, queues, "rayjobs")) >= 3
    assert len(lists_of(kubesim, queues, "workloads")) >= 3
