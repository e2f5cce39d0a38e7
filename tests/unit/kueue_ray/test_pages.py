"""Lists in pages: every page read, an expired continue token restarts the list, the server's Date kept."""

from datetime import UTC, datetime

import pytest
from kubernetes.client import V1ListMeta, V1ObjectMeta, V1Pod, V1PodList
from kubernetes.client.exceptions import ApiException
from kueue_ray.kube import pages
from kueue_ray.kube.pages import list_all, server_time

DATE = {"Date": "Fri, 04 Dec 2026 12:00:00 GMT"}


class Server:
    """Answers a list of ``names`` in pages of the asked ``limit``; ``expire`` tokens answer 410 once each."""

    def __init__(self, names, expire=()):
        self.names = names
        self.expire = set(expire)
        self.calls: list[dict] = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        start = int(kwargs.get("_continue") or 0)
        if kwargs.get("_continue") in self.expire:
            self.expire.discard(kwargs["_continue"])
            raise ApiException(status=410, reason="Expired")
        end = start + kwargs["limit"]
        metadata = {"resourceVersion": str(100 + len(self.calls))}
        if end < len(self.names):
            metadata["continue"] = str(end)
        items = [{"metadata": {"name": n}} for n in self.names[start:end]]
        return {"items": items, "metadata": metadata}, 200, DATE


def test_every_page_is_read_with_limit_and_continue():
    server = Server([f"job-{i}" for i in range(5)])
    listing = list_all(server, limit=2, label_selector="a=b")
    assert [i["metadata"]["name"] for i in listing.items] == [f"job-{i}" for i in range(5)]
    assert [c.get("_continue") for c in server.calls] == [None, "2", "4"]
    assert all(c["limit"] == 2 and c["label_selector"] == "a=b" for c in server.calls)
    assert listing.pages == 3 and listing.resource_version == "103"
    assert listing.server_time == datetime(2026, 12, 4, 12, tzinfo=UTC)


def test_an_expired_continue_token_lists_again_from_the_first_page():
    server = Server([f"job-{i}" for i in range(5)], expire={"4"})
    listing = list_all(server, limit=2)
    assert [i["metadata"]["name"] for i in listing.items] == [f"job-{i}" for i in range(5)], "no duplicates"
    assert [c.get("_continue") for c in server.calls] == [None, "2", "4", None, "2", "4"]


def test_a_token_that_keeps_expiring_raises_in_the_end(monkeypatch):
    monkeypatch.setattr(pages, "EXPIRED_RESTARTS", 1)

    class Always(Server):
        def __call__(self, **kwargs):
            if kwargs.get("_continue"):
                raise ApiException(status=410, reason="Expired")
            return super().__call__(**kwargs)

    with pytest.raises(ApiException) as raised:
        list_all(Always(["a", "b", "c"]), limit=2)
    assert raised.value.status == 410


def test_other_errors_are_not_retried_here():
    def refuse(**kwargs):
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException):
        list_all(refuse)


def test_typed_lists_page_too():
    answers = iter(
        [
            V1PodList(items=[V1Pod(metadata=V1ObjectMeta(name="a"))], metadata=V1ListMeta(_continue="t")),
            V1PodList(items=[V1Pod(metadata=V1ObjectMeta(name="b"))], metadata=V1ListMeta()),
        ]
    )
    listing = list_all(lambda **kw: (next(answers), 200, {}), limit=1)
    assert [p.metadata.name for p in listing.items] == ["a", "b"]
    assert listing.server_time is None


def test_server_time_reads_the_date_header():
    assert server_time(DATE) == datetime(2026, 12, 4, 12, tzinfo=UTC)
    assert server_time({"Date": "garbage"}) is None
    assert server_time(None) is None
