"""One step's traced forward pass, and what the step records beside its stops' times: the KV cache's
shapes and bytes, each layer's attention and expert routing, and the stops of its stage as
`assemble_ops` reads them."""

from __future__ import annotations

import time

import torch
from transformers import DynamicCache

from explorer.families import Family
from explorer.runner.assemble import Plan, stop_plan
from explorer.runner.hooks import StepRecorder, tracing
from explorer.runner.lens import capture_residuals
from explorer.runner.locks import model_lock
from explorer.stops import stop_table
from explorer.trace import AttentionRecord, KVSnapshot, RoutingRecord


def traced_forward(model: torch.nn.Module, cache: DynamicCache, inputs: dict[str, torch.Tensor],
                   recorder: StepRecorder, lens_width: int, logits_to_keep: int):
    """Run `inputs` through `model` once, under its lock, writing to `cache`, with the recorder's hooks
    attached and the residual stream of the last `lens_width` positions kept for the logit lens.

    Args:
        inputs: the model's keyword inputs: "input_ids" [B, q_len] int64, and for a batch of prompts
            "attention_mask" [B, n] and "position_ids" [B, q_len].
        logits_to_keep: 1 for the last position's logits only, 0 for every position's.

    Returns:
        (the model's output, logits [B, 1 or q_len, V]; the pass's wall time, ms, with the GPU's work;
        the residuals `explorer.runner.lens.capture_residuals` kept).
    """
    with model_lock(model), torch.inference_mode(), capture_residuals(model, lens_width) as residuals, \
            tracing(model, cache, recorder):
        start = time.perf_counter()
        output = model(**inputs, cache=cache, use_cache=True, logits_to_keep=logits_to_keep)
        recorder.finish()  # on CUDA the step's one synchronise, so wall_ms covers the GPU's work
        wall_ms = (time.perf_counter() - start) * 1e3
    return output, wall_ms, residuals


class StopPlans:
    """The stops of a step (`explorer.stops.stop_table`) as `assemble_ops` reads them, built once per
    (stage, layer count) for one model.

    Args:
        features: the model's family facts (`explorer.runner.architectures.model_features`).
        moe_layers: per decoder layer, whether its MLP is a mixture of experts (() for a dense family).
    """

    def __init__(self, features: Family, moe_layers: tuple[bool, ...]) -> None:
        self.features, self.moe_layers = features, moe_layers
        self._plans: dict[tuple[str, int], Plan] = {}

    def plan(self, stage: str, n_layers: int) -> Plan:
        """The plan of a "prefill" or "decode" step over `n_layers` layers."""
        key = (stage, n_layers)
        if key not in self._plans:
            self._plans[key] = stop_plan(stop_table(self.features, n_layers, stage, self.moe_layers))
        return self._plans[key]


def kv_snapshots(cache: DynamicCache) -> list[KVSnapshot]:
    """Each cache layer's key and value shapes ([B, h_kv, n, d_h]) and bytes, as the step left them."""
    return [
        KVSnapshot(i, list(layer.keys.shape), list(layer.values.shape),
                   layer.keys.numel() * layer.keys.element_size(),
                   layer.values.numel() * layer.values.element_size())
        for i, layer in enumerate(cache.layers)
    ]


def attention_records(recorder: StepRecorder) -> list[AttentionRecord]:
    """Each layer's attention shape [h_q, q_len, kv_len] and first-key weight sums, by layer."""
    return [AttentionRecord(i, shape, recorder.first_key_sums.get(i))
            for i, shape in sorted(recorder.attention_shapes.items())]


def routing_records(recorder: StepRecorder) -> list[RoutingRecord]:
    """Each mixture-of-experts layer's chosen experts and their weights (float32, on the CPU), by layer."""
    return [RoutingRecord(layer, n_experts, ids.tolist(), weights.float().cpu().numpy())
            for layer, (ids, weights, n_experts) in sorted(recorder.routing.items())]
