"""The stop catalogue: one row for every stop any family's stop list holds, each kind one the saved-run
format accepts and the figures colour, every tensor stop with a shape rule, and the stops that move
data with a cost rule."""

from __future__ import annotations

from typing import get_args

import pytest

from explorer.families import FAMILIES
from explorer.figures.theme import KIND_COLOURS
from explorer.run_schema_steps import OP_KINDS
from explorer.stop_catalogue import CATALOGUE
from explorer.stop_names import StopKind, parse_stop_name
from explorer.stops import stop_table

CPU_STOPS = {"tokenize", "sample", "detokenize"}  # no tensor on the device: neither shapes nor costs
NO_COST = CPU_STOPS | {"attn.split_heads", "attn.merge_heads", "attn.gqa_expand"}  # views and a broadcast


def every_listed_stop() -> set[str]:
    return {parse_stop_name(name)[1] for family in FAMILIES.values() if family.traced
            for moe in {False, family.moe} for stage in ("prefill", "decode")
            for name, _, _ in stop_table(family, 2, stage, (moe, False) if family.moe else ())}


def test_every_listed_stop_has_one_row_and_every_row_is_listed():
    assert every_listed_stop() == set(CATALOGUE)
    assert all(name == row.name for name, row in CATALOGUE.items())


def test_the_kinds_are_one_vocabulary():
    kinds = set(get_args(StopKind))
    assert {row.kind for row in CATALOGUE.values()} == kinds
    assert OP_KINDS == kinds
    assert kinds <= KIND_COLOURS.keys()


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_each_row_predicts_and_costs_what_it_computes(name):
    row = CATALOGUE[name]
    assert (row.shapes is None) == (name in CPU_STOPS)
    assert (row.cost is None) == (name in NO_COST)
    assert row.formula and row.symbols
