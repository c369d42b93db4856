"""Stop names and kinds, built and parsed in one place: the leaf every other stop module imports.

Names: `tokenize`, `embed` (GPT-2: then `pos_embed` and `embed_add`), `layers.{i}.<stop>` (`stop_name`),
`final_norm`, `lm_head`, `sample`, `detokenize`. What each stop is (its kind, shapes, cost and docs) is
its row of `explorer.stop_catalogue`; which stops a family's layer has, `explorer.stops`. Pure Python.
"""

from __future__ import annotations

import functools
from typing import Literal

# What an operator does, as the roofline and the figures' colours group them.
StopKind = Literal["tokenize", "gather", "norm", "gemm", "reshape", "rope", "cache_write", "broadcast",
                   "batched_gemm", "softmax", "elementwise", "experts", "sample", "detokenize"]

_LAYER_PREFIX = "layers."


def stop_name(layer: int | None, stop: str) -> str:
    """The canonical name: "layers.{layer}.{stop}" inside a layer ("layers.3.attn.q_proj"), `stop` outside."""
    return stop if layer is None else f"{_LAYER_PREFIX}{layer}.{stop}"


@functools.lru_cache(maxsize=8192)  # a step parses every stop's name: ~600 a step on the embedded model
def parse_stop_name(name: str) -> tuple[int | None, str]:
    """(layer index, layer-relative stop) of a canonical name; (None, name) outside the layers.

    "layers.3.attn.q_proj" -> (3, "attn.q_proj"); "lm_head" -> (None, "lm_head"); a name that is
    already layer-relative ("attn.q_proj", a sum over layers) -> (None, "attn.q_proj").
    """
    if not name.startswith(_LAYER_PREFIX):
        return None, name
    layer, stop = name[len(_LAYER_PREFIX):].split(".", 1)
    return int(layer), stop
