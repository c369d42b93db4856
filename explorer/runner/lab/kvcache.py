"""A KV cache that stores keys and values as INT8 or FP8 (e4m3) codes with one fp16 scale per token per
KV head, and returns them dequantized whenever attention reads them (`explorer.lab.kvquant`).

Transformers' own `QuantizedCache` needs the optimum-quanto or HQQ backend, neither installed here, and
keeps the newest `residual_length` tokens unquantized; this cache quantizes every token, the current
ones included, so every read of K and V (the prefill's attention too) sees the rounded values.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

CODE_DTYPES = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}
CODE_MAX = {"int8": 127.0, "fp8": torch.finfo(torch.float8_e4m3fn).max}  # the largest code: 127, 448


def quantize_rows(states: torch.Tensor, kv_format: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric quantization with one scale per [d_h] row: s = max|row| / code max (127 for INT8, 448
    for FP8 e4m3), stored as fp16 and rounded up to the next fp16 value where rounding lowered it (so no
    code leaves the range); code = round(x / s) (INT8: to the nearest integer; FP8: to the nearest e4m3
    value, torch's cast).

    Args:
        states: [B, h_kv, n, d_h] float keys or values.
        kv_format: "int8" or "fp8".

    Returns:
        codes: [B, h_kv, n, d_h] int8 or float8_e4m3fn; scales: [B, h_kv, n, 1] float16 (1 for an all-zero row).

    Raises:
        KeyError: a format not in `CODE_DTYPES`.
    """
    code_max = CODE_MAX[kv_format]
    amax = states.abs().amax(dim=-1, keepdim=True).float()
    scales = torch.where(amax > 0, amax / code_max, torch.ones_like(amax)).half()
    too_small = scales.float() * code_max < amax
    scales = torch.where(too_small, torch.nextafter(scales, torch.full_like(scales, torch.inf)), scales)
    scaled = states.float() / scales.float()
    if kv_format == "int8":
        return scaled.round().clamp(-code_max, code_max).to(torch.int8), scales
    return scaled.clamp(-code_max, code_max).to(CODE_DTYPES[kv_format]), scales


def dequantize_rows(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x ≈ code x its row's scale. Args: codes [B, h_kv, n, d_h], scales [B, h_kv, n, 1] float16.
    Returns: [B, h_kv, n, d_h] of `dtype`."""
    return (codes.float() * scales.float()).to(dtype)


class QuantizedKVLayer(DynamicLayer):
    """One layer's cache: K and V held only as codes and scales, grown along the positions.

    Attributes:
        kv_format: "int8" or "fp8".
        key_codes, value_codes: [B, h_kv, n, d_h] int8 / float8_e4m3fn.
        key_scales, value_scales: [B, h_kv, n, 1] float16.
    """

    def __init__(self, kv_format: str):
        super().__init__()
        self.kv_format = kv_format
        self.key_codes = self.value_codes = self.key_scales = self.value_scales = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantize the new positions' K and V ([B, h_kv, n_new, d_h]) onto the stored codes; returns every
        position's K and V dequantized ([B, h_kv, n, d_h], the states' dtype)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new_key = quantize_rows(key_states, self.kv_format)
        new_value = quantize_rows(value_states, self.kv_format)
        if self.key_codes is None:
            (self.key_codes, self.key_scales), (self.value_codes, self.value_scales) = new_key, new_value
        else:
            self.key_codes = torch.cat([self.key_codes, new_key[0]], dim=-2)
            self.key_scales = torch.cat([self.key_scales, new_key[1]], dim=-2)
            self.value_codes = torch.cat([self.value_codes, new_value[0]], dim=-2)
            self.value_scales = torch.cat([self.value_scales, new_value[1]], dim=-2)
        return (dequantize_rows(self.key_codes, self.key_scales, key_states.dtype),
                dequantize_rows(self.value_codes, self.value_scales, value_states.dtype))

    def get_seq_length(self) -> int:
        return 0 if self.key_codes is None else self.key_codes.shape[-2]

    def stored_nbytes(self) -> int:
        """The bytes its four tensors hold (codes and scales, K and V)."""
        if self.key_codes is None:
            return 0
        return sum(t.nbytes for t in (self.key_codes, self.key_scales, self.value_codes, self.value_scales))


class QuantizedKVCache(DynamicCache):
    """A `DynamicCache` whose every layer is a `QuantizedKVLayer` (full attention in every layer: a
    sliding-window model's window is not applied).

    Args:
        config: the model's config (its decoder's `num_hidden_layers` layers are made).
        kv_format: "int8" or "fp8".
    """

    def __init__(self, config, kv_format: str):
        layers = config.get_text_config(decoder=True).num_hidden_layers
        super().__init__()
        self.layers = [QuantizedKVLayer(kv_format) for _ in range(layers)]
        self.layer_class_to_replicate = None

    def stored_nbytes(self) -> int:
        """The bytes every layer's codes and scales hold (measured: the tensors' `nbytes`)."""
        return sum(layer.stored_nbytes() for layer in self.layers)
