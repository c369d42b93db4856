"""The logit lens reads each layer's residual stream through the model's own final norm and LM head.

Oracles: the step's own logits (row L at the last position must be them bit for bit), the plain
transformers model with eager attention and `output_hidden_states` (every layer's residual stream,
computed without our hooks), and the embedding module followed by the final norm and LM head.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from tiny_models import FAMILY_EXTRAS, tiny_model

from explorer.cli import main
from explorer.cli.lens_cmd import lens_lines
from explorer.config import SamplingSettings
from explorer.families import traced_family
from explorer.runner.lens import LENS_TOP, lens_positions, read_out
from explorer.runner.session import InferenceSession
from explorer.saved import load_run, save_run

PROMPT = "a lens, layer by layer"


def _oracle(logits: torch.Tensor, next_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Top-k ids and probabilities, the next tokens' probabilities and the entropy in bits of [rows, V] logits."""
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(LENS_TOP, dim=-1)
    entropy = -(probs * torch.log(probs).nan_to_num(neginf=0)).sum(-1) / math.log(2)
    return top.indices, top.values, probs.gather(-1, next_ids[:, None])[:, 0], entropy


def _session(family: str) -> InferenceSession:
    session = InferenceSession(tiny_model(family), SamplingSettings())
    session.prefill(PROMPT, use_chat_template=False)
    session.decode_step()
    return session


@pytest.mark.parametrize("family", sorted(FAMILY_EXTRAS))
def test_the_last_layers_last_cell_is_the_steps_own_logits_bit_for_bit(family):
    session = _session(family)
    for trace in session.traces:
        lens = session.run.lens(trace.step_index)
        ids, probs, next_prob, _ = _oracle(torch.from_numpy(trace.logits)[None], torch.tensor([trace.sampling.token_id]))
        assert lens.next_ids[-1] == trace.sampling.token_id
        assert torch.equal(torch.from_numpy(lens.top_probs[-1, -1]), probs[0])
        assert torch.equal(torch.from_numpy(lens.top_ids[-1, -1]), ids[0])
        assert lens.next_probs[-1, -1] == next_prob[0].item() == pytest.approx(trace.sampling.token_prob)


@pytest.mark.parametrize("family", sorted(FAMILY_EXTRAS))
def test_every_row_matches_the_plain_eager_models_hidden_states(family):
    session = _session(family)
    model = copy.deepcopy(session.loaded.model)
    model.set_attn_implementation("eager")
    ids = torch.tensor([session.ids[:-1]])  # the prompt and the token the decode step fed
    with torch.inference_mode():
        output = model(input_ids=ids, output_hidden_states=True)
        hidden = torch.stack(output.hidden_states[:-1])[:, 0]  # [L, n, d]: the embedding, then layers 0..L-2
        # the last layer's row: the model's own logits at every position
        paths = traced_family(model.config.model_type).top_modules  # GPT-2: transformer.ln_f
        norm, head = model.get_submodule(paths["final_norm"]), model.get_submodule(paths["lm_head"])
        logits = torch.cat([read_out(model, norm, head, hidden), output.logits[0][None]])
    next_ids = torch.tensor(session.ids[1:])
    prefill, decode = session.traces
    for trace, columns in ((prefill, slice(0, len(prefill.input_ids))), (decode, slice(-1, None))):
        lens = session.run.lens(trace.step_index)
        assert lens.positions == list(range(ids.shape[1]))[columns]
        top_ids, top_probs, next_probs, entropy = (part.reshape(len(logits), -1, *part.shape[1:])
                                                   for part in _oracle(logits[:, columns].flatten(0, 1),
                                                                       next_ids[columns].repeat(len(logits))))
        np.testing.assert_array_equal(lens.top_ids, top_ids.numpy(), err_msg=family)
        np.testing.assert_allclose(lens.top_probs, top_probs.numpy(), atol=1e-6, err_msg=family)
        np.testing.assert_allclose(lens.next_probs, next_probs.numpy(), atol=1e-6, err_msg=family)
        np.testing.assert_allclose(lens.entropy_bits, entropy.numpy(), atol=1e-4, err_msg=family)


def test_layer_zero_is_the_final_norm_and_lm_head_on_the_embeddings():
    session = _session("gemma3_text")  # scaled embeddings and a final logit soft-cap: both must be the model's
    model = session.loaded.model
    with torch.inference_mode():
        embedded = model.model.embed_tokens(torch.tensor(session.ids[:len(session.traces[0].input_ids)]))
        logits = model.lm_head(model.model.norm(embedded))
        if model.config.final_logit_softcapping is not None:
            logits = torch.tanh(logits / model.config.final_logit_softcapping) * model.config.final_logit_softcapping
    probs = torch.softmax(logits, dim=-1)
    lens = session.run.lens(0)
    np.testing.assert_array_equal(lens.top_ids[0], probs.topk(LENS_TOP).indices.numpy())
    np.testing.assert_allclose(lens.top_probs[0], probs.topk(LENS_TOP).values.numpy(), atol=1e-6)


def test_a_long_prefill_keeps_its_last_positions_only():
    loaded = tiny_model("llama")
    session = InferenceSession(loaded, SamplingSettings())
    tokens = 150
    session.prefill("x" * tokens, use_chat_template=False)
    width = lens_positions(tokens, loaded.model.config.num_hidden_layers)
    assert width == min(tokens, 1024 // 4)
    assert session.run.lens(0).positions == list(range(tokens - width, tokens))
    assert lens_positions(2048, 30) == 1024 // 31


@pytest.mark.real_model
def test_the_embedded_model_names_paris_in_its_last_layer(embedded_model):
    session = InferenceSession(embedded_model, SamplingSettings())
    trace = session.prefill("The capital of France is", use_chat_template=False)
    lens = session.run.lens(0)
    paris = trace.sampling.token_id
    assert session.pieces([paris]) == [" Paris"]
    probs = torch.softmax(torch.from_numpy(trace.logits), dim=-1)
    assert torch.equal(torch.from_numpy(lens.top_probs[-1, -1]), probs.topk(LENS_TOP).values)
    assert lens.top_ids.shape == (31, len(trace.input_ids), LENS_TOP)
    assert lens.top_ids[0, -1, 0] == trace.input_ids[-1]  # the tied embedding reads back its own token


def test_the_cli_prints_every_row_at_the_last_position_and_the_first_layer_with_the_chosen_token():
    session = _session("llama")
    trace = session.traces[1]
    lens = session.run.lens(1)
    lines = lens_lines(trace, lens, session.pieces)
    rows = lines[2:-1]
    assert [row.split("  ")[0].strip() for row in rows] == ["embedding", "layer 0", "layer 1", "layer 2"]
    for row, line in zip(range(4), rows, strict=True):
        assert repr(session.pieces([int(lens.top_ids[row, -1, 0])])[0]) in line
        assert f"{lens.top_probs[row, -1, 0]:.3f}" in line
    hits = [row for row in range(4) if lens.top_ids[row, -1, 0] == trace.sampling.token_id]
    assert hits and hits[-1] == 3  # greedy: the model's own output row always names the token chosen
    assert lines[-1].endswith(f"after {'embedding' if hits[0] == 0 else f'layer {hits[0] - 1}'} (row {hits[0]} of 3)")


def test_the_cli_refuses_an_empty_prompt_before_loading(capsys):
    assert main(["lens", "  "]) == 2
    assert "The prompt is empty" in capsys.readouterr().err



def _same(a, b) -> None:
    assert (a.positions, a.next_ids) == (b.positions, b.next_ids)
    for name in ("top_ids", "top_probs", "next_probs", "entropy_bits"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_a_decode_step_runs_the_lm_head_once_and_the_lens_asked_later_is_the_one_asked_at_once():
    eager = InferenceSession(tiny_model("llama"), SamplingSettings(do_sample=True, seed=3))
    eager.prefill(PROMPT, use_chat_template=False)
    records = [eager.run.lens(0)]
    for _ in range(3):
        records.append(eager.run.lens(eager.decode_step().step_index))
    lazy = InferenceSession(tiny_model("llama"), SamplingSettings(do_sample=True, seed=3))
    lazy.prefill(PROMPT, use_chat_template=False)
    model, calls = lazy.loaded.model, []
    handle = model.lm_head.register_forward_hook(lambda module, args, output: calls.append(args[0].shape[1]))
    try:
        for _ in range(3):
            lazy.decode_step()
            assert calls == [1]  # the step's own last position, nothing more
            calls.clear()
    finally:
        handle.remove()
    config, tokens = model.config, len(lazy.traces[0].input_ids)
    row_bytes = (config.num_hidden_layers + 1) * config.hidden_size * model.dtype.itemsize
    assert lazy.lens_bytes == row_bytes * (tokens + 3)  # every step's residual rows, no lens computed yet
    for index in reversed(range(4)):
        _same(lazy.run.lens(index), records[index])
    assert lazy.lens_bytes == 0  # freed once computed
    assert lazy.run.piece(int(records[2].top_ids[1, 0, 0])) != "?"  # the lens named its top tokens


def test_over_its_budget_the_session_computes_its_oldest_lenses_with_the_same_values():
    session = _session("llama")
    records = [session.run.lens(index) for index in range(2)]
    bounded = InferenceSession(tiny_model("llama"), SamplingSettings(), lens_budget_bytes=1)  # every lens at once
    bounded.prefill(PROMPT, use_chat_template=False)
    bounded.decode_step()
    assert bounded.lens_bytes == 0
    for index, record in enumerate(records):
        _same(bounded.run.lens(index), record)


def test_a_branch_drops_the_later_steps_lens_and_a_saved_run_gives_the_same_lens(tmp_path):
    session = _session("llama")
    session.decode_step()
    first = session.run.lens(1)
    session.branch(0)
    assert len(session.lens._steps) == 1
    session.decode_step()  # greedy: the same token again
    _same(session.run.lens(1), first)
    loaded, _ = load_run(save_run(session.run, session.attention, tmp_path / "run.json"))
    for index in range(2):
        _same(loaded.lens(index), session.run.lens(index))
    session.decode_step()
    held = session.lens
    assert held.residual_bytes > 0  # the new step's rows, its lens not asked for
    session.close()
    assert held.residual_bytes == 0 and session.lens_bytes == 0
