"""Paged lists: each list's pages from its first page's snapshot, and what happens once it is dropped."""

from kubesim.apiserver.paging import Snapshots, paginate


def objects(*names: str) -> list[dict]:
    return [{"metadata": {"namespace": "ns", "name": name}} for name in names]


def names(page: list[dict]) -> list[str]:
    return [item["metadata"]["name"] for item in page]


def test_a_list_continues_over_its_snapshot_while_it_is_kept_and_over_the_current_objects_after():
    current = {"items": objects("a", "b", "c", "d")}

    def read():
        return current["items"], str(len(current["items"]))

    snapshots = Snapshots(capacity=2)
    page, version, token, remaining = paginate(read, "2", None, snapshots, now=0.0)
    assert (names(page), version, remaining) == (["a", "b"], "4", 2)
    current["items"] = objects("a", "b", "x")

    assert names(paginate(read, "2", token, snapshots, now=1.0)[0]) == ["c", "d"]
    for _ in range(2):  # two newer lists push the first one's snapshot out
        paginate(read, "1", None, snapshots, now=2.0)
    rest, version, _, _ = paginate(read, "2", token, snapshots, now=3.0)
    assert (names(rest), version) == (["x"], "4"), "dropped: the current objects after its last item"


def test_snapshots_older_than_the_tokens_lifetime_are_dropped_when_a_new_list_starts():
    snapshots = Snapshots()
    old = snapshots.keep(objects("a"), issued=0.0, ttl_s=300.0)
    young = snapshots.keep(objects("b"), issued=200.0, ttl_s=300.0)
    snapshots.keep(objects("c"), issued=301.0, ttl_s=300.0)
    assert snapshots.get(old) is None and names(snapshots.get(young) or []) == ["b"]
