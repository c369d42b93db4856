"""The warm-up at load time: a tiny traced prefill (sampled, every filter on) and a greedy decode step
on the loaded model, thrown away, leaving the model as it was; skipped where no step could run."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model

from explorer.errors import ModelLoadError
from explorer.runner import loading
from explorer.runner.loading import load_model, load_shape_only
from explorer.runner.session import InferenceSession
from explorer.runner.warm_up import warm_up


def spy_steps(monkeypatch) -> list[tuple]:
    """Record each step an `InferenceSession` runs: ("prefill", prompt, sampling) or ("decode", sampling)."""
    steps = []
    prefill, decode_step = InferenceSession.prefill, InferenceSession.decode_step

    def spied_prefill(self, prompt=None, *args, **kwargs):
        steps.append(("prefill", prompt, self.settings))
        return prefill(self, prompt, *args, **kwargs)

    def spied_decode(self, settings=None):
        steps.append(("decode", settings))
        return decode_step(self, settings)

    monkeypatch.setattr(InferenceSession, "prefill", spied_prefill)
    monkeypatch.setattr(InferenceSession, "decode_step", spied_decode)
    return steps


def test_a_sampled_prefill_with_every_filter_and_a_greedy_decode_step_run(monkeypatch):
    steps = spy_steps(monkeypatch)
    loaded = tiny_model("llama")
    weights = {name: p.clone() for name, p in loaded.model.named_parameters()}
    messages = []
    warm_up(loaded, messages.append)
    (_, prompt, sampled), (_, greedy) = steps
    assert prompt == "Hi" and sampled.do_sample
    assert all((sampled.temperature != 1.0, sampled.top_k, sampled.top_p < 1.0, sampled.min_p > 0.0))
    assert not greedy.do_sample
    assert messages == ["Warming up: one tiny traced step, so the first one shown carries no start-up cost"]
    model = loaded.model  # left as it was: weights, attention implementation, no hook left behind
    assert all(torch.equal(p, weights[name]) for name, p in model.named_parameters())
    assert model.config._attn_implementation != "explorer_eager"
    assert not torch.nn.modules.module._global_forward_hooks
    assert not torch.nn.modules.module._global_forward_pre_hooks
    assert not any("forward" in vars(module) for module in model.modules())


def test_no_warm_up_in_shape_only_mode_or_without_a_tokenizer(monkeypatch):
    steps = spy_steps(monkeypatch)
    warm_up(load_shape_only("qwen3-0.6b"))
    untokenized = tiny_model("llama")
    untokenized.tokenizer = None
    warm_up(untokenized)
    assert steps == []


def test_loading_real_weights_warms_the_model_up(tmp_path, monkeypatch):
    saved = tiny_model("qwen3")
    saved.model.save_pretrained(tmp_path)
    saved.tokenizer.save_pretrained(tmp_path)
    warmed = []
    monkeypatch.setattr(loading, "warm_up", lambda loaded, progress=None: warmed.append(loaded))
    loaded = load_model(str(tmp_path), device="cpu")
    assert warmed == [loaded]


def test_a_failing_warm_up_stops_the_load_with_the_reason(monkeypatch):
    def broken(self, *args, **kwargs):
        raise AttributeError("'NoneType' object has no attribute 'shape'")

    monkeypatch.setattr(InferenceSession, "prefill", broken)
    with pytest.raises(ModelLoadError, match=r"^tiny-llama loaded, but a first traced step on it failed "
                                             r"\('NoneType' object has no attribute 'shape'\), so no step could run"):
        warm_up(tiny_model("llama"))
