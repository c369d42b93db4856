"""One lock per loaded model: forward passes on a shared model run one at a time, across sessions."""

from __future__ import annotations

import threading
import weakref

import torch

_MODEL_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def model_lock(model: torch.nn.Module) -> threading.Lock:
    """The lock that serialises forward passes on `model` across sessions."""
    with _LOCKS_GUARD:
        return _MODEL_LOCKS.setdefault(model, threading.Lock())
