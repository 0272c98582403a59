"""`make examples` installs the `examples` extra: every library an example imports must
be in it (examples/mlflow_digits.py failed after `make examples` without mlflow)."""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
IN_TREE = {path.stem for path in EXAMPLES.glob("*.py")} | {"executor"}


def _name(requirement: str) -> str:
    return re.split(r"[=<>!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_examples_extra_has_every_library_the_examples_import():
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["examples"]
    pinned = {_name(r) for r in extra}
    assert all("==" in r for r in extra), extra
    distributions = packages_distributions()
    missing = {}
    for path in sorted(EXAMPLES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                if root in sys.stdlib_module_names or root in IN_TREE or root == "__future__":
                    continue
                names = {_name(d) for d in distributions.get(root, [root])}
                if not names & pinned:
                    missing.setdefault(root, path.name)
    assert not missing, f"imported by the examples, not in the examples extra: {missing}"
