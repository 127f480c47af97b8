from decimal import Decimal

import pytest

from decice_kube.quantity import INT64_MAX, parse_cpu, parse_int, parse_quantity, to_units

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
    ["", " ", "abc", "1 Gi", "1KI", "1kb", "1e", "Gi", "1.2.3", "--1", "0x10", "1e20\n", "inf"],
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


@pytest.mark.parametrize(
    "huge",
    [
        "9Ei",  # past int64 by a suffix
        "100e18",  # what the API server stores for "1e20"
        "1e19",
        "1e999",
        "1e20000000",  # valid for the API server: not evaluated
        "1e" + "9" * 5000,  # more digits than int() takes
        "9" * 5000,
        2**80,
        1e300,
    ],
)
def test_quantities_past_int64_saturate_instead_of_failing(huge):
    """A pod author can send any of these (finding 1 of the security round 2 issue): they
    count as the largest int64, which fits no node, and never raise."""
    assert parse_int(huge) == INT64_MAX
    assert parse_cpu(huge) == INT64_MAX
    assert parse_quantity(huge) == Decimal(INT64_MAX)


def test_tiny_and_zero_exponents_are_decided_without_evaluating_them():
    assert parse_int("1e-20000000") == 1  # a positive fraction rounds up to one unit
    assert parse_cpu("5e-99") == 1
    assert parse_int("0e99999999") == 0
    assert parse_int("1e-0") == 1 and parse_int("1e+0") == 1
    assert parse_int("-1e999") == -INT64_MAX


@pytest.mark.parametrize("junk", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_rejected(junk):
    with pytest.raises(ValueError, match="not a finite number"):
        parse_quantity(junk)
