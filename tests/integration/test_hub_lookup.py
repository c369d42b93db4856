"""A hub id not in the cache: looked up on the hub once, briefly, before transformers' download (which
retries a lost connection for about 30 s), and outside the model's queue in the app; and a closed pipe
met while loading is not taken for unreadable weights."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import huggingface_hub
import huggingface_hub.constants
import pytest
from transformers import AutoConfig

from explorer import closed_pipe
from explorer.errors import ModelLoadError
from explorer.runner import loading
from explorer.ui.handlers import ServedHandlers
from explorer.ui.handlers.controls import PROMPT_INPUTS
from explorer.ui.hosting import LOCAL, Served
from explorer.ui.models import ModelRegistry

UNKNOWN = "explorer-tests/no-such-model"


@pytest.fixture
def config_reads(monkeypatch):
    """Every `AutoConfig.from_pretrained` call's `local_files_only`, the calls passed on to transformers."""
    reads, original = [], AutoConfig.from_pretrained

    def recorded(source, **kwargs):
        reads.append(kwargs.get("local_files_only", False))
        return original(source, **kwargs)

    monkeypatch.setattr(loading.AutoConfig, "from_pretrained", recorded)
    return reads


@pytest.fixture
def online(monkeypatch):
    """The hub not switched off here (the test environment is offline by HF_HUB_OFFLINE)."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def test_offline_an_uncached_id_is_refused_after_the_cache_alone(config_reads, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "model_info", lambda *a, **k: pytest.fail("the hub was asked"))
    with pytest.raises(ModelLoadError, match=rf"Cannot find '{UNKNOWN}'.*the hub is off here \(HF_HUB_OFFLINE=1\)"):
        loading.resolved_model_config(model=UNKNOWN)
    assert config_reads == [True]  # the cache only: no download tried, so no retry


def test_an_unreachable_hub_is_asked_once_with_a_timeout_and_never_retried(config_reads, online, monkeypatch):
    asked = []

    def unreachable(repo_id, timeout=None, **kwargs):
        asked.append((repo_id, timeout))
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    with pytest.raises(ModelLoadError, match=rf"Cannot find '{UNKNOWN}'.*could not be reached within 3 s "
                                             r"\(\[Errno -2\] Name or service not known\).*hf download"):
        loading.load_model(UNKNOWN, device="cpu")
    assert asked == [(UNKNOWN, loading.HUB_CHECK_TIMEOUT_S)] and config_reads == [True]


def test_a_name_the_hub_lacks_says_so(config_reads, online, monkeypatch):
    from huggingface_hub.errors import RepositoryNotFoundError

    def missing(repo_id, **kwargs):  # the hub's 404, without the HTTP response its constructor reads
        error = RepositoryNotFoundError.__new__(RepositoryNotFoundError)
        Exception.__init__(error, "404 Client Error: Repository Not Found")
        raise error

    monkeypatch.setattr(huggingface_hub, "model_info", missing)
    with pytest.raises(ModelLoadError, match="the Hugging Face hub has no model of that name"):
        loading.resolved_model_config(model=UNKNOWN)
    assert config_reads == [True]


def test_a_model_the_hub_has_is_then_read_by_transformers(config_reads, online, monkeypatch):
    monkeypatch.setattr(huggingface_hub, "model_info", lambda repo_id, **kwargs: object())
    cached_only = loading.AutoConfig.from_pretrained

    def download_fails(source, **kwargs):  # transformers' download, failing at once (no network here)
        if kwargs.get("local_files_only"):
            return cached_only(source, **kwargs)
        config_reads.append(False)
        raise OSError(f"We couldn't connect to the hub to load {source}")

    monkeypatch.setattr(loading.AutoConfig, "from_pretrained", download_fails)
    with pytest.raises(ModelLoadError, match="Cannot find"):
        loading.resolved_model_config(model=UNKNOWN)
    assert config_reads == [True, False]


def test_a_closed_pipe_while_the_weights_load_is_not_called_unreadable_weights(tmp_path, monkeypatch):
    from test_loading import save_tiny_llama

    save_tiny_llama(tmp_path)

    def progress_bar_to_a_closed_pipe(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", progress_bar_to_a_closed_pipe)
    with pytest.raises(BrokenPipeError):
        loading.load_model(str(tmp_path), device="cpu")


def test_the_app_loads_again_quietly_once_its_output_is_silenced(monkeypatch):
    silenced, calls = [], []
    monkeypatch.setattr(closed_pipe, "silence_output", lambda: silenced.append(True))

    def load():
        calls.append(len(silenced))
        if not silenced:
            raise BrokenPipeError(32, "Broken pipe")
        return "loaded"

    assert closed_pipe.again_if_closed(load) == "loaded" and calls == [0, 1]


def test_resolving_a_hub_id_takes_no_lock_of_the_app(model):
    """Another page's step waits for the registry's lock (`ModelRegistry.get`); the look-up takes none."""
    registry = ModelRegistry(model)
    looked_up = threading.Event()
    with registry._lock:
        worker = threading.Thread(target=lambda: _resolve_then_set(registry, looked_up), daemon=True)
        worker.start()
        assert looked_up.wait(timeout=60)


def _resolve_then_set(registry: ModelRegistry, done: threading.Event) -> None:
    with pytest.raises(ModelLoadError):
        registry.resolve(UNKNOWN)
    done.set()


def test_prefill_refuses_an_unknown_hub_id_before_it_is_queued(model, monkeypatch):
    app = ServedHandlers(Served.create(ModelRegistry(model), LOCAL))
    monkeypatch.setattr(app, "validate_model_event", lambda *args: pytest.fail("queued"))
    inputs = [None] * 40
    inputs[PROMPT_INPUTS.index("model_choice")] = app.served.registry.default_choice
    inputs[PROMPT_INPUTS.index("prompt")] = "Hello"
    inputs[PROMPT_INPUTS.index("custom_model")] = UNKNOWN
    # in a thread of its own: a browser test's Playwright may hold this thread's event loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        results = pool.submit(asyncio.run, app.validate_prefill(None, *inputs)).result()
    refused = results[PROMPT_INPUTS.index("custom_model")]
    assert refused["is_valid"] is False and refused["message"].startswith(f"Cannot find '{UNKNOWN}'")
    assert all(result["is_valid"] for i, result in enumerate(results) if i != PROMPT_INPUTS.index("custom_model"))


@pytest.fixture(scope="module")
def model():
    from tiny_models import tiny_model

    return tiny_model("llama")
