"""The docs site builds strictly, holds every page, and keeps its pages short."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from tests.docs.conftest import ROOT, mkdocs_build

DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """Every Markdown page of the site's sources (the hooks' folder is not part of the site)."""
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)


def nav_pages() -> list[str]:
    """The pages mkdocs.yml's nav names, in order (its entries are ``- Title: page.md``)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.partition("\nnav:\n")[2]
    assert nav, "mkdocs.yml has no nav"
    return re.findall(r"^\s+- (?:[^\n]*?: )?([\w/.-]+\.md)$", nav, flags=re.MULTILINE)


def test_no_page_is_over_400_lines(hooks: ModuleType) -> None:
    assert hooks.MAX_LINES == 400
    long = {
        str(p.relative_to(DOCS)): n for p in pages() if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}, "pages over 400 lines: split them"


def test_every_page_is_in_the_nav_once_and_every_nav_entry_is_a_page() -> None:
    listed = nav_pages()
    assert len(listed) == len(set(listed)), "a page is listed twice"
    assert set(listed) == {str(p.relative_to(DOCS)) for p in pages()}


def test_the_site_builds_strictly_with_the_settings_generated(site: Path) -> None:
    from app.settings import Settings

    html = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    for name in Settings.model_fields:
        assert f"<code>MASKSCOPE_{name.upper()}</code>" in html, name
    assert "settings:" not in html, "a marker was left unfilled"
    assert (site / "results" / "index.html").read_text().count("<table>") >= 5, "bench/RESULTS.md"


def test_a_page_over_the_limit_fails_the_strict_build(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Long\n" + "line\n\n" * 201)
    (tmp_path / "mkdocs.yml").write_text(
        f"site_name: t\nhooks:\n  - {DOCS / 'hooks' / 'maskscope.py'}\n"
    )
    built = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert re.search(r"index\.md is 403 lines, over the 400", built.stderr), built.stderr


def test_a_dead_link_fails_the_strict_build(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Page\n\n[gone](nowhere.md)\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\n" + _validation())
    built = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0 and "nowhere.md" in built.stderr


def _validation() -> str:
    """The site's own ``validation:`` block, so the dead-link test checks its settings."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    found = re.search(r"^validation:\n(?:  .*\n)+", text, flags=re.MULTILINE)
    assert found
    return found.group(0)


#: A path of this repository named in code: ``app/engine/kernels/gguf.py``, ``tests/fixtures/``
#: (a glob, ``static/playground/*.js``, is not one).
REPO_PATH = re.compile(r"`((?:app|tests|bench|schemas|static|templates|docs|web-vendor)/[\w./-]*)`")


#: Pages whose paths are not checked: architecture.md names paths inside a room
#: (``schemas/forms.py`` for ``app/web/schemas/forms.py``), which this check cannot tell apart.
UNCHECKED = {"architecture.md"}


def test_every_path_the_docs_name_exists() -> None:
    missing: dict[str, list[str]] = {}
    for page in [ROOT / "README.md", *(p for p in pages() if p.name not in UNCHECKED)]:
        for path in REPO_PATH.findall(page.read_text(encoding="utf-8")):
            if not (ROOT / path).exists():
                missing.setdefault(str(page.relative_to(ROOT)), []).append(path)
    assert missing == {}, "pages that name files which are not there (moved? say where)"
