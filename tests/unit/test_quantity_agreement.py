"""One quantity grammar (#28): decice_kube.quantity, the one parser the scheduler, the sim's
node agent, the spec and the interLink plugin share, reads a table of quantities as the
Kubernetes Python client does (kubernetes.utils.parse_quantity), in both of its readings
(counting and exact), and refuses what the API server's grammar refuses."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from kubernetes.utils import parse_quantity as client_parse

from decice.spec import SpecError, parse
from decice_kube.quantity import INT64_MAX, exact, parse_cpu, parse_int, parse_quantity

pytestmark = pytest.mark.unit

VALID = [
    "0", "1", "500m", "100n", "5u", "2k", "1M", "1G", "3T", "1P", "2E", "1Ki", "1.5Gi",
    "64Mi", "1e3", "1E3", "2e-3", "0.5", ".5", "1.", "+1", "7Ei", "12345678901", "0.1m",
    "1.000000001", "4e18", "9223372036854775807", "1e-9", "0e40", "-0",
]  # fmt: skip
# refused by the API server's grammar (and by decice); the Python client is looser and
# takes these, so they are the table's second half
CLIENT_ONLY = ["1e3Ki", "1K", " 1", "1 ", "1 Gi", "1_000", "Infinity", "NaN", "1E3M"]
INVALID = ["", "1x", "abc", "1Kim", "Gi", "1.2.3", "--1", "1e", "e3", "0x10", "1.5.Ki"]


@pytest.mark.parametrize("text", VALID)
def test_both_readings_give_the_python_clients_value(text: str) -> None:
    theirs = client_parse(text)
    assert parse_quantity(text) == theirs, text
    assert exact(text) == Fraction(theirs), text


def _up(value: Fraction) -> int:
    """Rounded up and saturated at int64, as Kubernetes counts."""
    return min(INT64_MAX, -((-value.numerator) // value.denominator))


def test_counts_round_up_as_kubernetes_does() -> None:
    for text in VALID:
        value = Fraction(client_parse(text))
        assert (parse_cpu(text), parse_int(text)) == (_up(value * 1000), _up(value)), text
    assert parse_cpu("0.1m") == 1 and parse_int("1.000000001") == 2 and parse_cpu("2E") == INT64_MAX


@pytest.mark.parametrize("text", CLIENT_ONLY)
def test_what_only_the_python_client_takes_is_refused(text: str) -> None:
    try:
        client_parse(text)
    except ValueError:  # pragma: no cover - a stricter client is no loss
        pytest.skip(f"this kubernetes client refuses {text!r} too")
    with pytest.raises(ValueError):
        parse_quantity(text)
    with pytest.raises(ValueError, match="is not a quantity"):
        exact(text)


@pytest.mark.parametrize("text", INVALID)
def test_both_readings_refuse_what_is_not_a_quantity(text: str) -> None:
    with pytest.raises(ValueError):
        client_parse(text)
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)
    with pytest.raises(ValueError, match="is not a quantity"):
        exact(text)


def test_the_readings_differ_only_where_they_say() -> None:
    """Counting saturates at int64 and keeps a sign; the exact reading refuses both."""
    assert parse_quantity("1e20") == Decimal(2**63 - 1)
    assert parse_quantity("-2m") == Decimal("-0.002")
    with pytest.raises(ValueError, match="out of range"):
        exact("1e20")
    with pytest.raises(ValueError, match="is negative"):
        exact("-2m")


def test_the_spec_takes_sim_capacities_in_the_same_grammar() -> None:
    head = "name: x\nsim:\n  nodes:\n    - name_prefix: w\n      count: 1\n      capacity: "
    parsed, _ = parse(head + "{cpu: 1E3, memory: 100n, pods: '110'}\n", "s.yaml")
    assert parsed.sim.nodes[0].capacity["cpu"] == "1E3"
    for bad in ("1e3Ki", "-4"):
        with pytest.raises(SpecError, match="is not a quantity"):
            parse(head + f"{{cpu: '{bad}', memory: 1Gi}}\n", "s.yaml")
