"""The package as a user gets it: the wheel built from the project's files alone, installed into a fresh
virtual environment that cannot see the repository, its `llm-explorer app` command started in an empty
folder; the page is served and a prefill runs through `gradio_client`.

The new environment takes its dependencies (torch, transformers, gradio, ...) from the test
environment's site-packages through a `.pth` file, read as a plain path: the test environment's own
`.pth` hooks (an editable install of this checkout among them) are not run, so `explorer` can only
come from the wheel. Nothing is downloaded: the wheel is built without build isolation (the test
environment's setuptools, >= 77) and installed with `--no-index`. About 30-60 s on 2 cores, most of
it the app's start (importing torch, transformers and gradio).
"""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest
from gradio_client import Client
from processes import free_port, wait_until_served

import explorer
from explorer.ui.static import ASSET_NAMES

pytestmark = [pytest.mark.real_model, pytest.mark.install]

ROOT = Path(__file__).resolve().parents[2]
PROJECT_FILES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "explorer")
START_TIMEOUT_S = 120


def build_wheel(into: Path) -> Path:
    """`pip wheel --no-deps` of a copy of the project's files (the checkout gets no build/ folder)."""
    source = into / "source"
    source.mkdir()
    for name in PROJECT_FILES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(into / "dist"), str(source)], check=True)
    (wheel,) = (into / "dist").glob("llm_inference_explorer-*.whl")
    return wheel


def fresh_environment(folder: Path, wheel: Path) -> Path:
    """A new virtual environment holding the wheel, its dependencies read from the test environment;
    returns its bin folder."""
    venv.EnvBuilder(with_pip=False).create(folder)
    bin_folder = folder / "bin"
    python = bin_folder / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(site, "test_environment.pth").write_text("\n".join(paths) + "\n")
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   env=clean_env())
    return bin_folder


def clean_env(**extra: str) -> dict:
    """This process's environment without what would point Python at the checkout."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return env | extra


def test_the_installed_command_serves_the_app_and_runs_a_prefill(tmp_path, embedded_cache_dir):
    wheel = build_wheel(tmp_path)
    assert wheel.name.startswith(f"llm_inference_explorer-{explorer.__version__}-")  # the one version, read
    dist_info = f"llm_inference_explorer-{explorer.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        assert "Apache License" in archive.read(f"{dist_info}/licenses/LICENSE").decode()
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        assert {f"explorer/ui/assets/{name}" for name in ASSET_NAMES} <= set(archive.namelist())
        assert "explorer/py.typed" in archive.namelist()  # type checkers read the package's own hints
    assert "Classifier: Typing :: Typed" in metadata and "Keywords: llm,inference," in metadata
    long_description = runpy.run_path(str(ROOT / "setup.py"), run_name="setup")["long_description"]
    description = metadata.split("\n\n", 1)[1]  # the long description, after the headers
    assert description.strip() == long_description((ROOT / "README.md").read_text(encoding="utf-8")).strip()
    assert "](docs/" not in description and "Content-Type: text/markdown" in metadata
    bin_folder = fresh_environment(tmp_path / "venv", wheel)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = clean_env(EXPLORER_CACHE_DIR=str(embedded_cache_dir), HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")

    where = subprocess.run([bin_folder / "python", "-c", "import explorer; print(explorer.__file__)"], cwd=workdir,
                           env=env, check=True, capture_output=True, text=True).stdout
    assert Path(where.strip()).is_relative_to(tmp_path / "venv")  # the wheel's copy, not the checkout's
    version = subprocess.run([bin_folder / "llm-explorer", "--version"], cwd=workdir, env=env, check=True,
                             capture_output=True, text=True).stdout
    assert version.startswith("llm-inference-explorer 0.")

    port = free_port()
    process = subprocess.Popen([bin_folder / "llm-explorer", "app", "--port", str(port)], cwd=workdir, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_served(url, process, START_TIMEOUT_S)
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200 and "LLM Inference Explorer" in page.read().decode()
        client = Client(url, verbose=False)
        try:
            parameters = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/prefill"]
            values = {"Prompt": "The capital of France is", "Use the chat template": False}
            outputs = client.predict(*[values.get(p["label"], p["parameter_default"]) for p in parameters["parameters"]],
                                     api_name="/prefill")
        finally:
            client.close()
        strip = next(o for o in outputs if isinstance(o, str) and 'class="token-strip"' in o)
        assert "Paris" in strip  # greedy: the embedded model's next token, served by the installed package
    finally:
        process.terminate()
        process.wait(timeout=30)
