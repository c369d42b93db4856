"""The package's long description (setup.py): the README whose pictures and relative links, which
the package index cannot resolve, are dropped or turned to their text, and nothing else changed."""

from __future__ import annotations

import re
import runpy

from docs_code import ROOT

long_description = runpy.run_path(str(ROOT / "setup.py"), run_name="setup")["long_description"]


def test_relative_links_become_their_text_and_relative_pictures_go():
    readme = ("# T\n\n![the view](docs/images/a.webp)\n\nSee [the views](docs/views/forward.md#how) and "
              "[the hub](https://huggingface.co/x).\n")
    assert long_description(readme) == "# T\n\nSee the views and [the hub](https://huggingface.co/x).\n"


def test_the_readme_keeps_every_line_of_text_and_loses_every_relative_link():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    described = long_description(readme)
    assert not re.search(r"\]\((?![a-z]+://)", described)  # no relative link or picture is left
    assert [h for h in readme.splitlines() if h.startswith("#")] == [
        h for h in described.splitlines() if h.startswith("#")]
    assert re.findall(r"```.*?```", readme, re.DOTALL) == re.findall(r"```.*?```", described, re.DOTALL)
