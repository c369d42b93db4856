"""The ready examples show what their labels say, on the embedded model (float32, CPU)."""

from __future__ import annotations

import re

import numpy as np

from explorer.analysis.sinks import DEFAULT_SINK_THRESHOLD, SinkSummary
from explorer.config import SamplingSettings
from explorer.runner.session import InferenceSession
from explorer.ui.hosting import LOCAL
from explorer.ui.layout import examples
from explorer.ui.views import Visit, every_layer_sinks


def example(start: str) -> dict:
    return next(e for e in examples() if e["label"].startswith(start))


def session_for(model, chosen: dict) -> InferenceSession:
    settings = SamplingSettings(**{k: chosen[k] for k in ("do_sample", "temperature", "top_k", "top_p", "min_p", "seed")})
    session = InferenceSession(model, settings)
    session.prefill(chosen["prompt"])
    return session


def kept(trace) -> int:
    return int(np.isfinite(trace.sampling.stages[-1].logits).sum())


def test_top_p_keeps_one_token_of_the_fact_from_step_1_on(embedded_model):
    session = session_for(embedded_model, example("Top-p keeps one token"))
    assert [kept(session.decode_step()) for _ in range(3)] == [1, 1, 1]


def test_top_p_keeps_the_count_the_label_says_for_the_story(embedded_model):
    chosen = example("Top-p keeps dozens")
    said = int(re.search(r"\((\d+) tokens", chosen["label"]).group(1))
    assert kept(session_for(embedded_model, chosen).traces[0]) == said


def test_the_long_prompt_has_the_attention_sinks_and_the_cache_the_label_says(embedded_model):
    chosen = example("A long prompt")
    session = session_for(embedded_model, chosen)
    n = session.traces[0].context_length
    said = int(re.search(r"~(\d+) positions", chosen["label"]).group(1))
    assert abs(n - said) <= 0.1 * said
    # measured as the attention view measures them: every layer's first-token importance
    summary = SinkSummary(every_layer_sinks(Visit.start(session, LOCAL), 0), DEFAULT_SINK_THRESHOLD)
    share = int(re.search(r"\((\d+)% of all heads", chosen["label"]).group(1))
    assert round(summary.share * 100) == share
    first, heads = int(re.search(r"every layer from (\d+) on", chosen["label"]).group(1)), int(
        re.search(r"(\d+) or more of", chosen["label"]).group(1))
    assert (summary.per_layer()[first:] >= heads).all() and (summary.per_layer()[:first] < heads).all()
