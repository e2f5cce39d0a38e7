"""Label and field selectors parse and match like the API server's."""

import pytest

from kubesim.errors import ApiError
from kubesim.selectors import match_label_selector_obj, parse_field_selector, parse_label_selector

LABELS = {"app": "train", "tier": "gpu", "kueue.x-k8s.io/queue-name": "team-a"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=train", True),
        ("app==train", True),
        ("app=serve", False),
        ("app!=serve", True),
        ("missing!=x", True),  # != also selects objects without the label
        ("tier in (cpu, gpu)", True),
        ("tier in (cpu)", False),
        ("tier notin (cpu)", True),
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("tier", True),
        ("!tier", False),
        ("!missing", True),
        ("kueue.x-k8s.io/queue-name=team-a,tier in (gpu),!missing", True),
        ("app=train,tier=cpu", False),
        ("app=", False),
    ],
)
def test_label_selector_matching(selector, matches):
    assert parse_label_selector(selector).matches(LABELS) is matches


def test_empty_label_value_selects_objects_with_empty_value():
    assert parse_label_selector("flag=").matches({"flag": ""})


@pytest.mark.parametrize(
    "selector",
    [
        "tier in (gpu",
        "tier in ()",
        "a=b=c",
        "bad key=x",
        "app=has space",
        "x,,y",
        "-bad=x",
        "tier in gpu)",
        "a=" + "v" * 64,
    ],
)
def test_bad_label_selectors_are_400(selector):
    with pytest.raises(ApiError) as err:
        parse_label_selector(selector)
    assert (err.value.code, err.value.reason) == (400, "BadRequest")
    assert "unable to parse requirement" in err.value.message


def test_label_selector_object():
    selector = {
        "matchLabels": {"app": "train"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["gpu", "tpu"]},
            {"key": "legacy", "operator": "DoesNotExist"},
            {"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"},
            {"key": "zone", "operator": "NotIn", "values": ["us-east"]},
        ],
    }
    assert match_label_selector_obj(selector, LABELS)
    assert not match_label_selector_obj(selector, {**LABELS, "legacy": "yes"})
    assert not match_label_selector_obj(selector, {**LABELS, "zone": "us-east"})
    assert match_label_selector_obj({}, {})  # empty selects everything
    assert not match_label_selector_obj(None, LABELS)  # nil selects nothing


def test_label_selector_object_rejects_bad_operators():
    with pytest.raises(ApiError) as err:
        match_label_selector_obj({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, {})
    assert err.value.code == 400
    with pytest.raises(ApiError):
        match_label_selector_obj({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, {})


EVENT = {
    "metadata": {"name": "job.17f", "namespace": "default"},
    "involvedObject": {"kind": "RayJob", "name": "job", "uid": "u-1"},
    "type": "Warning",
    "count": 3,
    "spec": {"suspend": True, "note": "a,b=c"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("metadata.name=job.17f", True),
        ("metadata.name==job.17f,metadata.namespace=default", True),
        ("metadata.namespace!=default", False),
        ("involvedObject.uid=u-1,involvedObject.kind=RayJob", True),
        ("involvedObject.name=other", False),
        ("type=Warning", True),
        ("count=3", True),
        ("spec.suspend=true", True),
        ("spec.missing=", True),
        ("spec.missing!=", False),
        (r"spec.note=a\,b\=c", True),
    ],
)
def test_field_selector_matching(selector, matches):
    assert parse_field_selector(selector).matches(EVENT) is matches


@pytest.mark.parametrize("selector", ["metadata.name", "=x", "metadata..name=x", "a=b,", r"a=b\x", "a=b=c"])
def test_bad_field_selectors_are_400(selector):
    with pytest.raises(ApiError) as err:
        parse_field_selector(selector)
    assert (err.value.code, err.value.reason) == (400, "BadRequest")
