"""The lab's choices are menus of names, read the same from the app, the CLI and the API: a name (or its
value) gives the runner's value, anything else a message naming the choices; no label is a number code;
the INT4 variant's name says per channel where a group is at least a row."""

from __future__ import annotations

import pytest

from explorer.errors import PromptError
from explorer.lab.params import read_params
from explorer.lab.quant import variant_name
from explorer.lab.table import LAB


def test_every_menu_reads_its_names_and_refuses_others():
    bits = next(p for p in LAB["quant"].params if p.name == "bits")
    assert bits.names == ("both", "int8", "int4")
    assert [bits.read(name) for name in ("both", "int8", "INT4", None)] == [0, 8, 4, 0]
    assert bits.read(4.0) == 4  # the value itself, as a number
    with pytest.raises(PromptError, match="Weight format must be one of both, int8, int4, not 'int2'"):
        bits.read("int2")
    with pytest.raises(PromptError, match="must be one of"):
        bits.read(3)
    assert read_params(LAB["kvquant"].params, {"kv_format": "fp8-e4m3"})["kv_format"] == 2
    assert read_params(LAB["evict"].params, {"positions": "renumbered"})["positions"] == 1


def test_no_label_is_a_number_code():
    for experiment in LAB.values():
        for param in experiment.params:
            assert ": both" not in param.label and "1: INT8" not in param.label, param.label
        assert sum(bool(param.choices) for param in experiment.params) <= 1  # the app has one menu


def test_a_group_as_long_as_a_row_is_named_per_channel():
    assert variant_name(4, 32, (576, 1536)) == "int4 g32"
    assert variant_name(4, 4096, (576, 1536)) == "int4 per channel"
    assert variant_name(4, 1000, (576, 1536)) == "int4 g1000, some rows per channel"
    assert variant_name(8, 32, (576,)) == "int8 per channel"
