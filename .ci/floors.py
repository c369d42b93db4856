"""Print pyproject.toml's lower bounds as pip constraints (`name==floor`, one a line), the test extra's
included: CI installs them in a second environment to check that the floors the package declares work."""

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
for line in project["dependencies"] + project["optional-dependencies"]["test"]:
    requirement = Requirement(line)
    (floor,) = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    print(f"{requirement.name}=={floor}")
