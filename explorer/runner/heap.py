"""The process's heap policy for large tensors: each gets pages of its own, handed back when freed.

glibc's malloc serves a block of at least its mmap threshold from pages of its own (`mmap`) and
returns them when the block is freed; smaller blocks come from the heap, whose freed space is kept
for reuse. The threshold starts at 128 KB and rises to the size of each large block freed (up to
32 MB), so after a prefill's first layers its tensors of a few MB come from the heap, where the
holes they leave (between tensors still alive: the KV cache, the kept queries) are not returned.
Fixing the threshold at 1 MB stops that: `python -m explorer trace <2,048 tokens> --steps 8
--no-chat-template` on the embedded model peaked at 1,227 MB of RSS (two runs) against 1,337 MB
without it (two runs), a 20-token prompt at 950 MB either way. A tensor with pages of its own
faults them in afresh each time, so the tensors made over and over (an attention block's) are
written into buffers made once a layer (`explorer.runner.gqa.BlockBuffers`).
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)
LARGE_BLOCK_BYTES = 2**20  # a block this size or larger gets pages of its own (a decode step's logits are 0.2 MB)


def map_large_blocks(threshold_bytes: int = LARGE_BLOCK_BYTES) -> bool:
    """Give every later allocation of `threshold_bytes` or more pages of its own (see the module).

    Returns:
        True where glibc took the setting; False elsewhere (macOS, musl: their malloc is left as it is).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes))
    except (OSError, AttributeError):
        return False
