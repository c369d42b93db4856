"""The lab takes turns on the shared model (tiny Llama): while one page runs the slowest experiment the
hosted caps allow, another page's prefill waits for at most a few of its passes (counted on the model's
lock), not for the experiment; an experiment never switches the shared model's attention implementation
or dtype (a pass of the shared model during it sees the config it was loaded with); its eager view
computes what `set_attn_implementation("eager")` would, bit for bit, on the same tensors; the results of
the experiments over the shipped text are kept per model, experiment and parameters."""

from __future__ import annotations

import threading

import torch
from tiny_models import tiny_model

from explorer.lab.table import LAB
from explorer.runner.attention_view import attention_view
from explorer.runner.equivalence import run_equivalence
from explorer.runner.lab import RUNNERS
from explorer.runner.lab.cache import run_experiment
from explorer.runner.locks import model_lock
from explorer.runner.session import InferenceSession
from explorer.ui.handlers.experiments import cached_note

PROMPT = "Hello there"
TIMEOUT_S = 120


def hosted_worst(name: str, **sizes: int) -> dict[str, int]:
    """The experiment's defaults with `sizes`, each within its hosted cap."""
    params = {param.name: param.default for param in LAB[name].params} | sizes
    assert all(params[p.name] <= p.top(hosted=True) for p in LAB[name].params)
    return params


def test_another_pages_prefill_waits_for_a_few_passes_not_for_the_experiment():
    loaded = tiny_model("llama")
    ids = loaded.tokenizer(PROMPT)["input_ids"]
    lock, events, me = model_lock(loaded.model), [], threading.get_ident()
    plain_acquire = lock.acquire

    def counted(on_wait=None) -> None:  # every turn the experiment's thread is granted, in order
        plain_acquire(on_wait)
        if threading.get_ident() != me:
            events.append("pass")

    lock.acquire = counted
    params = hosted_worst("speculative", depth=1, guesses=4, tokens=32)  # the slowest within the caps
    experiment = threading.Thread(target=RUNNERS["speculative"], args=(loaded, ids), kwargs=params)
    experiment.start()
    while events.count("pass") < 5:
        assert experiment.is_alive(), "the experiment ended before the prefill asked"
    events.append("asked")
    with lock.turn():  # as the Prefill handler takes it (`explorer.ui.handlers.steps.prefill`)
        events.append("granted")
        InferenceSession(loaded).prefill(PROMPT, use_chat_template=False)
    experiment.join(TIMEOUT_S)
    waited = events[events.index("asked"):events.index("granted")].count("pass")
    after = events[events.index("granted"):].count("pass")
    assert waited <= 2, f"the prefill waited for {waited} of the experiment's passes"
    assert after > 10, "the experiment's passes went on after the prefill"


def test_an_experiment_never_switches_the_shared_models_attention_or_dtype():
    loaded = tiny_model("llama")
    model, seen = loaded.model, []
    # every pass through the shared model's first layer (the experiment's and another page's) notes
    # what the shared model's config and weights say then
    handle = model.model.layers[0].register_forward_pre_hook(
        lambda *_: seen.append((model.config._attn_implementation, model.dtype)))
    try:
        ids = loaded.tokenizer(PROMPT)["input_ids"]
        RUNNERS["evict"](loaded, ids, window=8, sinks=2, text_tokens=24)  # "h2o" and the sinks' measure: eager
        run_equivalence(loaded, ids, steps=3)  # the other attention and the other precision
        with torch.inference_mode():
            model(input_ids=torch.tensor([ids]))
    finally:
        handle.remove()
    assert seen and set(seen) == {("sdpa", torch.float32)}
    assert model.config._attn_implementation == "sdpa"


def test_the_eager_view_computes_eagers_weights_on_the_models_own_tensors():
    loaded = tiny_model("llama", seed=3)
    model, ids = loaded.model, torch.tensor([[5, 9, 17, 3, 44, 2, 8]])
    view = attention_view(model, "eager")
    assert all(a.data_ptr() == b.data_ptr() for a, b in zip(view.parameters(), model.parameters(), strict=True))
    with torch.inference_mode():
        viewed = view(input_ids=ids, output_attentions=True)
        model.set_attn_implementation("eager")
        try:
            switched = model(input_ids=ids, output_attentions=True)
        finally:
            model.set_attn_implementation("sdpa")
    assert torch.equal(viewed.logits, switched.logits)
    assert all(torch.equal(a, b) for a, b in zip(viewed.attentions, switched.attentions, strict=True))
    assert attention_view(model, "eager") is view and attention_view(model, "sdpa") is model


def test_a_result_over_the_shipped_text_is_kept_per_model_and_parameters():
    loaded = tiny_model("llama")
    params = hosted_worst("evict", window=8, text_tokens=24)
    first = run_experiment("evict", loaded, loaded.tokenizer(PROMPT)["input_ids"], params)
    again = run_experiment("evict", loaded, loaded.tokenizer("Another prompt")["input_ids"], params)
    other = run_experiment("evict", loaded, loaded.tokenizer(PROMPT)["input_ids"], params | {"window": 9})
    elsewhere = run_experiment("evict", tiny_model("llama"), loaded.tokenizer(PROMPT)["input_ids"], params)
    assert not first.cached and cached_note(first) == ""
    assert again.cached and again.result is first.result and again.computed_at == first.computed_at
    assert "cached: computed at" in cached_note(again) and "prompt" not in cached_note(again)
    assert not other.cached and other.result.window == 9
    assert not elsewhere.cached and elsewhere.result is not first.result


def test_a_result_that_reads_the_prompt_is_kept_per_prompt_and_a_measured_one_never():
    loaded = tiny_model("llama")
    ids, params = loaded.tokenizer(PROMPT)["input_ids"], hosted_worst("kvquant", continue_tokens=2, text_tokens=16)
    first = run_experiment("kvquant", loaded, ids, params)
    assert run_experiment("kvquant", loaded, ids, params).cached
    assert not run_experiment("kvquant", loaded, loaded.tokenizer("Other")["input_ids"], params).cached
    assert "and this prompt" in cached_note(run_experiment("kvquant", loaded, ids, params))
    assert first.reads_prompt
    assert not run_experiment("tiles", loaded, ids, hosted_worst("tiles")).cached
    assert not run_experiment("tiles", loaded, ids, hosted_worst("tiles")).cached
