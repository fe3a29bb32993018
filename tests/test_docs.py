"""The README and docs pages: every relative link resolves to a file in the repository, the README
stays short, and no page narrates history ("session N")."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_readme_is_short_and_pages_state_rules_not_history():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert not re.search(r"\bsessions?\b", page.read_text(), re.I), page
    sources = [p for p in (ROOT / "src").rglob("*.py")]
    assert sources and not [p for p in sources if re.search(r"\bsessions?\b", p.read_text(), re.I)]
