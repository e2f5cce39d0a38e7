"""Kubernetes resource quantities ("500m", "2", "8G", "200Mi", "1.5", "1e3") as exact Decimals.

Quota decisions compare sums such as "8G + 200Mi" against a ClusterQueue's nominalQuota; floats would
turn an exact fit into a spurious shortfall, so everything here is Decimal. Formatting follows the
API server's canonical form (the smallest exact suffix, "2500m" for 2.5) so totals read like the
values Kueue itself prints in Workload and ClusterQueue status.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity exactly as the API server accepts it; raise QuantityError otherwise."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(
            f"{value!r} is not a quantity; use a number with an optional suffix, e.g. 500m, 2, 8G, 200Mi"
        )
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{value!r} is not a quantity") from exc
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number.scaleb(int(suffix[1:]))
    return number * _DECIMAL[suffix]


def format_quantity(value: Decimal | int, *, binary: bool | None = None) -> str:
    """Canonical Kubernetes form of a quantity.

    Integers use the largest suffix that keeps them exact (8000000000 -> "8G", 209715200 -> "200Mi");
    fractions become milli/micro/nano units ("2500m"), rounded up to a nanounit as the API server does.
    ``binary=None`` picks the shorter of the decimal and binary spellings. ``binary=True`` (the format of a
    quantity written with Ki, Mi, ...) prints an integer below 1024 with decimal suffixes ("1000" -> "1k"),
    because no binary suffix fits it and the API server prints it that way.
    """
    value = Decimal(value)
    if value == value.to_integral_value():
        integer = int(value)
        candidates = []
        if binary in (None, False):
            candidates.append(_integer_with_suffix(integer, _DECIMAL_UP))
        if binary is True and abs(integer) < 1024:
            candidates.append(_integer_with_suffix(integer, _DECIMAL_UP))
        elif binary in (None, True):
            candidates.append(_integer_with_suffix(integer, _BINARY_UP))
        return min(candidates, key=len)
    for suffix, scale in (("m", Decimal("1e3")), ("u", Decimal("1e6"))):
        scaled = value * scale
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int((value * Decimal('1e9')).to_integral_value(rounding=ROUND_CEILING))}n"


_DECIMAL_UP = [("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)]
_BINARY_UP = sorted(_BINARY.items(), key=lambda item: -item[1])


def _integer_with_suffix(integer: int, suffixes: list[tuple[str, int]]) -> str:
    if integer == 0:
        return "0"
    for suffix, factor in suffixes:
        if integer % factor == 0:
            return f"{integer // factor}{suffix}"
    return str(integer)


def human_quantity(value: Decimal | int) -> str:
    """Short spelling for messages: plain decimals below 1000 ("2.5"), the canonical form when it is
    short ("8G", "200Mi"), otherwise an approximation marked with "~" ("~8.21G" for 8G + 200Mi)."""
    value = Decimal(value)
    if abs(value) < 1000:
        return format(value.normalize(), "f")
    exact = format_quantity(value)
    if len(exact.rstrip("kMGTPEi")) <= 4:
        return exact
    suffix, factor = next((s, f) for s, f in _DECIMAL_UP if abs(value) >= f)
    approx = (value / factor).quantize(Decimal("0.01")).normalize()
    return f"~{approx:f}{suffix}"


_BINARY_UNITS = sorted(_BINARY.items(), key=lambda item: -item[1])
BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage"})
"""Resources counted in bytes: people read them in binary units, as ``kubectl`` users write them."""


def readable_bytes(amount: Decimal | int) -> str:
    """A byte amount in the largest binary unit it reaches, exact when it is whole in that unit ("8Gi",
    "200Mi"), else rounded to two decimals ("7.45Gi" for 8G; "7.65Gi" for 8G + 200Mi). The one spelling
    of bytes in every log line and message, whatever unit the manifest or Kueue used."""
    amount = Decimal(amount)
    for suffix, factor in _BINARY_UNITS:
        if amount >= factor:
            scaled = amount / factor
            if scaled == scaled.to_integral_value():
                return f"{int(scaled)}{suffix}"
            return f"{scaled.quantize(Decimal('0.01')).normalize():f}{suffix}"
    return f"{amount:f}"


def readable_amount(resource: str, amount: str | int | Decimal) -> str:
    """One resource's amount as people read it: bytes in binary units ("7.65Gi"), anything else as a plain
    number ("2.5" CPUs, "1" GPU) or, when large, its short form (``human_quantity``)."""
    value = parse_quantity(amount)
    return readable_bytes(value) if resource in BYTE_RESOURCES else human_quantity(value)


def describe_resources(resources: Mapping[str, str | int | Decimal]) -> str:
    """{"cpu": "2500m", "memory": "8017300Ki", "nvidia.com/gpu": "1"} -> "2.5 CPU, 7.65Gi memory,
    1 nvidia.com/gpu": a request in words, CPU and memory first."""
    order = ["cpu", "memory", *sorted(name for name in resources if name not in ("cpu", "memory"))]
    return ", ".join(
        f"{readable_amount(name, resources[name])} {'CPU' if name == 'cpu' else name}"
        for name in order
        if name in resources
    )


def parse_resources(resources: Mapping[str, str | int | float | Decimal] | None) -> dict[str, Decimal]:
    """{"cpu": "500m", "memory": "1Gi"} -> {"cpu": Decimal("0.5"), "memory": Decimal(1073741824)}."""
    return {name: parse_quantity(amount) for name, amount in (resources or {}).items()}


def add_resources(*items: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Per-resource sum of several resource dicts (a missing resource counts as zero)."""
    total: dict[str, Decimal] = {}
    for item in items:
        for name, amount in item.items():
            total[name] = total.get(name, Decimal(0)) + amount
    return total


def max_resources(*items: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Per-resource maximum, the way Kubernetes combines init containers with the main containers."""
    result: dict[str, Decimal] = {}
    for item in items:
        for name, amount in item.items():
            result[name] = max(result.get(name, amount), amount)
    return result


def scale_resources(resources: Mapping[str, Decimal], factor: int | Decimal) -> dict[str, Decimal]:
    """Every amount multiplied by ``factor`` (pod count x per-pod request)."""
    return {name: amount * factor for name, amount in resources.items()}


def format_resources(resources: Mapping[str, Decimal], *, order: Iterable[str] = ()) -> dict[str, str]:
    """Resource dict with canonical quantity strings; ``order`` puts well-known names first."""
    preferred = [name for name in order if name in resources]
    rest = sorted(name for name in resources if name not in preferred)
    return {name: format_quantity(resources[name]) for name in [*preferred, *rest]}
