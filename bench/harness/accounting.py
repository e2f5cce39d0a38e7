"""kubesim's request counts between two moments (two ``Api.stats()``), the harness's own requests left
out, so every figure is what the process under measurement sent."""

from __future__ import annotations

from bench.harness.phases import wait_until
from bench.kube import Api
from kubesim.apiserver.faults import RequestRecord


def delta(after: dict, before: dict, api: Api) -> int:
    """Requests the measured processes made between ``before`` and ``after``."""
    return api.foreign_requests(after) - api.foreign_requests(before)


def requests_of(log: list[dict], user: str, *, until: float | None = None) -> dict[str, int]:
    """One user's requests in kubesim's request log (``GET /kubesim/requests``), counted by verb and
    resource as kubesim's counters name them, up to the wall time ``until``.

    >>> rayjobs = {"verb": "list", "group": "ray.io", "resource": "rayjobs", "subresource": "", "namespace": "",
    ...            "name": "", "code": 200, "path": "/apis/ray.io/v1/rayjobs", "at": 1.0}
    >>> log = [{**rayjobs, "user": "a"}, {**rayjobs, "user": "b"},
    ...        {**rayjobs, "user": "a", "at": 3.0, "verb": "get", "group": "kueue.x-k8s.io",
    ...         "resource": "localqueues", "subresource": "pendingworkloads"}]
    >>> requests_of(log, "a"), requests_of(log, "a", until=2.0)
    ({'get localqueues.kueue.x-k8s.io/pendingworkloads': 1, 'list rayjobs.ray.io': 1}, {'list rayjobs.ray.io': 1})
    """
    counts: dict[str, int] = {}
    for entry in log:
        record = RequestRecord(**entry)
        if record.user != user or (until is not None and record.at > until):
            continue
        counts[record.counter_key] = counts.get(record.counter_key, 0) + 1
    return dict(sorted(counts.items()))


def by_verb(after: dict, before: dict) -> dict:
    """Request counts by verb and resource between two stats; the harness's own ``quiet`` polls (the only
    namespace lists in the run) are left out.

    >>> by_verb({"requests": {"watch rayjobs": 2, "list namespaces": 9}}, {"requests": {}})
    {'watch rayjobs': 2}
    """
    keys = set(after["requests"]) | set(before["requests"])
    change = {k: after["requests"].get(k, 0) - before["requests"].get(k, 0) for k in keys}
    return {k: v for k, v in sorted(change.items()) if v and k != "list namespaces"}


async def streams_closed(api: Api, below: int) -> None:
    """Until kubesim counts at most ``below`` open watch streams: a stopped or killed process's streams end
    when kubesim notices its closed connections, and until then their requests are not counted."""

    async def closed() -> bool:
        return (await api.stats())["watches_open"] <= below

    await wait_until(closed, timeout_s=120, interval_s=0.1)


async def settled(api: Api, *, streams: int, quiet_s: float = 3.0) -> dict:
    """Stats once ``streams`` watch streams are open and then no request came for ``quiet_s``."""

    async def streaming() -> bool:
        return (await api.stats())["watches_open"] >= streams

    await wait_until(streaming, timeout_s=300, interval_s=0.2)
    return await api.quiet(quiet_s=quiet_s)
