"""ObjectMeta validation (pure): the name, label and annotation rules the API server applies to every kind.

The label and qualified-name rules themselves live in ``kubesim.selectors``, which parses the same
syntax in selectors.
"""

from __future__ import annotations

import re

from kubesim.errors import cause
from kubesim.resources import ResourceType
from kubesim.selectors import (
    DNS1123_SUBDOMAIN,
    DNS1123_SUBDOMAIN_MSG,
    label_value_errors,
    qualified_name_errors,
)

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def _invalid_value(field: str, value: str, detail: str) -> dict:
    return cause(field, "FieldValueInvalid", f'Invalid value: "{value}": {detail}')


def _name_errors(rt: ResourceType, name: str) -> list[str]:
    """Namespaces are DNS-1123 labels; every other kind we serve is a DNS-1123 subdomain."""
    limit, pattern, message = (
        (63, _DNS1123_LABEL, DNS1123_LABEL_MSG)
        if rt.key == "namespaces"
        else (253, DNS1123_SUBDOMAIN, DNS1123_SUBDOMAIN_MSG)
    )
    if len(name) > limit:
        return [f"must be no more than {limit} characters"]
    return [] if pattern.match(name) else [message]


def _string_map_errors(field: str, values, *, labels: bool) -> list[dict]:
    """Label keys and values, or annotation keys (checked case-insensitively, as upstream)."""
    if not isinstance(values, dict):
        return [cause(field, "FieldValueTypeInvalid", "Invalid value: must be a map of strings")]
    causes = []
    for key, value in values.items():
        checked_key = key if labels else key.lower()
        causes += [_invalid_value(field, key, error) for error in qualified_name_errors(checked_key)]
        if not isinstance(value, str):
            causes.append(
                cause(f"{field}[{key}]", "FieldValueTypeInvalid", "Invalid value: must be a string")
            )
        elif labels:
            causes += [_invalid_value(field, value, error) for error in label_value_errors(value)]
    return causes


def metadata_errors(rt: ResourceType, meta: dict) -> list[dict]:
    """Name, label and annotation problems, as the API server reports them for every kind."""
    name = meta.get("name") or ""
    causes = [_invalid_value("metadata.name", name, error) for error in _name_errors(rt, name)]
    causes += _string_map_errors("metadata.labels", meta.get("labels") or {}, labels=True)
    causes += _string_map_errors("metadata.annotations", meta.get("annotations") or {}, labels=False)
    return causes
