"""The files the page reads (stylesheet, keyboard shortcuts, ready examples), shipped inside the package
under `explorer/ui/assets/` and read through `importlib.resources`, so an installed wheel serves the
same page as a checkout."""

from __future__ import annotations

from importlib import resources

from explorer.errors import ExplorerError

ASSET_NAMES = ("app.css", "shortcuts.js", "examples.json")
ASSETS = resources.files("explorer.ui").joinpath("assets")  # a folder, or a folder inside a zip


def asset_text(name: str) -> str:
    """The text of the shipped asset `name` (one of `ASSET_NAMES`), UTF-8.

    Raises:
        ExplorerError: the file is missing or unreadable in the installed package (a broken install),
            with what to do; never an `OSError`, which the launcher would take for a port problem.
    """
    try:
        return ASSETS.joinpath(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise ExplorerError(
            f"The app's file assets/{name} is missing from the installed package ({exc.strerror or exc}). "
            "Reinstall it: pip install --force-reinstall llm-inference-explorer (or pip install -e . in a checkout)."
        ) from exc


def check_assets() -> None:
    """Read every shipped asset once, so a broken install is refused before any model work.

    Raises:
        ExplorerError: as `asset_text`.
    """
    for name in ASSET_NAMES:
        asset_text(name)
