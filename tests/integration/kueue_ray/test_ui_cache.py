"""The Kueue UI's cluster cache against kubesim: one set of watches however many pages read it, shared
visibility reads, a live timeline per RayJob, a deploy task's RayService followed live, and the last known
state kept while the API is down."""

from __future__ import annotations

import asyncio
import time

import pytest
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.serving import RAYSERVICE_XCOM_KEY
from kueue_ray.ui.access import Access
from kueue_ray.ui.cache import CacheSettings, ClusterCache
from kueue_ray.ui.views import Links, TaskRef, queues_view, service_cluster_queue, task_view

from tests.integration.kueue_ray.serve_support import (
    defer,
    deploy_op,
    run_context,
    service_body,
    wait_admitted,
)
from tests.integration.kueue_ray.test_hub import quota_reserved

QUICK = CacheSettings(backoff_initial=0.05, backoff_max=0.3, visibility_min_interval=0.2)


def submit(queues, rayjob_body, task_context, name: str, duration: str, priority: str | None = None) -> dict:
    return SubmitRayJobOperator(
        task_id=name,
        template=rayjob_body(duration=duration),
        local_queue=queues.local_queue,
        priority=priority or queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
    ).execute(task_context(name))


async def until(predicate, timeout: float = 60.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.05)
    return value


def in_namespace(kubesim, queues, since: int = 0) -> list[dict]:
    return [r for r in kubesim.requests()[since:] if r["namespace"] == queues.namespace]


def test_pages_read_the_cache_not_the_cluster(kubesim, queues, rayjob_body, task_context, connection):
    blocker = submit(queues, rayjob_body, task_context, "blocker", "inf")
    queued = [submit(queues, rayjob_body, task_context, f"queued-{i}", "inf") for i in range(3)]

    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], QUICK)
        await cache.start()
        try:
            await until(lambda: cache.health().reachable, what="listed")
            # Kueue says why the queue's head waits; the others, of the same shape, are parked with it
            # unevaluated (scheduling equivalence) until an event requeues them, so they may carry no
            # QuotaReserved condition yet.
            await until(
                lambda: (
                    len(cache.snapshot().workloads) == 4
                    and sorted({quota_reserved(w) for w in cache.snapshot().workloads} - {None})
                    == ["False", "True"]
                ),
                what="four Workloads: the blocker's quota reserved, the head of the queue told why it waits",
            )
            kubesim.clear_requests()
            # Twenty tabs refreshing together: snapshots and the ClusterQueue's pending list.
            reads = await asyncio.gather(*(cache.pending(queues.cluster_queue) for _ in range(20)))
            snapshots = [cache.snapshot() for _ in range(20)]
            return reads, snapshots, kubesim.requests()
        finally:
            await cache.stop()

    reads, snapshots, requests = asyncio.run(scenario())
    names = [item["metadata"]["name"] for item in reads[0].summary["items"]]
    assert len(names) == 3 and all(read.summary is reads[0].summary for read in reads)
    assert {r["metadata"]["name"] for r in snapshots[0].rayjobs} == {
        blocker["name"],
        *(q["name"] for q in queued),
    }
    # One visibility read for twenty readers, and no other request at all.
    assert [(r["verb"], r["resource"], r["subresource"]) for r in requests] == [
        ("get", "clusterqueues", "pendingworkloads")
    ]


def test_the_pending_list_is_kueues_and_follows_a_withdrawal(queues, rayjob_body, task_context, connection):
    """The queues page's list comes from Kueue's visibility API (on the real stack, Kueue's own aggregated
    server): the RayJobs queued behind the one holding the quota, then one fewer when one is deleted."""
    submit(queues, rayjob_body, task_context, "blocker", "inf")
    queued = [submit(queues, rayjob_body, task_context, f"queued-{i}", "inf") for i in range(2)]

    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], QUICK)
        await cache.start()
        try:
            await until(lambda: cache.health().reachable, what="listed")

            async def owners() -> list[tuple[int, str]]:
                read = await cache.pending(queues.cluster_queue)
                return [
                    (item["positionInClusterQueue"], item["metadata"]["ownerReferences"][0]["name"])
                    for item in (read.summary or {}).get("items") or ()
                ]

            async def settled(expected: int) -> list[tuple[int, str]]:
                deadline = time.monotonic() + 60
                while len(listed := await owners()) != expected:
                    assert time.monotonic() < deadline, f"pending list {listed}, not {expected} long"
                    await asyncio.sleep(0.1)
                return listed

            both = await settled(2)
            queues.custom.delete_namespaced_custom_object(
                "ray.io", "v1", queues.namespace, "rayjobs", queued[0]["name"]
            )
            return both, await settled(1)
        finally:
            await cache.stop()

    both, one = asyncio.run(scenario())
    assert sorted(name for _, name in both) == sorted(q["name"] for q in queued)
    assert [position for position, _ in both] == [0, 1]
    assert one == [(0, queued[1]["name"])]


def test_a_queue_that_changes_between_two_visibility_reads_is_said_to_be_behind(
    queues, rayjob_body, task_context, connection
):
    """The visibility API is read at most every ``visibility_min_interval``. A Workload arriving inside it
    leaves the queue's last list standing, and the cache says the queue is behind it (the pages then ask
    again instead of being told "unchanged"); the next read after the interval has the newcomer."""
    interval = 8.0
    submit(queues, rayjob_body, task_context, "blocker", "inf")
    settings = CacheSettings(backoff_initial=0.05, backoff_max=0.3, visibility_min_interval=interval)

    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], settings)
        await cache.start()
        try:
            await until(lambda: cache.health().reachable, what="listed")
            read_at = time.monotonic()
            first = await cache.pending(queues.cluster_queue)  # the first read is never held back
            newcomer = await asyncio.to_thread(submit, queues, rayjob_body, task_context, "newcomer", "inf")
            await until(lambda: cache.pending_behind(queues.cluster_queue), what="the queue behind its list")
            held = await cache.pending(queues.cluster_queue)
            held_back = time.monotonic() - read_at < interval
            deadline = time.monotonic() + 60
            while not any(
                newcomer["name"] in str(item["metadata"].get("ownerReferences"))
                for item in ((await cache.pending(queues.cluster_queue)).summary or {}).get("items") or ()
            ):
                assert time.monotonic() < deadline, "the newcomer never listed as pending"
                await asyncio.sleep(0.1)
            return first, held, held_back, time.monotonic() - read_at
        finally:
            await cache.stop()

    first, held, held_back, listed_after = asyncio.run(scenario())
    assert held_back, "the machine took longer than the interval to see the newcomer's Workload"
    assert held is first  # no read inside the interval
    assert listed_after >= interval


def test_positions_and_the_timeline_follow_the_cluster_live(
    kubesim, queues, rayjob_body, task_context, connection
):
    # The first runs 30 simulated seconds (1.5 s here): long enough that the cache, started after both
    # submissions, still sees the second one pending behind it on a loaded machine. The second runs 20: a
    # real KubeRay reads a running job's status every few seconds, and a job that ends between two reads is
    # never seen RUNNING.
    first = submit(queues, rayjob_body, task_context, "first", "30")
    second = submit(queues, rayjob_body, task_context, "second", "20")

    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], QUICK)
        await cache.start()
        try:
            await until(lambda: cache.health().reachable, what="listed")

            async def pending_names() -> list[str]:
                read = await cache.pending(queues.cluster_queue)
                return [i["metadata"]["name"] for i in (read.summary or {}).get("items") or ()]

            seen_pending = []
            version = None  # read once as listed, then after every change
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if version is not None:
                    await until(lambda v=version: cache.version != v, timeout=30, what="a change")
                version = cache.version
                names = await pending_names()
                if not seen_pending or seen_pending[-1] != names:
                    seen_pending.append(names)
                timeline = cache.timeline(second["uid"])
                if timeline and timeline.final_phase:
                    return seen_pending, cache.timeline(first["uid"]).to_dict(), timeline.to_dict()
            raise AssertionError(f"second RayJob did not finish; pending seen {seen_pending}")
        finally:
            await cache.stop()

    seen_pending, first_timeline, second_timeline = asyncio.run(scenario())
    # The second Workload waited in position 1 while the first ran, then left the pending list.
    # The cache may change before Kueue has made or admitted the Workloads: look for the one-item
    # list rather than at the first list seen.
    assert [f"rayjob-{second['name']}"] in [[n.rsplit("-", 1)[0] for n in names] for names in seen_pending], (
        seen_pending
    )
    assert seen_pending[-1] == []
    for timeline in (first_timeline, second_timeline):
        phases = [t["phase"] for t in timeline["transitions"]]
        assert phases[-1] == "SUCCEEDED", phases
        assert "RUNNING" in phases
    # Seen from its first phase: QUEUED, or SUBMITTED when the cache listed it before Kueue made its Workload.
    second_phases = [t["phase"] for t in second_timeline["transitions"]]
    assert second_phases[0] in ("SUBMITTED", "QUEUED") and "QUEUED" in second_phases, second_phases
    assert second_phases.index("QUEUED") < second_phases.index("RUNNING"), second_phases


def test_the_cache_knows_whom_a_rayjob_preempted_and_the_queues_page_attributes_both(
    queues, rayjob_body, task_context, connection
):
    victim = submit(queues, rayjob_body, task_context, "victim", "inf")
    reader = Access(user_name="ops", dag_ids=frozenset({"ml_pipeline"}))

    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], QUICK)
        await cache.start()
        try:
            await until(
                lambda: any(quota_reserved(w) for w in cache.snapshot().workloads), what="the victim admitted"
            )
            prod = submit(queues, rayjob_body, task_context, "prod", "inf", priority=queues.high)
            await until(lambda: cache.snapshot().preempted_by.get(prod["uid"]), what="the preemption seen")

            async def view() -> dict:
                read = await cache.pending(queues.cluster_queue)
                return queues_view(cache.snapshot(), {queues.cluster_queue: read}, reader, Links())

            async def victim_pending() -> dict | None:
                shown = await view()
                [queue] = [q for q in shown["cluster_queues"] if q["name"] == queues.cluster_queue]
                pending = [row["owner"].get("task_id") for row in queue["pending"]["items"]]
                admitted = [row["owner"].get("task_id") for row in queue["admitted"]["items"]]
                # Real Kueue requeues the victim before it admits prod (once the victim's quota is free).
                return shown if (pending, admitted) == (["victim"], ["prod"]) else None

            deadline = time.monotonic() + 60
            while not (shown := await victim_pending()):
                assert time.monotonic() < deadline, "the preempted RayJob not shown pending again behind prod"
                await asyncio.sleep(0.2)
            return prod, cache.snapshot(), shown
        finally:
            await cache.stop()

    prod, snapshot, view = asyncio.run(scenario())
    [preemption] = snapshot.preempted_by[prod["uid"]]
    assert preemption["job_uid"] == victim["uid"] and "Preempted to accommodate" in preemption["message"]
    [queue] = [q for q in view["cluster_queues"] if q["name"] == queues.cluster_queue]
    # The page's rows: prod admitted, the victim pending again in position 1, both with their requests.
    assert [row["owner"]["task_id"] for row in queue["admitted"]["items"]] == ["prod"]
    [pending] = queue["pending"]["items"]
    assert (pending["owner"]["task_id"], pending["position"]) == ("victim", 1)
    rows = queue["admitted"]["items"] + queue["pending"]["items"]
    assert all(row["requests"] for row in rows), rows


def test_a_deploy_tasks_tab_follows_its_rayservice_from_queued_to_serving(
    queues, rayjob_body, task_context, connection
):
    blocker = submit(queues, rayjob_body, task_context, "blocker", "inf")
    wait_admitted(queues, blocker)
    context = run_context("manual__ui")
    defer(deploy_op(queues, service_body(cpu="2")), context)
    xcom = context["ti"].xcom[RAYSERVICE_XCOM_KEY]
    ref = TaskRef("serving_pipeline", "manual__ui", "serve")
    reader = Access(user_name="ops", dag_ids=frozenset({"serving_pipeline"}))

    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], QUICK)
        await cache.start()

        async def tab() -> dict:
            snapshot = cache.snapshot()
            cluster_queue = service_cluster_queue(snapshot, xcom)
            pending = await cache.pending(cluster_queue) if cluster_queue else None
            return task_view(
                ref,
                rayjob_xcom=None,
                timeline_xcom=None,
                dashboard_link=None,
                snapshot=snapshot,
                live_timeline=None,
                pending=pending,
                access=reader,
                links=Links(),
                rayservice_xcom=xcom,
            )

        try:
            await until(lambda: cache.health().reachable, what="listed")
            seen, released = [], False
            version = -1
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                await until(lambda v=version: cache.version != v, timeout=30, what="a change")
                version = cache.version
                view = await tab()
                seen.append(view)
                if view["phase"]["phase"] == "QUEUED" and view["position"] and not released:
                    queues.custom.delete_namespaced_custom_object(
                        "ray.io", "v1", queues.namespace, "rayjobs", blocker["name"]
                    )
                    released = True
                if view["phase"]["phase"] == "SERVING":
                    return seen
            raise AssertionError(f"not serving; phases seen {[v['phase']['phase'] for v in seen]}")
        finally:
            await cache.stop()

    seen = asyncio.run(scenario())
    phases = [view["phase"]["phase"] for view in seen]
    queued = next(view for view in seen if view["position"])
    assert queued["phase"]["phase"] == "QUEUED" and "insufficient unused quota" in queued["phase"]["message"]
    assert queued["position"]["in_cluster_queue"] == 1 and queued["position"]["pending_in_cluster_queue"] == 1
    shown = queued["rayservice"]
    assert shown["name"] == xcom["name"] and shown["exists"] and shown["admitted_by"] == "service"
    assert shown["workload"] and (shown["local_queue"], shown["cluster_queue"]) == (
        queues.local_queue,
        queues.cluster_queue,
    )
    assert shown["priority"]["class"] == queues.low
    after_queued = phases[phases.index("QUEUED") :]
    assert {"ADMITTED", "DEPLOYING"} & set(after_queued), phases
    serving = seen[-1]["rayservice"]
    assert serving["active_cluster"] and serving["pending_cluster"] is None
    assert serving["applications"] == {"forecast": "RUNNING"}
    assert seen[-1]["position"] is None


def test_an_unreachable_api_keeps_the_last_state_and_says_since_when(
    kubesim, queues, rayjob_body, task_context, connection
):
    job = submit(queues, rayjob_body, task_context, "kept", "inf")

    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], QUICK)
        await cache.start()
        try:
            await until(lambda: cache.health().reachable, what="listed")
            await until(lambda: cache.snapshot().rayjobs, what="the RayJob cached")
            before = await cache.pending(queues.cluster_queue)
            # Every request now fails; the watches already open stay open (as a dead network would
            # leave them). The next visibility read, due at the latest after visibility_max_age while
            # anyone looks, is what notices.
            kubesim.set_faults(error_rate=1.0)
            try:
                cache._visibility[queues.cluster_queue].monotonic_at = float("-inf")  # that moment, now
                during = await cache.pending(queues.cluster_queue)
                down = cache.health()
                kept = cache.snapshot()
            finally:
                kubesim.reset_faults()
            cache._visibility[queues.cluster_queue].monotonic_at = float("-inf")
            await cache.pending(queues.cluster_queue)
            back = await until(
                lambda: (h := cache.health()).reachable and h, timeout=30, what="reachable again"
            )
            return before, down, during, kept, back
        finally:
            await cache.stop()

    before, down, during, kept, back = asyncio.run(scenario())
    assert down.failing_since is not None and down.error
    assert down.synced_at is not None and down.synced_at <= down.failing_since + 1
    assert [r["metadata"]["name"] for r in kept.rayjobs] == [job["name"]]
    assert during.error and during.summary == before.summary and during.fetched_at == before.fetched_at
    assert back.failing_since is None


def test_a_role_without_watch_makes_the_cache_list_every_interval_and_pages_still_follow(
    kubesim, queues, rayjob_body, task_context, connection
):
    """The api-server's Role grants list but not watch on RayJobs and Workloads: the cache lists them every
    interval (trying the watch again now and then) instead of asking to watch again at once, and a RayJob
    submitted meanwhile still reaches the pages."""
    interval, retry_every = 0.5, 4
    settings = CacheSettings(
        backoff_initial=0.05,
        backoff_max=0.3,
        visibility_min_interval=0.2,
        degraded_list_interval=interval,
        degraded_watch_retry_every=retry_every,
    )
    kubesim.refuse(
        403,
        verbs=["watch"],
        resources=["rayjobs.ray.io", "workloads.kueue.x-k8s.io"],
        namespace=queues.namespace,
    )
    since = len(kubesim.requests())

    async def scenario():
        cache = ClusterCache(connection, [queues.namespace], settings)
        await cache.start()
        started = time.monotonic()
        try:
            await until(lambda: cache.health().reachable, what="listed")
            job = await asyncio.to_thread(submit, queues, rayjob_body, task_context, "polled", "inf")
            await until(
                lambda: [w for w in cache.snapshot().workloads if quota_reserved(w)],
                timeout=30,
                what="the new RayJob's admitted Workload, listed",
            )
            await asyncio.sleep(3)
            return job, cache.snapshot(), time.monotonic() - started
        finally:
            await cache.stop()

    job, snapshot, elapsed = asyncio.run(scenario())
    assert [r["metadata"]["name"] for r in snapshot.rayjobs] == [job["name"]]
    assert snapshot.health.reachable, snapshot.health
    mine = in_namespace(kubesim, queues, since)
    intervals = elapsed / interval
    for resource in ("rayjobs", "workloads"):
        watches = [r for r in mine if r["verb"] == "watch" and r["resource"] == resource]
        lists = [r for r in mine if r["verb"] == "list" and r["resource"] == resource]
        assert {r["code"] for r in watches} == {403}, resource
        # One watch to learn it is refused, then one request per interval, every 4th of them a watch.
        assert len(watches) <= 2 + intervals / retry_every, (resource, len(watches), elapsed)
        assert len(watches) + len(lists) <= 3 + intervals, (resource, len(watches) + len(lists), elapsed)


@pytest.fixture(autouse=True)
def _no_faults_left(kubesim):
    yield
    kubesim.reset_faults()
