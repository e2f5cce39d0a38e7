"""The hub's watch request: how long the client lets a stream live."""

import asyncio
from types import SimpleNamespace

from kueue_ray.hub import HubSettings
from kueue_ray.hub.resources import RAYJOBS
from kueue_ray.hub.scope import _WatchLoop
from kueue_ray.kube.watch_target import SERVER_TIMEOUT_GRACE_SECONDS


class EndedStream:
    """A watch response the server closed at once (no events)."""

    def __init__(self):
        self.status = 200
        self.content = SimpleNamespace(readline=self.readline)
        self.released = False

    async def readline(self):
        return b""

    def release(self):
        self.released = True


class RecordingApi:
    def __init__(self):
        self.calls = []
        self.stream = EndedStream()

    async def list_namespaced_custom_object(self, *args, **kwargs):
        self.calls.append(kwargs)
        return self.stream


def test_a_watch_outlives_the_providers_60_second_client_timeout():
    """The cncf ApiClient caps every request at 60 s unless the call says otherwise; a 300 s watch cut at
    60 s would be re-opened for nothing, several requests an hour per namespace and resource."""
    scope = SimpleNamespace(key=("kubernetes_default", "ray", ""), client=None)
    loop = _WatchLoop(SimpleNamespace(settings=HubSettings(), watch_refusals={}), scope, RAYJOBS)
    api = RecordingApi()

    assert asyncio.run(loop._watch(api, 300)) is False
    [call] = api.calls
    assert call["timeout_seconds"] == 300
    assert call["_request_timeout"] > 300 + SERVER_TIMEOUT_GRACE_SECONDS, (
        "ours ends the stream, not the client"
    )
    assert api.stream.released


def test_a_mailbox_wait_ends_with_none_when_its_timeout_passes_and_with_the_update_before():
    """A queued trigger waits for its next update with a timeout (its next position check): the wait ends
    quietly when nothing came, and leaves no timer behind when something did."""
    from kueue_ray.hub import NOTICE, Update
    from kueue_ray.hub.subscriptions import Mailbox

    async def scenario():
        mailbox = Mailbox()
        loop = asyncio.get_running_loop()
        timed_out = await mailbox.get(0.01)
        loop.call_later(0.01, mailbox.put_nowait, Update(NOTICE, None, "hello"))
        update = await mailbox.get(60.0)
        pending_timers = [h for h in loop._scheduled if not h.cancelled()]
        return timed_out, update, pending_timers

    timed_out, update, pending_timers = asyncio.run(scenario())
    assert timed_out is None
    assert update.message == "hello"
    assert pending_timers == [], "the 60 s timer was cancelled when the update came"


def workload(rv, *, admitted_to=None, cpu="2", finished=False):
    """A RayJob's Workload (key: the job UID label) at resourceVersion ``rv``."""
    status = {}
    if admitted_to:
        status["admission"] = {
            "clusterQueue": admitted_to,
            "podSetAssignments": [
                {"name": "head", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": cpu}}
            ],
        }
    if finished:
        status["conditions"] = [{"type": "Finished", "status": "True", "reason": "Succeeded"}]
    return {
        "metadata": {
            "name": "rayjob-train-1",
            "namespace": "ray",
            "uid": "wl-uid",
            "resourceVersion": str(rv),
            "labels": {"kueue.x-k8s.io/job-uid": "job-uid"},
        },
        "status": status,
    }


def test_the_hub_keeps_what_each_admitted_workload_holds_as_its_versions_arrive():
    """Who holds the quota a queued task needs is read from what the hub keeps per admitted Workload,
    updated once per version (not a pass over every Workload per task): admitted, resized, finished and
    deleted versions each change it, an older version changes nothing."""
    from kueue_ray.hub.resources import WORKLOADS
    from kueue_ray.hub.scope import _Scope
    from kueue_ray.hub.watchhub import WatchHub

    hub = WatchHub()
    scope = _Scope(key=("kubernetes_default", "ray", ""), client=None)
    loop = SimpleNamespace(resource=WORKLOADS, objects={}, scope=scope)
    subscription = SimpleNamespace(scope=scope.key)
    hub._scopes[scope.key] = scope

    def held():
        return {(h.cluster_queue, str(h.usage[("default", "cpu")])) for h in hub.holdings(subscription)}

    hub.offer(loop, "job-uid", workload(1))
    assert held() == set(), "pending: holds nothing"
    hub.offer(loop, "job-uid", workload(2, admitted_to="team-a-cq"))
    assert held() == {("team-a-cq", "2")}
    hub.offer(loop, "job-uid", workload(1))
    assert held() == {("team-a-cq", "2")}, "an older version changes nothing"
    hub.offer(loop, "job-uid", workload(3, admitted_to="team-a-cq", cpu="3"))
    assert held() == {("team-a-cq", "3")}
    hub.offer(loop, "job-uid", workload(4, admitted_to="team-a-cq", finished=True))
    assert held() == set(), "finished: its quota is free"
    hub.offer(loop, "job-uid", workload(5, admitted_to="team-a-cq"))
    hub.offer_deleted(loop, "job-uid", workload(6))
    assert held() == set(), "deleted"
    assert scope.workload_changes == 6, "every newer version and the deletion"


def rayjob(name, uid, rv):
    return {
        "metadata": {
            "name": name,
            "namespace": "ray",
            "uid": uid,
            "resourceVersion": str(rv),
            "labels": {"app.kubernetes.io/managed-by": "airflow-kueue-ray"},
        }
    }


def test_the_hub_finds_a_cached_rayjob_by_uid_through_its_index():
    """A preemptor or a quota holder is named by its job's uid: found in the cache without a pass over
    every RayJob, and a newer RayJob of the same name (a retry's) is not found by its predecessor's uid."""
    from kueue_ray.hub.resources import RAYJOB, RAYJOBS
    from kueue_ray.hub.scope import _Scope
    from kueue_ray.hub.watchhub import WatchHub

    hub = WatchHub()
    scope = _Scope(key=("kubernetes_default", "ray", ""), client=None)
    loop = SimpleNamespace(resource=RAYJOBS, objects={}, scope=scope)
    subscription = SimpleNamespace(scope=scope.key)
    hub._scopes[scope.key] = scope
    scope.loops[RAYJOB] = loop

    hub.offer(loop, "train", rayjob("train", "uid-1", 1))
    hub.offer(loop, "serve", rayjob("serve", "uid-9", 2))
    assert hub.rayjob_by_uid(subscription, "uid-1")["metadata"]["name"] == "train"
    hub.offer(loop, "train", rayjob("train", "uid-2", 3))  # the retry's RayJob replaced the first
    assert hub.rayjob_by_uid(subscription, "uid-1") is None
    assert hub.rayjob_by_uid(subscription, "uid-2")["metadata"]["resourceVersion"] == "3"
    hub.offer_deleted(loop, "train", rayjob("train", "uid-2", 4))
    assert hub.rayjob_by_uid(subscription, "uid-2") is None
    assert hub.rayjob_by_uid(subscription, "uid-9")["metadata"]["name"] == "serve"


def test_queued_tasks_of_one_shape_share_an_explanation_until_a_holder_changes():
    """Thousands of queued tasks of one shape ask "why still queued" after each Workload change: they
    share one explanation while the holders stay as they are (a pending Workload's change keeps it), and
    the next one after a holder changes, or a holder's RayJob arrives, says what is new."""
    from kueue_ray.hub.resources import RAYJOB, WORKLOADS
    from kueue_ray.hub.scope import _Scope
    from kueue_ray.hub.watchhub import WatchHub
    from kueue_ray.naming import AirflowIdentity

    hub = WatchHub()
    scope = _Scope(key=("kubernetes_default", "ray", ""), client=None)
    workloads = SimpleNamespace(resource=WORKLOADS, objects={}, scope=scope)
    rayjobs = SimpleNamespace(resource=RAYJOBS, objects={}, scope=scope)
    scope.loops[RAYJOB] = rayjobs
    hub._scopes[scope.key] = scope
    cq = {
        "metadata": {"name": "team-a-cq", "resourceVersion": "7"},
        "spec": {
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {"flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}
            ],
        },
    }

    def pending(name):
        return {
            "metadata": {
                "name": name,
                "namespace": "ray",
                "creationTimestamp": f"2026-12-06T05:0{len(name)}:00Z",
            },
            "spec": {"priority": 100},
            "status": {"resourceRequests": [{"name": "head", "resources": {"cpu": "2"}}]},
        }

    def why(name):
        subscription = SimpleNamespace(scope=scope.key)
        subscription.rayjob_by_uid = lambda uid: hub.rayjob_by_uid(subscription, uid)
        return hub.why_queued(subscription, cq, pending(name), [cq])

    hub.offer(workloads, "job-uid", workload(2, admitted_to="team-a-cq", cpu="3"))
    first = why("rayjob-a")
    assert any("rayjob-train-1" in line and "uses 3 CPU" in line for line in first), first
    assert why("rayjob-bb") == first and len(scope.explanations) == 1, "one explanation for both"
    other = workload(1)
    other["metadata"] = {**other["metadata"], "name": "rayjob-queued-2", "uid": "wl-2"}
    hub.offer(workloads, "other-uid", other)  # a pending Workload changed: no holder did
    assert len(scope.explanations) == 1

    hub.offer(workloads, "job-uid", workload(3, admitted_to="team-a-cq", cpu="1"))
    resized = why("rayjob-a")
    assert any("rayjob-train-1" in line and "uses 1 CPU" in line for line in resized), resized

    submitter = rayjob("train", "job-uid", 4)
    submitter["metadata"]["annotations"] = AirflowIdentity("llm", "train", "manual__1").annotations()
    hub.offer(rayjobs, "train", submitter)
    assert any("DAG llm, run manual__1, task train" in line for line in why("rayjob-bb")), "named now"

    admitted = pending("rayjob-a")
    admitted["status"]["admission"] = {"clusterQueue": "team-a-cq", "podSetAssignments": []}
    subscription = SimpleNamespace(scope=scope.key, rayjob_by_uid=lambda uid: None)
    assert hub.why_queued(subscription, cq, admitted, [cq]) == [], "admitted: nothing to explain"


def test_the_rayjob_and_workload_caches_pack_what_no_task_here_waits_on():
    """A triggerer caches every RayJob and Workload of its namespace and deployment, and packs those none
    of its own tasks waits on as compact JSON (a fifth of their size as dicts): a wait reads the trimmed
    object it always did, a reader that changes a packed object's copy changes nothing in the cache, a
    relist that leaves an object out still finds it deleted, and what a task here waits on stays decoded
    (one dict, which the wait holds anyway) until it stops waiting."""
    from kueue_ray.hub.resources import RAYJOB, RAYJOBS, RAYSERVICES
    from kueue_ray.hub.scope import _Scope
    from kueue_ray.hub.subscriptions import Subscription
    from kueue_ray.hub.watchhub import WatchHub
    from kueue_ray.kube.essential import essential_rayjob
    from kueue_ray.kube.packed import PackedObjects

    hub = WatchHub()
    scope = _Scope(key=("kubernetes_default", "ray", ""), client=None)
    loop = _WatchLoop(hub, scope, RAYJOBS)
    scope.loops[RAYJOB] = loop
    hub._scopes[scope.key] = scope
    subscription = SimpleNamespace(scope=scope.key, name="train", uid="uid-1")
    assert isinstance(loop.objects, PackedObjects)
    assert not isinstance(_WatchLoop(hub, scope, RAYSERVICES).objects, PackedObjects), "few, read whole"

    sent = {**rayjob("train", "uid-1", 1), "spec": {"suspend": True, "entrypoint": "python train.py"}}
    sent["status"] = {"jobDeploymentStatus": "Suspended", "rayClusterStatus": {"state": ""}}
    hub.offer(loop, "train", sent)
    cached = hub.cached(subscription, RAYJOB)
    assert cached == essential_rayjob(sent)
    cached["status"]["jobDeploymentStatus"] = "Running"
    assert hub.cached(subscription, RAYJOB)["status"]["jobDeploymentStatus"] == "Suspended"

    waiting = Subscription(hub, *scope.key[:2], "train", "uid-1", 60.0, "", None)
    scope.add(waiting)
    assert hub.cached(subscription, RAYJOB) is hub.cached(subscription, RAYJOB), "decoded while waited on"
    assert isinstance(loop.objects._objects["train"], dict)
    scope.remove(waiting)
    assert isinstance(loop.objects._objects["train"], bytes), "packed again"
    assert hub.cached(subscription, RAYJOB) == essential_rayjob(sent)

    loop.begin_list()
    loop.apply_page([rayjob("serve", "uid-9", 2)])
    loop.end_list()
    assert hub.cached(subscription, RAYJOB) is None, "left out of a relist: deleted"
    assert list(loop.objects) == ["serve"]


def test_a_first_list_arriving_page_by_page_is_seen_whole():
    """A triggerer's first list of 30,000 RayJobs comes in 60 pages, each cached as it arrives (holding one
    page's text at a time, not the namespace's). A waiting task sees none of it before the last page: its
    read waits for the list, and nothing is delivered, so what reads the namespace as a whole (who holds
    the quota, the queue's version) is never told from part of it. A page of a later relist is news at
    once. A first list that begins again (its continue token expired) keeps what it had cached hidden."""
    from kueue_ray.hub.resources import RAYJOB, RAYJOBS
    from kueue_ray.hub.scope import _Scope
    from kueue_ray.hub.subscriptions import Subscription
    from kueue_ray.hub.watchhub import WatchHub

    hub = WatchHub()
    scope = _Scope(key=("kubernetes_default", "ray", ""), client=None)
    loop = _WatchLoop(hub, scope, RAYJOBS)
    scope.loops[RAYJOB] = loop
    hub._scopes[scope.key] = scope
    train = Subscription(hub, *scope.key[:2], "train", "uid-1", 60.0, "", None)
    scope.add(train)

    def delivered() -> list:
        return asyncio.run(_drain(train.updates))

    loop.begin_list()
    loop.apply_page([rayjob("train", "uid-1", 1)])
    assert not train._holds(RAYJOB) and delivered() == [], "the first page: not an answer yet"
    loop.begin_list()  # its continue token expired: the list begins again
    assert not train._holds(RAYJOB), "cached by the expired list: still not an answer"
    loop.apply_page([rayjob("serve", "uid-9", 2)])
    loop.apply_page([rayjob("train", "uid-1", 3)])
    assert not train._holds(RAYJOB) and delivered() == []
    loop.end_list()
    loop.listed.set()  # as ListWatchLoop._list does once the list has ended
    assert train._holds(RAYJOB)
    [update] = delivered()
    assert update.object["metadata"]["resourceVersion"] == "3", "delivered whole, at the end"

    loop.begin_list()  # a relist
    loop.apply_page([rayjob("train", "uid-1", 4)])
    assert train._holds(RAYJOB)
    [update] = delivered()
    assert update.object["metadata"]["resourceVersion"] == "4", "a relist's page is news at once"


async def _drain(mailbox) -> list:
    updates = []
    while (update := await mailbox.get(0.001)) is not None:
        updates.append(update)
    return updates


def test_a_rayservice_wait_reads_only_the_workloads_a_service_or_its_clusters_control():
    """A RayService's wait reads its own Workload or its clusters' from an index kept as Workloads
    arrive, not by decoding every job Workload of the namespace."""
    from kueue_ray.hub.resources import WORKLOAD, WORKLOADS
    from kueue_ray.hub.scope import _Scope
    from kueue_ray.hub.watchhub import WatchHub

    hub = WatchHub()
    scope = _Scope(key=("kubernetes_default", "ray", ""), client=None)
    loop = _WatchLoop(hub, scope, WORKLOADS)
    scope.loops[WORKLOAD] = loop
    hub._scopes[scope.key] = scope
    subscription = SimpleNamespace(scope=scope.key)

    def owned_by(kind, name, uid, rv):
        owner = {"kind": kind, "name": name, "uid": uid, "controller": True}
        return {
            "metadata": {
                "name": f"{kind.lower()}-{name}",
                "uid": f"wl-{uid}",
                "resourceVersion": str(rv),
                "labels": {"kueue.x-k8s.io/job-uid": uid},
                "ownerReferences": [owner],
            }
        }

    hub.offer(loop, "job-1", owned_by("RayJob", "train", "job-1", 1))
    hub.offer(loop, "cluster-1", owned_by("RayCluster", "serve-x7k2p", "cluster-1", 2))
    hub.offer(loop, "service-1", owned_by("RayService", "serve", "service-1", 3))
    names = {w["metadata"]["name"] for w in hub.service_workloads(subscription)}
    assert names == {"raycluster-serve-x7k2p", "rayservice-serve"}
    hub.offer_deleted(loop, "cluster-1", owned_by("RayCluster", "serve-x7k2p", "cluster-1", 4))
    assert [w["metadata"]["name"] for w in hub.service_workloads(subscription)] == ["rayservice-serve"]
