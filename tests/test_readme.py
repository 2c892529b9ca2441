"""The README stays a door: short, its commands real, every link leading somewhere in the
repository (the docs site holds the rest, and is checked by tests/docs/)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: The longest the README may be.
MAX_LINES = 250
#: The projects the README may link to outside the repository: the libraries it is built on.
CITED = ("https://github.com/mlc-ai/xgrammar", "https://github.com/guidance-ai/llguidance")
#: The commands the quick start gives.
COMMANDS = ("make run", "make test")

LINK = re.compile(r"\]\(([^)\s]+)\)")


def links(text: str) -> list[str]:
    """Every inline link target of a Markdown text, code blocks left out."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return LINK.findall(prose)


def slugify(heading: str) -> str:
    """A heading's anchor as the docs site makes it (Python-Markdown's toc ``slugify``)."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as the docs site (mkdocs' toc) makes them."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    headings = re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)
    return {slugify(heading.replace("`", "")) for heading in headings}


def makefile_targets() -> set[str]:
    """The targets the Makefile defines."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, flags=re.MULTILINE))


def section(heading: str) -> str:
    """The README's text under a ``## `` heading, up to the next one."""
    found = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert found, f"README.md has no section {heading!r}"
    return found.group(1)


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.splitlines()) <= MAX_LINES


def test_the_quick_start_is_the_two_commands_and_they_are_make_targets() -> None:
    block = re.search(r"```bash\n(.*?)```", section("Quick start"), re.S)
    assert block, "the quick start has no command block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert tuple(command for command in commands if command) == COMMANDS
    targets = makefile_targets()
    for command in COMMANDS:
        assert command.split()[1] in targets, command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci and "make lint" in ci


def test_links_outside_the_repository_go_only_to_the_cited_projects() -> None:
    outside = [t for t in links(README) if re.match(r"^[a-z][a-z0-9+.-]*:", t)]
    assert outside, "the README cites the libraries it is built on"
    for target in outside:
        assert target.startswith(CITED), f"{target}: a link out of the repository"


@pytest.mark.parametrize(
    "target", sorted({t for t in links(README) if not re.match(r"^[a-z]+:", t)})
)
def test_every_relative_link_resolves_inside_the_repository(target: str) -> None:
    path, _, anchor = target.partition("#")
    if not path:
        assert anchor in anchors(ROOT / "README.md"), f"#{anchor}: no such heading"
        return
    resolved = (ROOT / unquote(path)).resolve()
    assert resolved.is_relative_to(ROOT), f"{target}: outside the repository"
    assert resolved.is_file(), f"{target}: no such file"
    if anchor:
        assert anchor in anchors(resolved), f"{target}: no such heading"


def test_the_readme_links_the_docs_pages_a_newcomer_needs() -> None:
    targets = {t.partition("#")[0] for t in links(README)}
    for page in ("docs/getting-started.md", "docs/concepts.md", "docs/configuration.md"):
        assert page in targets, page
    assert "docs/configuration.md" in {t.partition("#")[0] for t in links(section("Configuration"))}


def test_the_glossary_defines_fifteen_terms_once_each() -> None:
    terms = re.findall(r"^\| \*\*([^*]+)\*\* \|", section("Glossary"), flags=re.MULTILINE)
    assert len(terms) == 15
    assert len({term.lower() for term in terms}) == len(terms)
