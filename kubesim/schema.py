"""Validate and default custom resources against a CRD's openAPIV3Schema, as the API server does.

The API server runs every custom resource it receives through three steps, in this order: null pruning
and structural defaulting (``apply_defaults``), then schema validation (``validate``). Both work directly
on the JSON-shaped dict and the schema dict from the CRD: no jsonschema library, nothing compiled ahead,
so the whole thing stays a pair of small recursive walks that the store can afford on every write.

Errors are ``FieldError``s carrying what the API server puts in a 422 Status: ``details.causes[]`` has
``field`` (``spec.a[0].b``), ``reason`` (the ``metav1.CauseType``) and ``message`` (the field error's
body, e.g. ``Required value``). Wording follows kube-openapi's messages as apiextensions-apiserver
converts them into field errors, so a test written against kubesim reads like one against a real cluster:

* missing required property: ``FieldValueRequired``, ``Required value``
* wrong type: ``FieldValueTypeInvalid``,
  ``Invalid value: "string": spec.x in body must be of type integer: "string"``
* enum: ``FieldValueNotSupported``, ``Unsupported value: "Foo": supported values: "A", "B"``
* maxLength: ``FieldValueTooLong``, ``Too long: may not be more than 63 bytes``
* maxItems / maxProperties: ``FieldValueTooMany``, ``Too many: 3: must have at most 2 items``
* duplicate in a ``set`` / ``map`` list: ``FieldValueDuplicate``, ``Duplicate value: {"name":"a"}``
* everything else (pattern, minimum, minLength, minItems, ...): ``FieldValueInvalid``,
  ``Invalid value: "2x": spec.q in body should match '^...$'``

Unknown fields are rejected, as with ``fieldValidation=Strict``. The real server reports those as a 400
``strict decoding error: unknown field "spec.foo"`` without causes, and the schema-level way of refusing
an undeclared property (kube-openapi's "forbidden property") is a ``FieldValueInvalid`` cause. So an
unknown field here is ``FieldError("spec.foo", "FieldValueInvalid", 'unknown field "spec.foo"')``: the
message is exactly the server's strict-decoding text, and callers can tell these apart by its prefix
``unknown field``.

Deliberately not done, because the API server does not do it either or these CRDs never need it:

* ``format: int32`` / ``int64``: apiextensions strips number formats before validating, so an int32
  field accepts any integer. Only ``date-time`` (the one string format in these CRDs) is checked.
* CEL ``x-kubernetes-validations`` are skipped: evaluating CEL is out of scope, and the rules in these
  CRDs guard cross-field invariants that kubesim's controllers and our manifests do not break. The one
  rule that changes how kubesim schedules (a ClusterQueue's ``flavorFungibility.preference``) is
  enforced by ``kubesim.kueue.webhook`` instead.
* ``anyOf`` is skipped: structural schemas use it only next to ``x-kubernetes-int-or-string``, whose
  integer-or-string check the type step already makes.
* After a type mismatch the node's other checks (enum, pattern, ...) are not reported; the server may
  add one or two more messages for the same field.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_EMBEDDED_KEYS = ("apiVersion", "kind", "metadata")
_DATE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_patterns: dict[str, re.Pattern[str]] = {}


@dataclass(frozen=True)
class FieldError:
    """One ``details.causes[]`` entry of a 422 Invalid Status."""

    field: str
    reason: str
    message: str


# ---------------------------------------------------------------------------------------------- CRDs


def crd_schema(crd: dict, version: str) -> dict:
    """The ``openAPIV3Schema`` of one version of a CRD."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise KeyError(f"CRD {crd['metadata']['name']} has no version {version!r}")


def load_crd_schemas(crds_dir: str | Path) -> dict[tuple[str, str], dict]:
    """``(group, plural) -> schema`` of the storage version of every CRD in ``crds_dir``.

    The storage version is the one kubesim serves: the Kueue files also carry the deprecated v1beta1
    (and KubeRay v1alpha1) without a conversion webhook, so serving one version per kind keeps every
    client looking at the same shape.
    """
    schemas: dict[tuple[str, str], dict] = {}
    for path in sorted(Path(crds_dir).iterdir()):
        if path.suffix not in (".yaml", ".yml", ".json"):
            continue
        with path.open(encoding="utf-8") as stream:
            for doc in yaml.load_all(stream, Loader=_LOADER):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
                schemas[(spec["group"], spec["names"]["plural"])] = crd_schema(doc, storage)
    return schemas


# ---------------------------------------------------------------------------------------- defaulting


def apply_defaults(obj: dict, schema: dict) -> None:
    """Prune non-nullable nulls and fill in ``default`` values, in place, like the API server's decoder.

    Defaults apply only where the parent object exists (a missing ``spec.preemption`` stays missing
    unless ``spec.preemption`` itself has a default), and defaulted values are themselves defaulted
    further, so ``preemption: {}`` grows its nested defaults. A ``null`` for a non-nullable field is
    replaced by the field's default, or dropped when it has none, as apiextensions does before
    validation.
    """
    _default(obj, schema)


def _default(value: Any, schema: dict) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties:
            for key, prop in properties.items():
                if key in value:
                    if value[key] is None and not prop.get("nullable"):
                        if "default" in prop:
                            value[key] = copy.deepcopy(prop["default"])
                        else:
                            del value[key]
                elif "default" in prop:
                    value[key] = copy.deepcopy(prop["default"])
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key in [k for k, v in value.items() if v is None and not (properties and k in properties)]:
                if additional.get("nullable"):
                    continue
                if "default" in additional:
                    value[key] = copy.deepcopy(additional["default"])
                else:
                    del value[key]
        for key, item in value.items():
            if properties and key in properties:
                _default(item, properties[key])
            elif isinstance(additional, dict):
                _default(item, additional)
    elif isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return
        for index, item in enumerate(value):
            if item is None and "default" in items and not items.get("nullable"):
                value[index] = copy.deepcopy(items["default"])
            else:
                _default(item, items)


# ---------------------------------------------------------------------------------------- validation


def validate(obj: dict, schema: dict) -> list[FieldError]:
    """Every schema violation in ``obj``; empty when valid.

    Errors come in walk order (each object's fields as given, then its missing required fields), so
    the same object always yields the same list, where the Go server's map iteration would shuffle it.

    At the root, ``metadata`` is only checked to be an object: the store validates ObjectMeta itself,
    exactly as the API server validates it apart from the CRD schema.
    """
    errors: list[FieldError] = []
    if not isinstance(obj, dict):
        errors.append(_type_error("", "object", obj))
        return errors
    properties = schema.get("properties") or {}
    for key, item in obj.items():
        if key == "metadata":
            if not isinstance(item, dict):
                errors.append(_type_error("metadata", "object", item))
        elif key in properties:
            _check(item, properties[key], key, errors)
        elif key not in ("apiVersion", "kind") and not _allows_unknown(schema):
            errors.append(_unknown(key))
    _check_required(obj, schema, "", errors)
    return errors


def _check(value: Any, schema: dict, path: str, errors: list[FieldError]) -> None:
    """Validate one node; appends to ``errors`` (one shared list keeps the walk allocation-free)."""
    expected = _expected_type(schema)
    if value is None:
        if expected and not schema.get("nullable"):
            errors.append(_type_error(path, expected, value))
        return
    actual = _json_type(value)
    if expected and not _type_matches(expected, actual, value):
        errors.append(_type_error(path, expected, value))
        return
    if actual == "string":
        _check_string(value, schema, path, errors)
    elif actual in ("integer", "number"):
        _check_number(value, schema, path, errors)
    elif actual == "array":
        _check_array(value, schema, path, errors)
    elif actual == "object":
        _check_object(value, schema, path, errors)
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        errors.append(_not_supported(path, value, enum))


def _check_string(value: str, schema: dict, path: str, errors: list[FieldError]) -> None:
    # kube-openapi stops at the first failing string rule, in this order.
    max_length = schema.get("maxLength")
    if max_length is not None and len(value) > max_length:
        unit = "byte" if max_length == 1 else "bytes"
        errors.append(
            FieldError(path, "FieldValueTooLong", f"Too long: may not be more than {max_length} {unit}")
        )
        return
    min_length = schema.get("minLength")
    if min_length is not None and len(value) < min_length:
        errors.append(_invalid(path, value, f"should be at least {min_length} chars long"))
        return
    pattern = schema.get("pattern")
    if pattern is not None and not _compiled(pattern).search(value):
        errors.append(_invalid(path, value, f"should match '{pattern}'"))
        return
    if schema.get("format") == "date-time" and not _is_date_time(value):
        errors.append(_wrong_type(path, "date-time", _go(value)))


def _check_number(value: float, schema: dict, path: str, errors: list[FieldError]) -> None:
    minimum = schema.get("minimum")
    if minimum is not None:
        if schema.get("exclusiveMinimum") and value <= minimum:
            errors.append(_invalid(path, value, f"should be greater than {_go(minimum)}"))
        elif value < minimum:
            errors.append(_invalid(path, value, f"should be greater than or equal to {_go(minimum)}"))
    maximum = schema.get("maximum")
    if maximum is not None:
        if schema.get("exclusiveMaximum") and value >= maximum:
            errors.append(_invalid(path, value, f"should be less than {_go(maximum)}"))
        elif value > maximum:
            errors.append(_invalid(path, value, f"should be less than or equal to {_go(maximum)}"))


def _check_array(value: list, schema: dict, path: str, errors: list[FieldError]) -> None:
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _check(item, items, f"{path}[{index}]", errors)
    min_items = schema.get("minItems")
    if min_items is not None and len(value) < min_items:
        errors.append(_invalid(path, len(value), f"should have at least {min_items} items"))
    max_items = schema.get("maxItems")
    if max_items is not None and len(value) > max_items:
        errors.append(_too_many(path, len(value), max_items))
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        _check_unique(enumerate(value), path, errors)
    elif list_type == "map":
        _check_list_map(value, schema, path, errors)


def _check_unique(identities: Iterable[tuple[int, Any]], path: str, errors: list[FieldError]) -> None:
    """Each item (by index) whose identity an earlier item has is a duplicate (kept in a list: identities
    may be unhashable)."""
    seen: list[Any] = []
    for index, identity in identities:
        if identity in seen:
            errors.append(
                FieldError(f"{path}[{index}]", "FieldValueDuplicate", f"Duplicate value: {_go(identity)}")
            )
        else:
            seen.append(identity)


def _check_list_map(value: list, schema: dict, path: str, errors: list[FieldError]) -> None:
    """Items of a ``list-type: map`` are identified by their key fields; two with equal keys clash.

    A missing key field counts as its schema default, as the server compares keys after defaulting.
    """
    keys = schema.get("x-kubernetes-list-map-keys") or []
    key_schemas = (schema.get("items") or {}).get("properties") or {}
    identities = (
        (index, {k: item.get(k, key_schemas.get(k, {}).get("default")) for k in keys})
        for index, item in enumerate(value)
        if isinstance(item, dict)  # any other item is already reported by the items' type check
    )
    _check_unique(identities, path, errors)


def _check_object(value: dict, schema: dict, path: str, errors: list[FieldError]) -> None:
    max_properties = schema.get("maxProperties")
    if max_properties is not None and len(value) > max_properties:
        errors.append(_too_many(path, len(value), max_properties))
    min_properties = schema.get("minProperties")
    if min_properties is not None and len(value) < min_properties:
        errors.append(_invalid(path, len(value), f"should have at least {min_properties} properties"))
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    embedded = schema.get("x-kubernetes-embedded-resource")
    for key, item in value.items():
        child = f"{path}.{key}"
        if key in properties:
            _check(item, properties[key], child, errors)
        elif isinstance(additional, dict):
            _check(item, additional, child, errors)
        elif embedded and key in _EMBEDDED_KEYS:
            expected = "object" if key == "metadata" else "string"
            if not _type_matches(expected, _json_type(item), item):
                errors.append(_type_error(child, expected, item))
        elif not _allows_unknown(schema):
            errors.append(_unknown(child))
    _check_required(value, schema, path, errors)
    if embedded:
        # An embedded object must say what it is, like any object sent to the API server.
        for key in ("apiVersion", "kind"):
            if not value.get(key):
                errors.append(
                    FieldError(f"{path}.{key}", "FieldValueRequired", "Required value: must not be empty")
                )


def _check_required(value: dict, schema: dict, path: str, errors: list[FieldError]) -> None:
    for name in schema.get("required") or ():
        if name not in value:
            errors.append(
                FieldError(f"{path}.{name}" if path else name, "FieldValueRequired", "Required value")
            )


# ----------------------------------------------------------------------------------------- helpers


def _expected_type(schema: dict) -> str:
    """The type name kube-openapi checks against; int-or-string counts as ``integer,string``."""
    if schema.get("x-kubernetes-int-or-string"):
        return "integer,string"
    return schema.get("type", "")


_JSON_TYPES = (
    (str, "string"),
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (dict, "object"),
    (list, "array"),
)
"""Python type -> JSON type, in the order they are tried (a bool is an int to Python, not to JSON)."""


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def _type_matches(expected: str, actual: str, value: Any) -> bool:
    if expected == actual:
        return True
    if expected == "number":
        return actual == "integer"
    if expected == "integer":
        # JSON has one number type: 2.0 is an integer to the API server.
        return actual == "number" and math.isfinite(value) and float(value).is_integer()
    if expected == "integer,string":
        return actual in ("integer", "string") or _type_matches("integer", actual, value)
    return False


def _allows_unknown(schema: dict) -> bool:
    return (
        bool(schema.get("x-kubernetes-preserve-unknown-fields")) or schema.get("additionalProperties") is True
    )


def _type_error(path: str, expected: str, value: Any) -> FieldError:
    actual = "null" if value is None else _json_type(value)
    return _wrong_type(path, expected, f'"{actual}"')


def _wrong_type(path: str, expected: str, shown: str) -> FieldError:
    """A value not of the type (or format, e.g. ``date-time``) expected; ``shown``: how the message quotes it."""
    return FieldError(
        path,
        "FieldValueTypeInvalid",
        f"Invalid value: {shown}: {path} in body must be of type {expected}: {shown}",
    )


def _not_supported(path: str, value: Any, enum: list) -> FieldError:
    supported = ", ".join(json.dumps(v if isinstance(v, str) else _go(v)) for v in enum)
    return FieldError(
        path, "FieldValueNotSupported", f"Unsupported value: {_go(value)}: supported values: {supported}"
    )


def _invalid(path: str, value: Any, rule: str) -> FieldError:
    return FieldError(path, "FieldValueInvalid", f"Invalid value: {_go(value)}: {path} in body {rule}")


def _too_many(path: str, actual: int, maximum: int) -> FieldError:
    unit = "item" if maximum == 1 else "items"
    return FieldError(path, "FieldValueTooMany", f"Too many: {actual}: must have at most {maximum} {unit}")


def _unknown(path: str) -> FieldError:
    return FieldError(path, "FieldValueInvalid", f'unknown field "{path}"')


def _compiled(pattern: str) -> re.Pattern[str]:
    """A CRD pattern (Go RE2 syntax) as a Python regex, cached across calls.

    The patterns in CRDs read the same in both dialects except for ``$``: Go's matches only at the very
    end, Python's also before a final newline, so ``"2\\n"`` would pass a quantity pattern. Outside
    character classes ``$`` therefore becomes ``\\Z``. RE2 also takes a flag group after ``^`` (the
    AdmissionCheck CRD's ``^(?i)[a-z]...``), where Python wants global flags first: it moves to the front.

    >>> bool(_compiled("^(?i)[a-z]+$").search("MultiKueueConfig"))
    True
    """
    compiled = _patterns.get(pattern)
    if compiled is None:
        flags = re.match(r"\^(\(\?[a-zA-Z]+\))", pattern)
        source = f"{flags.group(1)}^{pattern[flags.end() :]}" if flags else pattern
        translated: list[str] = []
        in_class = False
        index = 0
        while index < len(source):
            char = source[index]
            if char == "\\":
                translated.append(source[index : index + 2])
                index += 2
                continue
            if in_class:
                in_class = char != "]"
            elif char == "[":
                in_class = True
            elif char == "$":
                char = r"\Z"
            translated.append(char)
            index += 1
        compiled = _patterns[pattern] = re.compile("".join(translated))
    return compiled


def _is_date_time(text: str) -> bool:
    """RFC 3339 with a zone, as the API server's ``date-time`` format checker accepts."""
    match = _DATE_TIME.match(text)
    if not match:
        return False
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    try:
        date(year, month, day)
    except ValueError:
        return False
    return hour <= 23 and minute <= 59 and second <= 59


def _go(value: Any) -> str:
    """A value as Go's field errors print it: strings quoted, numbers bare, the rest as JSON."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)
