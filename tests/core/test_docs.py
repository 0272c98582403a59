"""The manual holds together: README.md and docs/ link only to files that exist, every page
is in mkdocs.yml's nav, and the configuration reference is what docs/gen_settings.py makes
of today's settings code (so a new setting is documented the day it is added).

Reads files only: no Django, no network, no MkDocs needed.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

from tests.conftest import service_required

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# [text](target) and [text]: target, outside code spans and fenced blocks.
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _markdown_files():
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _links(text: str) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", text))
    return INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text)


def _is_relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) and not target.startswith(
        ("#", "/")
    )


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_settings", DOCS / "gen_settings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages() -> set[str]:
    # mkdocs.yml's nav entries are `Title: path.md`; read them without a YAML dependency.
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    return set(re.findall(r":\s*([\w./-]+\.md)\s*$", nav, re.MULTILINE))


def test_every_relative_link_points_to_an_existing_file():
    broken = []
    for path in _markdown_files():
        for target in _links(path.read_text()):
            if not _is_relative(target):
                continue
            file_part = unquote(target.split("#", 1)[0])
            if file_part and not (path.parent / file_part).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_links_inside_the_site_stay_inside_docs():
    # MkDocs only serves what is under docs/: a page linking ../../cli/README.md works on
    # GitHub and is a dead link on the site. Name repository files in `code` instead.
    outside = []
    for path in DOCS.rglob("*.md"):
        for target in _links(path.read_text()):
            file_part = target.split("#", 1)[0]
            if _is_relative(target) and file_part:
                resolved = (path.parent / unquote(file_part)).resolve()
                if DOCS.resolve() not in resolved.parents:
                    outside.append(f"{path.relative_to(ROOT)}: {target}")
    assert outside == []


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    nav = _nav_pages()
    assert pages - nav == set(), "pages missing from mkdocs.yml's nav"
    assert nav - pages == set(), "nav entries without a page"


def test_configuration_reference_is_up_to_date_with_the_settings_code():
    generator = _load_generator()
    committed = generator.REFERENCE.read_text()
    assert committed == generator.render(), (
        "docs/admins/configuration-reference.md is out of date: run python docs/gen_settings.py"
    )


def test_configuration_reference_lists_every_setting_call():
    source = "\n".join(path.read_text() for path in (ROOT / "config/settings").glob("*.py"))
    called = set(re.findall(r"\bsetting\(\s*\"\w+\",\s*\"(\w+)\"", source))
    reference = (DOCS / "admins" / "configuration-reference.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)` \|", reference, re.MULTILINE))
    assert called and called == listed


def test_generator_reads_the_comment_above_a_setting(tmp_path, monkeypatch):
    generator = _load_generator()
    module = tmp_path / "example.py"
    module.write_text(
        "# --- Things ---\n"
        "# How many things there are;\n"
        "# 0 means none.\n"
        'THINGS = setting("int", "GANTRY_THINGS", 3)\n'
        'OTHER = Path(setting("str", "GANTRY_OTHER", str(BASE / "x")))\n'
        'if ready and setting(\n    "bool", "GANTRY_READY", True\n):\n    pass\n'
    )
    found = generator.read_settings(module)
    assert [(s.name, s.kind, s.default, s.section) for s in found] == [
        ("GANTRY_THINGS", "int", "3", "Things"),
        ("GANTRY_OTHER", "str", 'str(BASE / "x")', "Things"),
        ("GANTRY_READY", "bool", "True", "Things"),
    ]
    assert found[0].description == "How many things there are; 0 means none."
    assert found[1].description == ""


def test_the_site_builds_with_strict_checks(tmp_path):
    # What `make docs` serves: MkDocs itself, --strict, so a broken link or anchor fails CI.
    mkdocs = Path(sys.executable).with_name("mkdocs")
    service_required("mkdocs (make install's docs extra)", mkdocs.exists())
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "admins" / "isolation" / "index.html").exists()
