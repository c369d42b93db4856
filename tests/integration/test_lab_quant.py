"""Weight quantization on tiny models: the shared model's logits unchanged bit for bit, the float
reference's continuation equal to `generate`'s, each variant's KL and perplexity equal to torch's own
(kl_div, cross_entropy) on a copy quantized here independently, and bad input refused with a message."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from tiny_models import tiny_model

from explorer.errors import PromptError, SessionStateError
from explorer.lab.fidelity import shipped_text
from explorer.runner.lab.quant import quantizable, run_quant

PROMPT = "Hello there, how are you today?"
TEXT_TOKENS = 90


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def ids_of(loaded, text: str) -> list[int]:
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]


def rounded(weight: torch.Tensor, bits: int, group: int) -> torch.Tensor:
    """Symmetric round-to-nearest in torch, per group of `group` inputs, scales rounded up to fp16."""
    qmax, (out, inputs) = 2 ** (bits - 1) - 1, weight.shape
    groups = F.pad(weight, (0, -inputs % group)).view(out, -1, group)
    amax = groups.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax)).half()
    scale = torch.where(scale.float() * qmax < amax, torch.nextafter(scale, torch.tensor(math.inf).half()), scale)
    return ((groups / scale.float()).round().clamp(-qmax, qmax) * scale.float()).view(out, -1)[:, :inputs]


def test_the_shared_model_is_left_bit_identical(llama):
    ids = torch.tensor([ids_of(llama, PROMPT)])
    with torch.inference_mode():
        before = llama.model(ids).logits
    run_quant(llama, ids[0].tolist(), bits=4, group_size=8, continue_tokens=4, text_tokens=TEXT_TOKENS)
    with torch.inference_mode():
        assert torch.equal(llama.model(ids).logits, before)


def test_kl_and_perplexity_equal_torchs_on_an_independently_quantized_copy(llama):
    ids = ids_of(llama, PROMPT)
    result = run_quant(llama, ids, bits=0, group_size=32, continue_tokens=6, text_tokens=TEXT_TOKENS)
    text = torch.tensor([ids_of(llama, shipped_text())[:TEXT_TOKENS]])
    with torch.inference_mode():
        reference = llama.model(text).logits[0]
        generated = llama.model.generate(torch.tensor([ids]), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    base = result.variants[0]
    assert base.tokens == tuple(generated[0, len(ids):].tolist())
    assert base.fidelity.text_perplexity == pytest.approx(
        math.exp(F.cross_entropy(reference[:-1], text[0, 1:]).item()), rel=1e-5)
    for variant, bits, group in zip(result.variants[1:], (8, 4), (None, 32), strict=True):
        copied = copy.deepcopy(llama.model)
        with torch.inference_mode():
            for module in quantizable(copied):  # INT8: one group per output channel (inputs 48, 60 or 37)
                inputs = module.weight.shape[1]
                module.weight.copy_(rounded(module.weight, bits, min(group or inputs, inputs)))
            logits = copied(text).logits[0]
        kl = F.kl_div(F.log_softmax(logits.double(), -1), F.log_softmax(reference.double(), -1), log_target=True,
                      reduction="none").sum(-1)
        assert variant.fidelity.text_kl_mean == pytest.approx(kl.mean().item(), rel=1e-3, abs=1e-9)
        assert variant.fidelity.text_perplexity == pytest.approx(
            math.exp(F.cross_entropy(logits[:-1], text[0, 1:]).item()), rel=1e-5)
        agree = (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()
        assert variant.fidelity.text_top1 == pytest.approx(agree)
    assert result.max_error_over_bound <= 1 + 1e-6
    assert result.quantized_linears == 3 * 7 and result.text_tokens == TEXT_TOKENS


def test_bad_input_is_refused_with_a_message(llama):
    ids = ids_of(llama, PROMPT)
    with pytest.raises(PromptError, match="Bits must be 8 .INT8., 4 .INT4. or 0"):
        run_quant(llama, ids, bits=5)
    with pytest.raises(PromptError, match="exceed the model's 160 positions"):
        run_quant(llama, ids * 5)
    shape_only = type(llama)(**{**llama.__dict__, "shape_only": True})
    with pytest.raises(SessionStateError, match="Shape-only mode"):
        run_quant(shape_only, ids)


def test_the_figure_table_and_lesson_say_what_was_measured(llama):
    from explorer.figures.lab.quant import fig_quant
    from explorer.lab.quant import lesson_text
    result = run_quant(llama, ids_of(llama, PROMPT), bits=4, group_size=16, continue_tokens=3, text_tokens=40)
    fig = fig_quant(result)
    assert fig.layout.meta == {"view": "lab-quant", "step": None} and fig.layout.height <= 560
    assert [list(bar.y) for bar in fig.data][0] == ["int4 g16", "float32"]
    assert "(measured)" in fig.layout.title.text and "estimated" in fig.layout.annotations[4].text
    text = "\n".join(result.lines()) + lesson_text(result)
    assert "int4 g16" in text and "fake quantization" in text and "float32's, not an INT kernel's" in text
