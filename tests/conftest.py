"""Shared fixtures: the embedded model, converted once and kept between test runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# No model hub and no analytics in tests: everything runs offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="session")
def embedded_cache_dir(request, tmp_path_factory) -> Path:
    """Where the session converts the embedded model: `$EXPLORER_CACHE_DIR` if set, else the pytest cache.

    The pytest cache (`.pytest_cache/d/explorer-models`) persists between runs, so the ~30 s
    conversion happens once per checkout; without a cache provider a session temp dir is used.
    """
    if os.environ.get("EXPLORER_CACHE_DIR"):
        return Path(os.environ["EXPLORER_CACHE_DIR"])
    if getattr(request.config, "cache", None) is not None:
        return Path(request.config.cache.mkdir("explorer-models"))
    return tmp_path_factory.mktemp("explorer-models")


@pytest.fixture(scope="session")
def embedded_model(embedded_cache_dir):
    """The embedded SmolLM2-135M-Instruct as a `LoadedModel` (float32, CPU), shared read-only by the session."""
    from explorer.runner.loading import load_model

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_CACHE_DIR", str(embedded_cache_dir))
        return load_model(device="cpu")  # float32 on the CPU whatever accelerator is present
