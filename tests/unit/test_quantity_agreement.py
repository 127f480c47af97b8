"""One quantity grammar (#28): the interLink plugin's stdlib-only parser, decice-scheduler's
(which the sim's node agent and the spec's sim capacities use too) and Kubernetes agree
on what a quantity is and on its value."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from decice.interlink import quantity as plugin
from decice.spec import SpecError, parse
from decice_scheduler.quantity import parse_quantity

pytestmark = pytest.mark.unit

VALID = [
    "0", "1", "500m", "100n", "5u", "2k", "1M", "1G", "3T", "1P", "2E", "1Ki", "1.5Gi",
    "64Mi", "1e3", "1E3", "2e-3", "0.5", ".5", "1.", "+1", "7Ei", "12345678901",
]  # fmt: skip
INVALID = ["", "1x", "abc", "1e3Ki", "1Kim", "Gi", "1 Gi", "1.2.3", "--1", "1e", "e3", "0x10"]


@pytest.mark.parametrize("text", VALID)
def test_both_parsers_take_a_quantity_with_the_same_value(text: str) -> None:
    ours, theirs = plugin.parse(text), parse_quantity(text)
    assert ours == Fraction(Decimal(theirs)), (text, ours, theirs)


@pytest.mark.parametrize("text", INVALID)
def test_both_parsers_refuse_what_is_not_one(text: str) -> None:
    with pytest.raises(ValueError, match="is not a quantity"):
        plugin.parse(text)
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_the_spec_takes_sim_capacities_in_the_same_grammar() -> None:
    head = "name: x\nsim:\n  nodes:\n    - name_prefix: w\n      count: 1\n      capacity: "
    parsed, _ = parse(head + "{cpu: 1E3, memory: 100n, pods: '110'}\n", "s.yaml")
    assert parsed.sim.nodes[0].capacity["cpu"] == "1E3"
    for bad in ("1e3Ki", "-4"):
        with pytest.raises(SpecError, match="is not a quantity"):
            parse(head + f"{{cpu: '{bad}', memory: 1Gi}}\n", "s.yaml")
