"""Server-side Table output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`).

`kubectl get` asks the server to render rows, so without this it would print only NAME and AGE for every
kind. Columns follow the API server: a CRD's additionalPrinterColumns (JSONPath, `date` cells as a human
age), and hand-written columns for the built-in kinds the project uses. Pure functions over dicts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime

from kubesim.clock import parse_time

TABLE_MEDIA = "as=Table"

_NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
_AGE_PATH = ".metadata.creationTimestamp"


def wants_table(accept: str) -> bool:
    """Whether the Accept header asks for a meta.k8s.io Table (kubectl lists JSON as a fallback)."""
    for media in accept.split(","):
        params = {p.strip() for p in media.split(";")}
        if TABLE_MEDIA in params and "g=meta.k8s.io" in params:
            return True
    return False


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery duration.HumanDuration, which kubectl shows in AGE columns."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        return human_duration((now - parse_time(timestamp)).total_seconds())
    except ValueError:
        return "<unknown>"


_TOKEN = re.compile(
    r"\.(?P<field>[A-Za-z0-9_\-]+)"
    r"|\[(?P<index>-?\d+)\]"
    r"|\[\*\]"
    r"|\[\?\(@\.(?P<key>[A-Za-z0-9_\-.]+)\s*==\s*(?P<quote>['\"])(?P<value>.*?)(?P=quote)\)\]"
)


def jsonpath(obj: object, path: str) -> list:
    """Evaluate the JSONPath subset CRDs use in printer columns: `.a.b`, `[0]`, `[*]`, `[?(@.k=='v')]`.

    Returns every match (a filter can match several); an unsupported expression matches nothing rather
    than failing the whole listing, as a missing field would.
    """
    expression = path.strip()
    if expression.startswith("{") and expression.endswith("}"):
        expression = expression[1:-1]
    expression = expression.removeprefix("$")
    current = [obj]
    position = 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None:
            return []
        position = match.end()
        current = _step(current, match)
    return current


def _step(values: list, match: re.Match) -> list:
    results: list = []
    for value in values:
        if match.group("field") is not None:
            if isinstance(value, dict) and match.group("field") in value:
                results.append(value[match.group("field")])
        elif match.group("index") is not None:
            index = int(match.group("index"))
            if isinstance(value, list) and -len(value) <= index < len(value):
                results.append(value[index])
        elif match.group("key") is not None:
            if isinstance(value, list):
                results.extend(
                    item for item in value if _filter_matches(item, match.group("key"), match.group("value"))
                )
        elif isinstance(value, list):
            results.extend(value)
        elif isinstance(value, dict):
            results.extend(value.values())
    return results


def _filter_matches(item: object, key: str, expected: str) -> bool:
    found = jsonpath(item, "." + key)
    return bool(found) and str(found[0]) == expected


def _format_cell(values: list, column_type: str, now: datetime):
    if not values:
        return "<none>" if column_type == "string" else None
    value = values[0] if len(values) == 1 else ",".join(str(v) for v in values)
    if column_type == "date":
        return age(value if isinstance(value, str) else None, now)
    if column_type == "integer" and isinstance(value, bool | int):
        return int(value)
    if column_type == "number" and isinstance(value, int | float):
        return value
    if column_type == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


# ----- built-in kinds: computed columns, as kubectl's printers do upstream -----

Column = tuple[dict, Callable[[dict, datetime], object]]


def _col(name: str, description: str, kind: str = "string", priority: int = 0) -> dict:
    return {"name": name, "type": kind, "format": "", "description": description, "priority": priority}


def _creation_age(obj: dict, now: datetime) -> str:
    return age(obj.get("metadata", {}).get("creationTimestamp"), now)


_AGE: Column = (
    _col("Age", "CreationTimestamp is a timestamp representing the server time..."),
    _creation_age,
)


def _pod_ready(pod: dict, _now: datetime) -> str:
    containers = pod.get("spec", {}).get("containers", [])
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(containers)}"


def _pod_status(pod: dict, _now: datetime) -> str:
    status = pod.get("status", {})
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for container in status.get("containerStatuses", []):
        state = container.get("state", {})
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason") and reason not in ("Succeeded", "Failed"):
            reason = state["terminated"]["reason"]
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_restarts(pod: dict, _now: datetime) -> int:
    return sum(int(s.get("restartCount", 0)) for s in pod.get("status", {}).get("containerStatuses", []))


def _job_status(job: dict, _now: datetime) -> str:
    conditions = {c.get("type"): c.get("status") for c in job.get("status", {}).get("conditions", []) or []}
    for kind in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet"):
        if conditions.get(kind) == "True":
            return kind
    if conditions.get("Suspended") == "True" or job.get("spec", {}).get("suspend"):
        return "Suspended"
    return "Running"


def _job_completions(job: dict, _now: datetime) -> str:
    completions = job.get("spec", {}).get("completions")
    succeeded = job.get("status", {}).get("succeeded", 0)
    return f"{succeeded}/{completions if completions is not None else 1}"


def _job_duration(job: dict, now: datetime) -> str:
    status = job.get("status", {})
    if not status.get("startTime"):
        return ""
    end = parse_time(status["completionTime"]) if status.get("completionTime") else now
    return human_duration((end - parse_time(status["startTime"])).total_seconds())


def _namespace_status(namespace: dict, _now: datetime) -> str:
    return namespace.get("status", {}).get("phase", "Active")


def _event_last_seen(event: dict, now: datetime) -> str:
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
    return age(stamp or event.get("metadata", {}).get("creationTimestamp"), now)


def _event_object(event: dict, _now: datetime) -> str:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


BUILTIN_COLUMNS: dict[str, list[Column]] = {
    "pods": [
        (_col("Ready", "The aggregate readiness state of this pod for accepting traffic."), _pod_ready),
        (_col("Status", "The aggregate status of the containers in this pod."), _pod_status),
        (
            _col("Restarts", "The number of times the containers in this pod have been restarted.", "string"),
            lambda pod, now: str(_pod_restarts(pod, now)),
        ),
        _AGE,
    ],
    "jobs.batch": [
        (_col("Status", "Status of the job."), _job_status),
        (
            _col(
                "Completions", "The desired number of successfully finished pods the job should be run with."
            ),
            _job_completions,
        ),
        (_col("Duration", "Time required to complete the job."), _job_duration),
        _AGE,
    ],
    "namespaces": [(_col("Status", "The status of the namespace"), _namespace_status), _AGE],
    "events": [
        (_col("Last Seen", "Time when last event occurred"), _event_last_seen),
        (_col("Type", "Type of this event."), lambda e, _n: e.get("type", "")),
        (_col("Reason", "Reason why this event was generated."), lambda e, _n: e.get("reason", "")),
        (_col("Object", "The object that this event is about."), _event_object),
        (
            _col("Message", "A human-readable description of the status of this operation."),
            lambda e, _n: e.get("message") or e.get("note", ""),
        ),
    ],
}


def printer_columns_for(key: str, crd_columns: list[dict]) -> list[Column]:
    """Columns after Name: hand-written for built-ins, else the CRD's, with Age added if it lacks one."""
    if key in BUILTIN_COLUMNS:
        return BUILTIN_COLUMNS[key]
    columns: list[Column] = []
    has_age = False
    for column in crd_columns:
        path = column.get("jsonPath", "")
        column_type = column.get("type", "string")
        has_age = has_age or path.strip() == _AGE_PATH
        definition = {
            "name": column.get("name", path),
            "type": column_type,
            "format": column.get("format", ""),
            "description": column.get("description", ""),
            "priority": column.get("priority", 0),
        }
        columns.append((definition, _jsonpath_cell(path, column_type)))
    if not has_age:
        columns.append(_AGE)
    return columns


def _jsonpath_cell(path: str, column_type: str) -> Callable[[dict, datetime], object]:
    def cell(obj: dict, now: datetime):
        return _format_cell(jsonpath(obj, path), column_type, now)

    return cell


def row_object(obj: dict, include_object: str) -> dict | None:
    """What each row carries: upstream defaults to PartialObjectMetadata (kubectl needs the namespace)."""
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def build_table(
    key: str,
    crd_columns: list[dict],
    objects: list[dict],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    now: datetime | None = None,
) -> dict:
    moment = now or datetime.now(UTC)
    columns = printer_columns_for(key, crd_columns)
    rows = []
    for obj in objects:
        cells = [obj.get("metadata", {}).get("name", "")]
        cells.extend(render(obj, moment) for _definition, render in columns)
        row: dict = {"cells": cells}
        carried = row_object(obj, include_object)
        if carried is not None:
            row["object"] = carried
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [_NAME_COLUMN] + [definition for definition, _render in columns],
        "rows": rows,
    }
