"""The run's JSON writer (`explorer.trace.dumps`, orjson): each float32 as its shortest text, -inf as
null, and a saved run that reads back bit for bit."""

from __future__ import annotations

import json

import numpy as np
from figure_traces import hand_run

from explorer.saved import load_run, save_run
from explorer.trace import dumps


def float32_values(count: int = 20_000, seed: int = 0) -> np.ndarray:
    """Random float32 over the whole exponent range, with the edge cases: subnormals, the largest
    finite value, -0.0, 0.1 (not exact in binary)."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([1e-45, -1e-45, 1.17549435e-38, 3.4028235e38, -3.4028235e38, 0.0, -0.0, 0.1, 1.0, 0.3],
                     dtype=np.float32)
    values = np.concatenate([bits, edges])
    return values[np.isfinite(values)]


def significant_digits(text: str) -> int:
    mantissa = text.lower().lstrip("-").split("e")[0].replace(".", "")
    return len(mantissa.strip("0")) or 1


def test_each_float32_is_written_as_its_shortest_text_and_reads_back_bit_for_bit():
    values = float32_values()
    texts = dumps(values).decode()[1:-1].split(",")
    read = np.array(json.loads(dumps(values)), dtype=np.float32)
    np.testing.assert_array_equal(read.view(np.uint32), values.view(np.uint32))  # -0.0 too
    # numpy's own shortest round-trip text (Dragon4, unique=True) is the oracle for the length
    shortest = [significant_digits(np.format_float_scientific(value, unique=True)) for value in values]
    assert [significant_digits(text) for text in texts] == shortest


def test_infinities_and_nan_are_written_as_null_and_views_as_their_values():
    logits = np.array([1.5, -np.inf, np.inf, np.nan], dtype=np.float32)
    assert dumps({"logits": logits}) == b'{"logits":[1.5,null,null,null]}'
    grid = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert json.loads(dumps(grid.T)) == grid.T.tolist()  # a transposed view is not C-contiguous


def test_a_saved_run_reads_back_bit_for_bit(tmp_path):
    run, attention = hand_run(decode_steps=3)
    path = save_run(run, attention, tmp_path / "run.json")
    again, again_attention = load_run(path)
    assert again.text == run.text and again.ids == run.ids
    for step, read in zip(run.steps, again.steps, strict=True):
        assert read.ops == step.ops and read.kv == step.kv
        np.testing.assert_array_equal(read.logits.view(np.uint32), step.logits.view(np.uint32))
        assert np.isneginf(step.sampling.final.logits).any()  # top-k filtered: -inf written as null, read back
        for stage, read_stage in zip(step.sampling.stages, read.sampling.stages, strict=True):
            np.testing.assert_array_equal(read_stage.logits.view(np.uint32), stage.logits.view(np.uint32))
        for record in step.attention:
            expected = attention.probs(step.step_index, record.layer)
            got = again_attention.probs(step.step_index, record.layer)
            np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
