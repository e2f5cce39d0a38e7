"""The plugin and kubesim read and print resource quantities alike.

Each keeps its own quantity module: the plugin's must not import ``kubernetes`` while Airflow parses DAGs,
and kubesim imports nothing from the plugin. This table keeps the two from drifting apart: both parse every
row to the same exact value and print it in apimachinery's canonical form (``binary`` is the format of a
quantity written with Ki, Mi, ...).
"""

from decimal import Decimal

import pytest
from kueue_ray import quantity as plugin_quantity

from kubesim import quantity as kubesim_quantity

# (as written, binary format, canonical form)
TABLE = [
    ("0", False, "0"),
    ("1", False, "1"),
    ("100m", False, "100m"),
    ("250m", False, "250m"),
    ("1500m", False, "1500m"),
    ("1.5", False, "1500m"),
    ("2.5", False, "2500m"),
    ("0.001", False, "1m"),
    ("100u", False, "100u"),
    ("1n", False, "1n"),
    ("10", False, "10"),
    ("12345", False, "12345"),
    ("1000", False, "1k"),
    ("1e3", False, "1k"),
    ("3e6", False, "3M"),
    ("129e6", False, "129M"),
    ("100M", False, "100M"),
    ("8G", False, "8G"),
    ("7812500Ki", False, "8G"),
    ("1E", False, "1E"),
    ("1024", False, "1024"),
    ("200Mi", False, "209715200"),
    ("1024", True, "1Ki"),
    ("1536", True, "1536"),
    ("4096", True, "4Ki"),
    ("1Mi", True, "1Mi"),
    ("64Mi", True, "64Mi"),
    ("123Mi", True, "123Mi"),
    ("200Mi", True, "200Mi"),
    ("512Mi", True, "512Mi"),
    ("1.5Gi", True, "1536Mi"),
    ("8Gi", True, "8Gi"),
    ("16Gi", True, "16Gi"),
    ("1Ti", True, "1Ti"),
    ("2Ei", True, "2Ei"),
    ("8G", True, "7812500Ki"),
    ("100M", True, "100000000"),
    ("500m", True, "500m"),
    ("1.25", True, "1250m"),
]


@pytest.mark.parametrize(("written", "binary", "canonical"), TABLE)
def test_both_parse_and_print_a_quantity_alike(written: str, binary: bool, canonical: str) -> None:
    exact = kubesim_quantity.parse_exact(written)
    assert plugin_quantity.parse_quantity(written) == exact
    assert kubesim_quantity.format_quantity(exact, binary) == canonical
    assert plugin_quantity.format_quantity(exact, binary=binary) == canonical


def test_a_binary_quantity_below_1024_falls_back_to_decimal_suffixes() -> None:
    assert kubesim_quantity.format_quantity(Decimal(1000), True) == "1k"
    assert plugin_quantity.format_quantity(Decimal(1000), binary=True) == "1k"
