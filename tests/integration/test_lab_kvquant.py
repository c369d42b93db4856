"""KV-cache quantization on tiny models: the shared model's logits unchanged bit for bit, the float
cache's continuation equal to `generate`'s, each quantized cache's KL and perplexity equal to torch's own
(kl_div, cross_entropy) on logits from a plain forward whose attention reads K and V rounded here
independently, the cache's bytes per token equal to 2·L·h_kv·(d_h·bytes + scale) and to its tensors'
`nbytes`, and bad input refused with a message."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from tiny_models import tiny_model
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from explorer.errors import PromptError, SessionStateError
from explorer.lab.fidelity import shipped_text
from explorer.lab.kvquant import cache_bytes_per_token
from explorer.runner.lab.kvcache import QuantizedKVCache
from explorer.runner.lab.kvquant import run_kvquant

PROMPT = "Hello there, how are you today?"
TEXT_TOKENS = 90


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def ids_of(loaded, text: str) -> list[int]:
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"]


def rounded(states: torch.Tensor, kv_format: str) -> torch.Tensor:
    """K or V ([B, h_kv, n, d_h]) through an independent per-row symmetric round trip: s = max|row| / code
    max, rounded up to fp16; INT8 rounds x / s to integers, FP8 casts it to float8_e4m3fn."""
    code_max = 127.0 if kv_format == "int8" else 448.0
    amax = states.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / code_max, torch.ones_like(amax)).half()
    scale = torch.where(scale.float() * code_max < amax, torch.nextafter(scale, torch.tensor(math.inf).half()), scale)
    scaled = states / scale.float()
    codes = scaled.round().clamp(-127, 127) if kv_format == "int8" else scaled.to(torch.float8_e4m3fn).float()
    return codes * scale.float()


class RoundedLayer(DynamicLayer):
    """Transformers' float cache layer, fed K and V already through `rounded` (stores floats, not codes)."""

    def __init__(self, kv_format: str):
        super().__init__()
        self.kv_format = kv_format

    def update(self, key_states, value_states, *args, **kwargs):
        return super().update(rounded(key_states, self.kv_format), rounded(value_states, self.kv_format))


def oracle_logits(model, ids: list[int], kv_format: str) -> torch.Tensor:
    """[T, V] logits of one forward on a cache of `RoundedLayer`s."""
    cache = DynamicCache()
    cache.layers = [RoundedLayer(kv_format) for _ in range(model.config.num_hidden_layers)]
    cache.layer_class_to_replicate = None
    with torch.inference_mode():
        return model(torch.tensor([ids]), cache=cache, use_cache=True).logits[0]


def test_the_shared_model_is_left_bit_identical(llama):
    ids = torch.tensor([ids_of(llama, PROMPT)])
    with torch.inference_mode():
        before = llama.model(ids).logits
    run_kvquant(llama, ids[0].tolist(), kv_format=0, continue_tokens=4, text_tokens=TEXT_TOKENS)
    with torch.inference_mode():
        assert torch.equal(llama.model(ids).logits, before)


def test_kl_and_perplexity_equal_torchs_on_independently_rounded_k_and_v(llama):
    ids = ids_of(llama, PROMPT)
    result = run_kvquant(llama, ids, kv_format=0, continue_tokens=6, text_tokens=TEXT_TOKENS)
    text = ids_of(llama, shipped_text())[:TEXT_TOKENS]
    target = torch.tensor(text[1:])
    with torch.inference_mode():
        reference = llama.model(torch.tensor([text])).logits[0]
        generated = llama.model.generate(torch.tensor([ids]), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    base = result.variants[0]
    assert base.tokens == tuple(generated[0, len(ids):].tolist())
    assert base.fidelity.text_perplexity == pytest.approx(math.exp(F.cross_entropy(reference[:-1], target).item()),
                                                          rel=1e-5)
    for variant, kv_format in zip(result.variants[1:], ("int8", "fp8"), strict=True):
        logits = oracle_logits(llama.model, text, kv_format)
        kl = F.kl_div(F.log_softmax(logits.double(), -1), F.log_softmax(reference.double(), -1), log_target=True,
                      reduction="none").sum(-1)
        assert variant.fidelity.text_kl_mean == pytest.approx(kl.mean().item(), rel=1e-3, abs=1e-9)
        assert variant.fidelity.text_kl_mean > 0
        assert variant.fidelity.text_perplexity == pytest.approx(
            math.exp(F.cross_entropy(logits[:-1], target).item()), rel=1e-5)
        agree = (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()
        assert variant.fidelity.text_top1 == pytest.approx(agree)
        assert variant.fidelity.text_max_abs_diff == pytest.approx((logits - reference).abs().max().item(), rel=1e-4)
    assert [v.name for v in result.variants] == ["float32", "int8", "fp8 e4m3"]


def test_cache_bytes_per_token_equal_the_formula_and_the_stored_tensors(llama):
    """L=3, h_kv=2, d_h=10 (all distinct): float32 2·3·2·10·4 = 480; INT8/FP8 2·3·2·(10·1 + 2) = 144."""
    ids = ids_of(llama, PROMPT)
    assert cache_bytes_per_token(3, 2, 10, 4, 0) == 480 and cache_bytes_per_token(3, 2, 10, 1, 2) == 144
    for kv_format, code_dtype in (("int8", torch.int8), ("fp8", torch.float8_e4m3fn)):
        cache = QuantizedKVCache(llama.model.config, kv_format)
        with torch.inference_mode():
            llama.model(torch.tensor([ids]), cache=cache, use_cache=True)
        layer = cache.layers[0]
        assert layer.key_codes.dtype == code_dtype and layer.key_codes.shape == (1, 2, len(ids), 10)
        assert layer.key_scales.dtype == torch.float16 and layer.value_scales.shape == (1, 2, len(ids), 1)
        nbytes = sum(t.nbytes for layer in cache.layers
                     for t in (layer.key_codes, layer.key_scales, layer.value_codes, layer.value_scales))
        assert nbytes == 144 * len(ids) == cache.stored_nbytes()
    result = run_kvquant(llama, ids, kv_format=0, continue_tokens=2, text_tokens=40)
    assert [v.bytes_per_element for v in result.variants] == [480, 144, 144]
    assert result.stored_bytes_per_token == (480, 144, 144)
    float_bound, int8_bound = result.variants[0].predicted_step_s, result.variants[1].predicted_step_s
    assert int8_bound < float_bound


def test_bad_input_is_refused_with_a_message(llama):
    ids = ids_of(llama, PROMPT)
    with pytest.raises(PromptError, match=r"must be 1 \(INT8\), 2 \(FP8 e4m3\) or 0"):
        run_kvquant(llama, ids, kv_format=3)
    with pytest.raises(PromptError, match="exceed the model's 160 positions"):
        run_kvquant(llama, ids * 5)
    with pytest.raises(PromptError, match="sliding-window layers"):
        run_kvquant(tiny_model("gemma3_text"), ids)
    shape_only = type(llama)(**{**llama.__dict__, "shape_only": True})
    with pytest.raises(SessionStateError, match="Shape-only mode"):
        run_kvquant(shape_only, ids)


def test_the_figure_table_and_lesson_say_what_was_measured(llama):
    from explorer.figures.lab.kvquant import fig_kvquant
    from explorer.lab.kvquant import lesson_text
    result = run_kvquant(llama, ids_of(llama, PROMPT), kv_format=2, continue_tokens=3, text_tokens=40)
    fig = fig_kvquant(result)
    assert fig.layout.meta == {"view": "lab-kvquant", "step": None} and fig.layout.height <= 560
    assert [list(bar.y) for bar in fig.data][0] == ["fp8 e4m3", "float32"]
    assert "(measured)" in fig.layout.title.text and "estimated" in fig.layout.annotations[4].text
    text = "\n".join(result.lines()) + lesson_text(result)
    assert "fp8 e4m3" in text and "batch 64" in text and "144" in text and "480" in text
