"""The documentation's pages follow the code they describe: a page per view and per Lab experiment,
each experiment's page listing its parameters as the CLI and the app name them, and every picture a
page shows made by docs/screenshots.py."""

from __future__ import annotations

import re

from docs_code import ROOT

from explorer.figures.views import VIEW_TABLE
from explorer.lab.table import LAB

DOCS = ROOT / "docs"


def test_every_lab_experiment_has_a_page_with_its_parameters():
    for name, experiment in LAB.items():
        page = (DOCS / "lab" / f"{name}.md").read_text(encoding="utf-8")
        assert page.startswith("# ") and f"llm-explorer lab {name} " in page, name
        for param in experiment.params:
            default = param.name_of(param.default) if param.choices else param.default  # a menu by its name
            assert f"| `--{param.name.replace('_', '-')}` | {param.label} | {default} |" in page, (name, param)


def test_every_view_has_a_page_and_a_picture_in_the_tour():
    tour = (DOCS / "tour.md").read_text(encoding="utf-8")
    pages = {path.stem for path in (DOCS / "views").glob("*.md")}
    assert len(pages) == len(VIEW_TABLE) + 1  # and the "equivalent is not identical" experiment
    for view in VIEW_TABLE:
        assert f"images/view-{view}.webp" in tour, view


def test_every_picture_shown_is_one_the_screenshot_script_writes():
    script = (DOCS / "screenshots.py").read_text(encoding="utf-8")
    shown = {m for path in [ROOT / "README.md", *DOCS.rglob("*.md")]
             for m in re.findall(r"images/([\w-]+)\.webp", path.read_text(encoding="utf-8"))}
    made = set(re.findall(r'shoot\(f?"([\w{}-]+)"\)', script))
    expanded = {n for n in made if "{" not in n} | {f"view-{v}" for v in VIEW_TABLE} | {f"lab-{n}" for n in LAB}
    assert shown <= expanded and shown == {p.stem for p in (DOCS / "images").glob("*.webp")}


def test_every_relative_link_and_picture_of_the_readme_resolves():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(((?![a-z]+://)[^)#]+)(?:#([\w-]+))?\)", readme)
    assert len(targets) >= 15
    for path, anchor in targets:
        assert (ROOT / path).is_file(), path
        if anchor:  # MkDocs' heading ids: lower case, words joined by "-"
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(encoding="utf-8"), re.MULTILINE)
            assert anchor in {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower()) for h in headings}, anchor
