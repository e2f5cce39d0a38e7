"""A LIST answer decoded one item at a time reads exactly what ``json.loads`` reads."""

import json

import pytest
from kueue_ray.kube.listbody import ListBody


def decoded(text: str) -> tuple[list, dict, str | None]:
    body = ListBody(text)
    items = list(body.items())
    return items, body.fields, body.resource_version


ITEMS = [
    {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"suspend": True, "list": [1, 2.5, None]}},
    {"metadata": {"name": "b"}, "status": {"message": 'quoted "}]," and \\u00e9 \u00e9'}},
]


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("metadata_last", [False, True])
def test_items_and_fields_are_what_json_loads_reads(indent, metadata_last):
    """Kubernetes writes ``metadata`` after ``items`` (keys sorted); a proxy may re-indent."""
    listed = {"apiVersion": "ray.io/v1", "kind": "RayJobList"}
    meta = {"metadata": {"resourceVersion": "42", "continue": ""}}
    listed = {**listed, "items": ITEMS, **meta} if metadata_last else {**listed, **meta, "items": ITEMS}
    text = json.dumps(listed, indent=indent)

    items, fields, version = decoded(text)

    assert items == ITEMS
    assert fields == {key: value for key, value in json.loads(text).items() if key != "items"}
    assert version == "42"


@pytest.mark.parametrize("text", ['{"items": [], "metadata": {}}', '{"items": null}', "{}", " { } "])
def test_an_empty_list(text):
    assert decoded(text)[0] == []


def test_items_are_decoded_as_they_are_asked_for():
    """One full object at a time: the first item is handed over before the next is even read."""
    body = ListBody('{"items": [{"n": 1}, {"n": 2}, BROKEN]}')
    items = body.items()
    assert next(items) == {"n": 1}
    assert next(items) == {"n": 2}
    with pytest.raises(json.JSONDecodeError):
        next(items)


@pytest.mark.parametrize(
    "text", ['{"items": [{"n": 1}', '{"items": [{"n": 1}] "kind": "x"}', '{"items": []} trailing', ""]
)
def test_malformed_or_cut_off_json_raises_as_json_loads_does(text):
    with pytest.raises(json.JSONDecodeError):
        decoded(text)
