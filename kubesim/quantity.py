"""Resource quantities, parsed and printed as apimachinery does, for every controller of the emulator.

KubeRay sums pod resources as exact decimals and prints the sums (``format_quantity``); Kueue accounts in
ints (below). Both print through the same canonical formatting, so a quantity reads the same wherever
kubesim shows it.

Kueue's internal units:

Kueue does its quota arithmetic on int64 values: ``cpu`` in millicores (``MilliValue``), every
other resource in whole units (``Value``), both rounded up like apimachinery does. Messages and
``status.admission.podSetAssignments[].resourceUsage`` turn the ints back into quantities:
cpu as a milli DecimalSI quantity, memory / ephemeral-storage / hugepages as BinarySI, everything
else as DecimalSI. The string form then follows apimachinery's canonical formatting, which is why
a memory request of ``8G`` is reported as ``7812500Ki`` and one core as ``1`` (not ``1000m``).
"""

from __future__ import annotations

import math
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
_NANO = Decimal(10) ** 9  # the finest DecimalSI suffix, n: finer digits are rounded away


def is_milli(resource: str) -> bool:
    """Whether Kueue accounts this resource in thousandths (only ``cpu``)."""
    return resource == "cpu"


def is_binary(resource: str) -> bool:
    """Whether Kueue prints this resource with binary suffixes (Ki, Mi, ...)."""
    return resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")


def parse_exact(quantity: str | int | float) -> Decimal:
    """A Kubernetes quantity as an exact decimal (for sums that are printed, not accounted)."""
    return Decimal(str(parse_quantity(quantity)))


def to_canonical(resource: str, quantity: str | int | float) -> int:
    """Parse a Kubernetes quantity into Kueue's int unit for ``resource``, rounding up."""
    value = parse_quantity(quantity)
    if is_milli(resource):
        value *= 1000
    return math.ceil(value)


def to_string(resource: str, value: int) -> str:
    """Format a canonical int as Kueue does (``ResourceFormatter.ResourceQuantityString``)."""
    if is_milli(resource):
        return _decimal_si(value, -3)
    if is_binary(resource) and not -1024 < value < 1024:
        return _binary_si(value)
    return _decimal_si(value, 0)


def format_quantity(value: Decimal, binary: bool) -> str:
    """apimachinery's canonical string for an exact quantity: BinarySI when ``binary`` (the format of a
    quantity written with ``Ki``, ``Mi``, ...) and the value is a whole multiple of 1024, else DecimalSI."""
    if value == 0:
        return "0"
    if binary and value == value.to_integral_value() and abs(value) >= 1024:
        return _binary_si(int(value))
    return _decimal_si(int((value * _NANO).to_integral_value()), -9)


def _strip_factors(value: int, base: int) -> tuple[int, int]:
    """Divide ``base`` out of ``value`` as often as it goes evenly; return (rest, times)."""
    negative = value < 0
    rest = -value if negative else value
    times = 0
    while rest >= base and rest % base == 0:
        rest //= base
        times += 1
    return (-rest if negative else rest), times


def _decimal_si(value: int, scale: int) -> str:
    """apimachinery's DecimalSI canonical form of ``value * 10**scale``: exponent a multiple of 3."""
    if value == 0:
        return "0"
    mantissa, times = _strip_factors(value, 10)
    exponent = scale + times
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    if exponent > 18:  # beyond E there is no suffix: the rest stays in the mantissa
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"  # scale >= -9, so exponent >= -9


def _binary_si(value: int) -> str:
    """apimachinery's BinarySI canonical form: the largest power of 1024 that divides evenly."""
    mantissa, times = _strip_factors(value, 1024)
    if times > 6:  # beyond Ei there is no suffix: the rest stays in the mantissa
        mantissa *= 1024 ** (times - 6)
        times = 6
    return f"{mantissa}{_BINARY_SUFFIXES[times]}"
