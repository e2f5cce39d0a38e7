"""The list+watch loop's schedule while a watch is refused (403): what it asks the API server, in order."""

import asyncio
import contextlib
import json
import time
from types import SimpleNamespace

from kueue_ray.kube.listwatch import ListWatchLoop
from kueue_ray.kube.refusals import Backoff, Refused
from kueue_ray.kube.shared_client import SharedApiClient
from kueue_ray.kube.watch_target import ListWatchSettings, Target

TARGET = Target("kubernetes_default", "ray.io", "v1", "rayjobs", "ray", "app=x")
SETTINGS = ListWatchSettings(degraded_list_interval=0.05, degraded_watch_retry_every=10)
"""A watch retry every 0.5 s while polling."""


class Stream:
    """A watch answer: 200 and a stream the server ends at once, or a refusal."""

    def __init__(self, status: int):
        self.status = status
        self.reason = "OK" if status == 200 else "Forbidden"
        self.headers = {}
        self.content = SimpleNamespace(readline=self.readline)

    async def readline(self):
        return b""

    async def read(self):
        return b'{"kind": "Status", "code": 403, "reason": "Forbidden", "message": "cannot watch"}'

    def release(self):
        pass


class Listed:
    """A LIST answer as kubernetes_asyncio hands it over unread (``_preload_content=False``)."""

    def __init__(self, result: dict):
        self.status = 200
        self.content = SimpleNamespace(read=self.read)
        self.body = json.dumps(result).encode()

    async def read(self):
        return self.body

    def release(self):
        pass


class Api:
    """Records each request as "list" or "watch"; watches are answered ``watch_status``."""

    def __init__(self, watch_status: int):
        self.requests: list[str] = []
        self.watch_status = watch_status

    async def list_namespaced_custom_object(self, *args, watch=False, _preload_content=True, **kwargs):
        self.requests.append("watch" if watch else "list")
        if watch:
            return Stream(self.watch_status)
        result = {"items": [], "metadata": {"resourceVersion": str(len(self.requests))}}
        return result if _preload_content else Listed(result)


class Loop(ListWatchLoop):
    def resync_interval(self) -> float:
        return 300.0

    def begin_list(self):
        pass

    def apply_page(self, items):
        pass

    def end_list(self):
        pass

    def apply_event(self, kind, obj):
        pass


def requests_until_first_watch(refusals: dict, watch_status: int = 200, limit: float = 3.0) -> list[str]:
    api = Api(watch_status)

    async def scenario():
        loop = Loop(TARGET, SharedApiClient(None, "kubernetes_default"), SETTINGS, refusals)
        streaming = asyncio.ensure_future(loop._stream(api, Backoff(1.0, 1.0)))
        deadline = time.monotonic() + limit
        while "watch" not in api.requests and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        streaming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await streaming
        return loop

    loop = asyncio.run(scenario())
    return api.requests, loop


def refused_ago(seconds: float) -> dict:
    return {TARGET: (Refused("watch", 403, "Forbidden", "cannot watch"), time.monotonic() - seconds)}


def test_a_loop_with_no_refusal_on_record_lists_then_watches():
    requests, loop = requests_until_first_watch({})
    assert requests == ["list", "watch"]
    assert loop.polling_because is None


def test_a_loop_replacing_one_refused_recently_polls_and_keeps_the_old_retry_schedule():
    """Refused 0.4 s ago with a retry every 0.5 s: the watch is tried again about 0.1 s from now, not a
    whole retry period after this loop started (a triggerer whose waits come and go would otherwise
    never watch again once refused)."""
    requests, loop = requests_until_first_watch(refused_ago(0.4))
    assert requests[0] == "list", "the first list is not delayed by the polling interval"
    assert requests[-1] == "watch"
    assert 2 <= len(requests) <= 5, requests
    assert loop.polling_because is None, "the watch was allowed: polling ended"


def test_a_refusal_older_than_the_retry_period_is_forgotten():
    requests, _ = requests_until_first_watch(refused_ago(0.6))
    assert requests == ["list", "watch"]


def test_a_retry_refused_again_keeps_polling_and_is_remembered_from_then():
    refusals = refused_ago(0.45)
    before = refusals[TARGET][1]
    requests, loop = requests_until_first_watch(refusals, watch_status=403)
    assert requests[-1] == "watch" and len(requests) <= 5, requests
    assert loop.polling_because is not None
    assert refusals[TARGET][1] > before, "the next loop counts its retry period from this refusal"


def test_a_list_gives_the_memory_it_freed_back_soon_after(monkeypatch):
    """``kueue_ray.kube.heap``: one trim ``trim_after_list_seconds`` after the loop's list."""
    from kueue_ray.kube import heap

    trims: list[float] = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append(time.monotonic()))
    settings = ListWatchSettings(trim_after_list_seconds=0.05)

    async def scenario():
        loop = Loop(TARGET, SharedApiClient(None, "kubernetes_default"), settings, {})
        await loop._list(Api(200))
        listed = time.monotonic()
        assert trims == []
        await asyncio.sleep(0.15)
        return listed

    listed = asyncio.run(scenario())
    assert len(trims) == 1 and trims[0] >= listed + 0.04


class Pages:
    """A LIST answered in pages of two RayJobs (``items``, then the ``continue`` token), whose first token
    the server has forgotten (410) the first time it is sent back."""

    def __init__(self, names: list[str]):
        self.names = names
        self.requests: list[str | None] = []
        self.expired_once = False

    async def list_namespaced_custom_object(self, *args, _continue=None, limit=None, **kwargs):
        self.requests.append(_continue)
        if _continue == "2" and not self.expired_once:
            self.expired_once = True
            return SimpleNamespace(status=410, release=lambda: None)
        start = int(_continue or 0)
        page = self.names[start : start + 2]
        more = start + 2 < len(self.names)
        metadata = {"resourceVersion": "77", **({"continue": str(start + 2)} if more else {})}
        # the metadata after the items, as an API server may write it
        return Listed({"items": [{"metadata": {"name": n}} for n in page], "metadata": metadata})


class Recorded(Loop):
    def __init__(self):
        super().__init__(TARGET, SharedApiClient(None, "kubernetes_default"), SETTINGS, {})
        self.calls: list = []

    def begin_list(self):
        self.calls.append("begin")

    def apply_page(self, items):
        self.calls.append([item["metadata"]["name"] for item in items])

    def end_list(self):
        self.calls.append("end")

    def succeeded(self):
        self.calls.append("succeeded")


def test_a_list_is_applied_page_by_page_and_starts_again_when_its_continue_token_expired():
    """Each page is handed over before the next is asked for (a list of 30,000 objects holds one page's
    text at a time); after a 410 to a continue token the list begins again, so what ``end_list`` judges
    deleted is what the complete list left out. The loop succeeds once, when the list has ended: the
    readers waiting on it (thousands of triggers at a triggerer's start) wake once per list, not per
    page."""
    api, loop = Pages(["a", "b", "c", "d", "e"]), Recorded()

    asyncio.run(loop._list(api))

    assert api.requests == [None, "2", None, "2", "4"]
    assert loop.calls == ["begin", ["a", "b"], "begin", ["a", "b"], ["c", "d"], ["e"], "succeeded", "end"]
    assert loop.resource_version == "77" and loop.listed.is_set()
