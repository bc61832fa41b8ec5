"""The built site looks like its peers' (furo, as many scientific Python projects use): a table of contents
on every page, light and dark mode, a copy button on code, the home page's figure and the README's four
quick starts, the copyright holder in the footer, one anchor per id, search results with the words around
the match, and docstrings rendered as text (reStructuredText through napoleon), not as literal blocks."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "docs"))
try:
    import conf  # docs/conf.py: the site's configuration
finally:
    sys.path.remove(str(ROOT / "docs"))


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_configuration_names_the_theme_its_extensions_and_the_copyright_holder():
    assert conf.html_theme == "furo"
    assert "sphinx_copybutton" in conf.extensions
    assert conf.author and conf.author in conf.copyright and conf.copyright.strip(" ,.")
    assert conf.html_show_search_summary is True


def test_the_docs_extra_installs_what_the_configuration_loads():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"^docs = \[(.*)\]$", pyproject, re.MULTILINE).group(1)
    for package in ("sphinx", "myst-nb", "furo", "sphinx-copybutton"):
        assert f'"{package}' in extra, package


def test_the_home_page_quick_starts_are_the_readmes_four():
    """docs/conf.py reads them from the README at build time: the command line, Python, the monitor and the
    integrations, each with the README's code, links to docs/ pages made relative to the site."""
    text = conf._readme_quickstarts(_readme())
    titles = re.findall(r"^### (.+)$", text, re.MULTILINE)
    assert titles == ["The command line", "Python", "Training monitor", "Integrations"]
    blocks = re.findall(r"```(?:bash|python)\n.*?```", _readme(), flags=re.DOTALL)
    quick = [b for b in blocks if "entropy-lens scan" in b or "from entropy_lens import" in b]
    assert len(quick) >= 3 and all(block in text for block in quick)
    assert "](docs/" not in text
    monitor = text.split("### Training monitor", 1)[1]
    assert "AttentionMonitor(" in monitor and "scan(ScanConfig(" not in monitor


@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
@pytest.mark.slow
def test_the_site_uses_the_theme_with_its_contents_dark_mode_and_copy_button(site):
    for name in ("index.html", "reference/api.html", "guides/monitor.html"):
        page = (site / name).read_text(encoding="utf-8")
        assert 'class="toc-tree"' in page, f"{name}: no on-page table of contents"
        assert "theme-toggle" in page, f"{name}: no light/dark switch"
        assert re.search(r'<script src="[^"]*_static/copybutton\.js', page), f"{name}: no code-copy"
        assert 'role="main"' in page  # where the search reads a result's text from
    assert (site / "_static" / "copybutton.js").is_file() and (site / "_static" / "styles").is_dir()


@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
@pytest.mark.slow
def test_the_home_page_shows_a_figure_and_the_four_quick_starts(site):
    page = (site / "index.html").read_text(encoding="utf-8")
    image = re.search(r'<img[^>]+src="(_images/[^"]+)"', page)
    assert image and (site / image.group(1)).is_file()
    text = _text(page)
    for title in ("The command line", "Python", "Training monitor", "Integrations"):
        assert re.search(rf'<h3>{title}<a class="headerlink"', page), title
    for needle in (
        "entropy-lens scan tiny-nope",
        "scan(ScanConfig(",
        "AttentionMonitor(model",
        "ObservedAttentionPress",
    ):
        assert needle.replace(" ", "") in text.replace(" ", ""), needle


@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
@pytest.mark.slow
def test_the_footer_names_the_copyright_holder(site):
    page = (site / "index.html").read_text(encoding="utf-8")
    footer = _text(re.search(r'<div class="copyright">(.*?)</div>', page, re.DOTALL).group(1))
    assert footer == f"Copyright © {conf.copyright}" and conf.author in footer


@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
@pytest.mark.slow
def test_no_page_repeats_an_anchor(site):
    for page in sorted(site.rglob("*.html")):
        ids = re.findall(r'\sid="([^"]+)"', page.read_text(encoding="utf-8"))
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        assert not repeated, f"{page.relative_to(site)}: {repeated}"
        assert not any(i.startswith("entropy_lens.entropy_lens.") for i in ids), page


@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
@pytest.mark.slow
def test_search_results_show_the_words_around_the_match(site):
    """Sphinx's searchtools fetches a result's page and shows the text around the match where the theme
    marks its content role="main" and the build asks for summaries (html_show_search_summary)."""
    options = (site / "_static" / "documentation_options.js").read_text(encoding="utf-8")
    assert re.search(r"SHOW_SEARCH_SUMMARY:\s*true", options)
    assert "makeSearchSummary" in (site / "_static" / "searchtools.js").read_text(encoding="utf-8")
    index = (site / "searchindex.js").read_text(encoding="utf-8")
    assert '"entropyrecord' in index.lower() and "reference/api" in index


@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
@pytest.mark.slow
def test_docstrings_render_as_text_not_literal_blocks(site):
    """Each documented object's description is text (paragraphs and the parameter table); a literal block
    appears only where a docstring asks for one (`::`, the kernels' contract and tables)."""
    page = (site / "reference" / "api.html").read_text(encoding="utf-8")
    entries = re.findall(
        r'<dt class="sig sig-object py" id="([^"]+)">.*?</dt>\s*<dd>(.*?)</dd>', page, re.DOTALL
    )
    assert len(entries) > 100
    described = [(name, body) for name, body in entries if body.strip()]
    as_text = [name for name, body in described if body.lstrip().startswith("<p>")]
    assert len(as_text) >= 0.95 * len(described), sorted({n for n, _ in described} - set(as_text))[:10]
    assert "highlight-text" not in page.split('id="module-entropy_lens.kernels"')[0]  # no literal prose
    parameters = page.count('<dt class="field-odd">Parameters')
    assert parameters > 80
