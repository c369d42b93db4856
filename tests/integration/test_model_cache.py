"""The converted embedded model's cache: checked against its manifest on every load, converted again
when damaged (or refused with one line saying what to do), staging folders of killed conversions
removed at start, and a read-only cache that still lets the app start (the machine probe in memory).

Most tests use a stand-in conversion that writes small files through the real `_save_atomically`
and `write_manifest`, in a cache of their own; the two `real_model` tests work on copies (hard links,
never written: the read-only guard below refuses it) of the session's converted model.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from explorer.analysis.hardware import THIS_MACHINE
from explorer.errors import ModelLoadError
from explorer.runner import embedded, probe
from explorer.runner.loading import load_model
from explorer.ui import launch

WEIGHTS = np.linspace(-1, 1, 1024, dtype=np.float32)  # the stand-in model.safetensors: 4 KB of float32
FILES = {"config.json": b'{"num_hidden_layers": 30, "hidden_size": 576}', "generation_config.json": b"{}",
         "model.safetensors": WEIGHTS.tobytes(), "tokenizer.json": b'{"model": {}}'}


class _Part:
    """Stands in for the model or the tokenizer: `save_pretrained` writes the given files."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files

    def save_pretrained(self, folder: Path) -> None:
        for name, content in self.files.items():
            (folder / name).write_bytes(content)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache of the test's own, a 1 KB stand-in GGUF, and a stand-in conversion (recorded)."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" * 256)
    conversions = []

    def convert(destination, progress=None):
        conversions.append(destination)
        embedded._save_atomically(destination, [_Part(FILES)], finish=lambda staging: embedded.write_manifest(
            staging, gguf))

    monkeypatch.setattr(embedded, "gguf_path", lambda: gguf)
    monkeypatch.setattr(embedded, "convert_gguf", convert)
    return SimpleNamespace(folder=embedded.converted_dir(), conversions=conversions)


@pytest.fixture
def read_only(monkeypatch):
    """`read_only(folder)`: writes under `folder` fail as on a read-only file system (EROFS). The folder
    is also made read-only, but that alone stops nobody running as root, as tests here may."""
    roots: list[Path] = []

    def under(path) -> bool:
        try:
            resolved = Path(os.fspath(path)).resolve()
        except TypeError:  # a file descriptor
            return False
        return any(resolved == root or root in resolved.parents for root in roots)

    def refused(path):
        return OSError(errno.EROFS, "Read-only file system", str(path))

    def guard(function, n_paths=1):
        def guarded(*args, **kwargs):
            for path in args[:n_paths]:
                if under(path):
                    raise refused(path)
            return function(*args, **kwargs)
        return guarded

    for name, n_paths in (("mkdir", 1), ("rmdir", 1), ("unlink", 1), ("remove", 1), ("replace", 2), ("rename", 2)):
        monkeypatch.setattr(os, name, guard(getattr(os, name), n_paths))
    real_open, real_rmtree = builtins.open, shutil.rmtree

    def guarded_open(file, mode="r", *args, **kwargs):
        if any(flag in mode for flag in "wax+") and under(file):
            raise refused(file)
        return real_open(file, mode, *args, **kwargs)

    def guarded_rmtree(path, ignore_errors=False, *args, **kwargs):
        if under(path):
            if ignore_errors:
                return
            raise refused(path)
        return real_rmtree(path, ignore_errors, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)
    monkeypatch.setattr(shutil, "rmtree", guarded_rmtree)

    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        roots.append(folder.resolve())
        folder.chmod(0o555)
        return folder

    yield make
    for root in roots:
        root.chmod(0o755)


def linked_copy(source: Path, destination: Path, skip: tuple[str, ...] = ()) -> Path:
    """`destination` holding hard links to `source`'s files (copies where links fail), except `skip`."""
    destination.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file() and path.name not in skip:
            try:
                os.link(path, destination / path.name)
            except OSError:
                shutil.copy2(path, destination / path.name)
    return destination


def test_a_conversion_writes_a_manifest_of_every_file_and_the_next_load_trusts_it(cache):
    assert embedded.ensure_converted() == cache.folder
    manifest = embedded.json.loads((cache.folder / embedded.MANIFEST_FILE).read_text())
    assert sorted(manifest["files"]) == sorted(FILES)
    assert manifest["files"]["model.safetensors"]["size_bytes"] == WEIGHTS.nbytes
    assert manifest["files"]["config.json"]["sha256"] == embedded.hashlib.sha256(FILES["config.json"]).hexdigest()
    assert embedded.damage(cache.folder) is None
    embedded.ensure_converted()
    assert cache.conversions == [cache.folder]  # converted once


def _truncate(folder):
    (folder / "model.safetensors").write_bytes(WEIGHTS.tobytes()[:1000])


def _flip_a_sign(folder):
    weights = WEIGHTS.copy()
    weights[700] = -weights[700]
    (folder / "model.safetensors").write_bytes(weights.tobytes())


def _nan_weights(folder):
    weights = WEIGHTS.copy()
    weights[100:110] = np.nan
    (folder / "model.safetensors").write_bytes(weights.tobytes())


def _two_layers(folder):  # same length as the real config: the size check alone would miss it
    (folder / "config.json").write_bytes(FILES["config.json"].replace(b'"num_hidden_layers": 30',
                                                                      b'"num_hidden_layers": 02'))


def _no_manifest(folder):
    (folder / embedded.MANIFEST_FILE).unlink()


def _garbled_manifest(folder):
    (folder / embedded.MANIFEST_FILE).write_text('{"files": ')


def _missing_tokenizer(folder):
    (folder / "tokenizer.json").unlink()


DAMAGE = {
    "truncated": (_truncate, "model.safetensors is 1,000 bytes, the conversion wrote 4,096"),
    "flipped sign": (_flip_a_sign, "model.safetensors has changed since the conversion"),
    "NaN weights": (_nan_weights, "model.safetensors has changed since the conversion"),
    "config with 2 layers": (_two_layers, "config.json has changed since the conversion"),
    "no manifest": (_no_manifest, "no manifest.json"),
    "garbled manifest": (_garbled_manifest, "its manifest.json cannot be read"),
    "missing file": (_missing_tokenizer, "tokenizer.json is missing"),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_cache_is_found_and_converted_again(cache, kind):
    embedded.ensure_converted()
    damage, reason = DAMAGE[kind]
    damage(cache.folder)
    problem = embedded.damage(cache.folder)
    assert reason in problem
    messages = []
    assert embedded.ensure_converted(messages.append) == cache.folder
    assert cache.conversions == [cache.folder, cache.folder]
    assert messages == [f"The converted model in {cache.folder} is damaged ({problem}); converting it again"]
    assert embedded.damage(cache.folder) is None


@pytest.mark.parametrize("kind", ["truncated", "config with 2 layers"])
def test_a_damaged_cache_without_the_gguf_is_one_line_saying_what_to_do(cache, kind, monkeypatch, capsys):
    embedded.ensure_converted()
    damage, reason = DAMAGE[kind]
    damage(cache.folder)

    def no_gguf():
        raise ModelLoadError("The embedded model needs the GGUF, which is not installed here.")

    monkeypatch.setattr(embedded, "gguf_path", no_gguf)
    with pytest.raises(ModelLoadError):  # the app's start-up load (the page shows its message)
        launch.load_start_model(launch.parser().parse_args(["--device", "cpu"]))
    err = capsys.readouterr().err
    message = err.splitlines()[-1]
    assert message.startswith(f"error: The converted model in {cache.folder} is damaged ({reason}")
    assert "python -m explorer.runner.gguf_wheel" in message and "EXPLORER_CACHE_DIR" in message
    assert "Traceback" not in err
    assert cache.conversions == [cache.folder]  # not converted: there was nothing to convert from


def test_a_damaged_cache_that_cannot_be_replaced_says_to_move_the_cache(cache, read_only):
    embedded.ensure_converted()
    _truncate(cache.folder)
    read_only(cache.folder.parent)
    with pytest.raises(ModelLoadError) as error:
        embedded.ensure_converted()
    message = str(error.value)
    assert message.startswith(f"The converted model in {cache.folder} is damaged (model.safetensors is 1,000 bytes")
    assert "Read-only file system" in message and "Set EXPLORER_CACHE_DIR to a writable folder" in message


def test_the_staging_folder_of_a_conversion_killed_by_sigterm_is_removed_at_the_next_start(cache, tmp_path):
    embedded.ensure_converted()
    script = """
import sys, time
from pathlib import Path
from explorer.runner import embedded

class SlowModel:
    def save_pretrained(self, folder):
        (folder / "model.safetensors").write_bytes(bytes(2**20))
        print("writing", flush=True)
        time.sleep(120)

embedded._save_atomically(Path(sys.argv[1]) / "converted", [SlowModel()])
"""
    killed = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout.readline().strip() == "writing"
    finally:
        killed.send_signal(signal.SIGTERM)
        killed.wait(timeout=30)
    (left,) = tmp_path.glob(".converted-*")  # what the killed conversion left: the finding
    assert (left / "model.safetensors").stat().st_size == 2**20
    # beside the cache's own folder: one killed (pid gone), one live (this process), one of an old version
    name = cache.folder.name
    dead = shutil.move(left, cache.folder.parent / f".{name}-{killed.pid}-abcd1234")
    live = cache.folder.parent / f".{name}-{os.getpid()}-efgh5678"
    old, recent = cache.folder.parent / f".{name}-oldstyle", cache.folder.parent / f".{name}-recent"
    for folder in (live, old, recent):
        folder.mkdir()
    two_hours_ago_s = old.stat().st_mtime - 2 * 3600
    os.utime(old, (two_hours_ago_s, two_hours_ago_s))
    embedded.ensure_converted()
    assert not Path(dead).exists() and not old.exists()
    assert live.exists() and recent.exists() and embedded.damage(cache.folder) is None


def test_the_machine_probe_on_a_read_only_cache_is_kept_in_memory(tmp_path, monkeypatch, read_only):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(read_only(tmp_path / "cache")))
    measured = []
    measure = probe.measure
    monkeypatch.setattr(probe, "measure", lambda device: measured.append(device) or measure(device))
    first, second = probe.resolve_hardware(THIS_MACHINE), probe.resolve_hardware(THIS_MACHINE)
    assert measured == ["cpu"] and first == second and first.peak_flops_per_s("fp32")[0] > 1e8
    assert not list((tmp_path / "cache").iterdir())


def test_a_truncated_model_folder_is_a_message_not_a_traceback(tmp_path):
    config = LlamaConfig(vocab_size=97, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         num_hidden_layers=3, intermediate_size=37, max_position_embeddings=64)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    with pytest.raises(ModelLoadError, match="has a config but its weights cannot be read.*Re-download it"):
        load_model(str(tmp_path), device="cpu")


@pytest.mark.real_model
def test_the_app_starts_on_a_read_only_cache_without_the_probe(embedded_model, embedded_cache_dir, tmp_path,
                                                                monkeypatch, read_only, capsys):
    cache = tmp_path / "cache"
    folder_name = embedded.CONVERTED_FOLDER_NAME
    linked_copy(embedded_cache_dir / folder_name, cache / folder_name)
    read_only(cache)
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(cache))
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    launched = []
    monkeypatch.setattr(gr.Blocks, "launch", lambda demo, **kwargs: launched.append(kwargs))
    monkeypatch.setattr(gr.Blocks, "block_thread", lambda demo: None)
    launch.main(["--device", "cpu", "--port", "7999"])
    assert launched and launched[0]["server_port"] == 7999
    (loader,) = [thread for thread in threading.enumerate() if thread.name == "explorer-model-load"]
    loader.join(timeout=120)  # the model loads (and warms up) behind the page
    assert not loader.is_alive() and "error" not in capsys.readouterr().err
    hardware = probe.resolve_hardware(THIS_MACHINE)
    assert hardware.peak_flops_per_s("fp32")[0] > 1e8 and probe.resolve_hardware(THIS_MACHINE) == hardware
    assert sorted(p.name for p in cache.iterdir()) == [folder_name]  # nothing written


@pytest.mark.real_model
def test_a_real_truncated_cache_is_converted_again_and_loads_the_same_weights(embedded_model, embedded_cache_dir,
                                                                             tmp_path, monkeypatch):
    folder = tmp_path / "cache" / embedded.CONVERTED_FOLDER_NAME
    source = embedded_cache_dir / embedded.CONVERTED_FOLDER_NAME
    linked_copy(source, folder, skip=("model.safetensors",))
    with (source / "model.safetensors").open("rb") as weights:
        (folder / "model.safetensors").write_bytes(weights.read(2**20))
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    messages = []
    loaded = load_model(device="cpu", progress=messages.append)
    assert any("is damaged (model.safetensors is 1,048,576 bytes" in m and "converting it again" in m
               for m in messages)
    assert embedded.damage(folder) is None
    assert torch.equal(loaded.model.model.embed_tokens.weight, embedded_model.model.model.embed_tokens.weight)
