"""The lab's experiments run on the loaded model (plain transformers; each pass in its turn on the
model's lock, `explorer.runner.passes`): one function per experiment, by the name of its row in
`explorer.lab.table.LAB`. Each takes the loaded model, the prompt's token ids and the experiment's
parameters (`LabParam.name`), and returns the experiment's result (`explorer.lab.<experiment>`)."""

from __future__ import annotations

from explorer.runner.lab.batching import run_batching
from explorer.runner.lab.chunked import run_chunked
from explorer.runner.lab.evict import run_evict
from explorer.runner.lab.experts import run_experts
from explorer.runner.lab.kvquant import run_kvquant
from explorer.runner.lab.pipeline import run_pipeline
from explorer.runner.lab.prefix import run_prefix
from explorer.runner.lab.quant import run_quant
from explorer.runner.lab.speculative import run_speculative
from explorer.runner.lab.tensor import run_tensor
from explorer.runner.lab.tiles import run_tiles

RUNNERS = {
    "prefix": run_prefix,
    "chunked": run_chunked,
    "batching": run_batching,
    "speculative": run_speculative,
    "tiles": run_tiles,
    "quant": run_quant,
    "kvquant": run_kvquant,
    "evict": run_evict,
    "tensor": run_tensor,
    "pipeline": run_pipeline,
    "experts": run_experts,
}
