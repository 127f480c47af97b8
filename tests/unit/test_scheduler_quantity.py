from decimal import Decimal

import pytest

from decice_scheduler.quantity import parse_cpu, parse_int, parse_quantity, to_units

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("500m", 500),
        ("1", 1000),
        ("0.5", 500),
        (".25", 250),
        ("2.", 2000),
        ("1e3", 1_000_000),
        ("1E-3", 1),
        ("0.1m", 1),  # rounds up like Kubernetes
        ("100u", 1),
        ("250000000n", 250),
        ("1k", 1_000_000),
        (2, 2000),
        (0.5, 500),
    ],
)
def test_cpu_millicores(text, millis):
    assert parse_cpu(text) == millis


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("128974848", 128974848),
        ("129e6", 129_000_000),
        ("129M", 129_000_000),
        ("123Mi", 123 * 2**20),
        ("1Ki", 1024),
        ("1.5Gi", 3 * 2**29),
        ("1k", 1000),
        ("1G", 10**9),
        ("2Ti", 2 * 2**40),
        ("1Pi", 2**50),
        ("1P", 10**15),
        ("1Ei", 2**60),
        ("1E", 10**18),
        ("0.5", 1),
        ("+4", 4),
        ("8", 8),
    ],
)
def test_integer_units(text, units):
    assert parse_int(text) == units


def test_exact_value_and_sign():
    assert parse_quantity("1.5Ki") == Decimal(1536)
    assert parse_quantity("-2m") == Decimal("-0.002")


@pytest.mark.parametrize(
    "junk",
    ["", " ", "abc", "1 Gi", "1KI", "1kb", "1e", "Gi", "1.2.3", "--1", "1e999", "9Ei", "0x10"],
)
def test_junk_is_rejected(junk):
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_int(junk)
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_cpu(junk)


@pytest.mark.parametrize("junk", [None, True, [1]])
def test_non_string_junk_is_rejected(junk):
    with pytest.raises(ValueError):
        parse_quantity(junk)


def test_to_units_dispatches_on_resource_name():
    assert to_units("cpu", "2") == 2000
    assert to_units("memory", "2") == 2
    assert to_units("nvidia.com/gpu", "2") == 2
