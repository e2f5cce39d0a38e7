"""Label and field selectors, parsed and matched the way the API server does (pure functions).

Selectors arrive as query strings (``?labelSelector=app=x,tier notin (a,b)``) and, for Kueue's
``namespaceSelector``, as ``metav1.LabelSelector`` dicts. A malformed selector is the client's fault,
so parsing raises a 400 BadRequest ``ApiError`` with a message that names the offending part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubesim.errors import bad_request

_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def qualified_name_errors(key: str) -> list[str]:
    """Problems with a label or annotation key (``[prefix/]name``), worded as upstream."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return ["prefix part must be non-empty"]
    errors = []
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _NAME_PART.match(name):
        errors.append(NAME_PART_MSG)
    if prefix:
        if len(prefix) > 253:
            errors.append("prefix part must be no more than 253 characters")
        elif not DNS1123_SUBDOMAIN.match(prefix):
            errors.append("prefix part " + DNS1123_SUBDOMAIN_MSG)
    return errors


def label_value_errors(value: str) -> list[str]:
    if len(value) > 63:
        return ["must be no more than 63 characters"]
    if not _LABEL_VALUE.match(value):
        return [LABEL_VALUE_MSG]
    return []


# --- label selectors -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict) -> bool:
        op = self.operator
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        value = labels.get(self.key)
        if op in ("=", "in"):
            return value is not None and value in self.values
        # "!=" and "notin" also match objects that do not carry the label at all, as upstream.
        return value is None or value not in self.values


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: dict | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``in (...)`` value lists."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise bad_request(f"unable to parse requirement: unexpected ')' in selector {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise bad_request(f"unable to parse requirement: unclosed '(' in selector {text!r}")
    parts.append(text[start:])
    return parts


_SET_REQ = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ_REQ = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)\s*$")
_EXISTS_REQ = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)\s*$")


def _checked_key(key: str) -> str:
    errors = qualified_name_errors(key)
    if errors:
        raise bad_request(f'unable to parse requirement: Invalid value: "{key}": {"; ".join(errors)}')
    return key


def _checked_value(value: str) -> str:
    errors = label_value_errors(value)
    if errors:
        raise bad_request(f'unable to parse requirement: Invalid value: "{value}": {"; ".join(errors)}')
    return value


def _parse_requirement(text: str) -> Requirement:
    if m := _SET_REQ.match(text):
        values = [v.strip() for v in m["values"].split(",")]
        if values == [""]:
            raise bad_request(
                f"unable to parse requirement: {text.strip()!r}: values for 'in'/'notin' must be non-empty"
            )
        return Requirement(_checked_key(m["key"]), m["op"], tuple(_checked_value(v) for v in values))
    if m := _EQ_REQ.match(text):
        op = "=" if m["op"] == "==" else m["op"]
        return Requirement(_checked_key(m["key"]), op, (_checked_value(m["value"]),))
    if m := _EXISTS_REQ.match(text):
        return Requirement(_checked_key(m["key"]), "!" if m["neg"] else "exists")
    raise bad_request(
        f"unable to parse requirement: {text.strip()!r} is not a valid label selector requirement"
    )


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``a=b,c!=d,e in (f,g),h notin (i),j,!k``; an empty string selects everything."""
    if text is None or not text.strip():
        return LabelSelector(())
    parts = _split_top_level(text)
    if any(not p.strip() for p in parts):
        raise bad_request(f"unable to parse requirement: empty requirement in selector {text!r}")
    return LabelSelector(tuple(_parse_requirement(p) for p in parts))


_OBJ_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def match_label_selector_obj(selector: dict | None, labels: dict | None) -> bool:
    """Match a ``metav1.LabelSelector`` dict (matchLabels + matchExpressions).

    As upstream, a nil selector matches nothing and an empty one ``{}`` matches everything.
    """
    if selector is None:
        return False
    return label_selector_from_obj(selector).matches(labels)


def label_selector_from_obj(selector: dict) -> LabelSelector:
    requirements = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        op = _OBJ_OPERATORS.get(expr.get("operator", ""))
        if op is None:
            raise bad_request(f"{expr.get('operator')!r} is not a valid label selector operator")
        values = tuple(expr.get("values") or ())
        if op in ("in", "notin") and not values:
            raise bad_request(
                "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
            )
        if op in ("exists", "!") and values:
            raise bad_request("values: Invalid value: values set must be empty for exists and does not exist")
        requirements.append(Requirement(expr.get("key", ""), op, values))
    return LabelSelector(tuple(requirements))


# --- field selectors -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    path: tuple[str, ...]
    operator: str  # "=" or "!="
    value: str

    def matches(self, obj: dict) -> bool:
        equal = field_value(obj, self.path) == self.value
        return equal if self.operator == "=" else not equal


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...]

    def matches(self, obj: dict) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def field_value(obj: dict, path: tuple[str, ...]) -> str:
    """The selector-comparable string form of a dotted field: missing is "", booleans are lowercase."""
    value: object = obj
    for part in path:
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
        if value is None:
            return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return ""
    return str(value)


def _split_unescaped(text: str, sep: str) -> list[str]:
    """Split on ``sep`` not preceded by a backslash (field selector values may escape ``\\,`` ``\\=``)."""
    parts, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise bad_request(f"invalid field selector: invalid escape sequence in {value!r}")
            out.append(value[i + 1])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _find_operator(text: str) -> tuple[int, str] | None:
    """Position and spelling of the first unescaped ``!=``, ``==`` or ``=``."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if text.startswith(op, i):
                return i, op
        i += 1
    return None


def _parse_field_requirement(text: str) -> FieldRequirement:
    found = _find_operator(text)
    if found is None:
        raise bad_request(f"invalid selector: '{text}'; can't understand '{text}'")
    at, op = found
    path, value = text[:at].strip(), text[at + len(op) :].strip()
    if not path or any(not p for p in path.split(".")):
        raise bad_request(f"invalid selector: '{text}'; field label must be a dotted path")
    if _find_operator(value) is not None:
        raise bad_request(f"invalid selector: '{text}'; unescaped operator in value")
    return FieldRequirement(tuple(path.split(".")), "!=" if op == "!=" else "=", _unescape(value))


def parse_field_selector(text: str | None) -> FieldSelector:
    """Parse ``metadata.name=x,involvedObject.uid!=y``; any dotted path is accepted."""
    if text is None or not text.strip():
        return FieldSelector(())
    parts = _split_unescaped(text, ",")
    if any(not p.strip() for p in parts):
        raise bad_request(f"invalid selector: {text!r}: empty requirement")
    return FieldSelector(tuple(_parse_field_requirement(p) for p in parts))
