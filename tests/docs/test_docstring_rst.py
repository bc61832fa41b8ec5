"""The docstrings the site renders (every `auto...` directive of docs/**/*.md, with the members it asks
for) read as reStructuredText the way they read as plain text: no prose line becomes a block quote, a
definition list, emphasis, a substitution or a link by accident. An indented block (a signature, a table
of arrays, a formula) is a literal block because the paragraph before it ends with `::`; `|x|` is written
as code, `|x|` in backticks. A property's summary renders as written: autodoc hands a property to napoleon
as an attribute, whose first line "TYPE: body" splits at a colon (issue 70). Source checks, no Sphinx
build (the -W build catches what warns)."""

from __future__ import annotations

import html
import importlib
import inspect
import re
from pathlib import Path

import docutils.core
import pytest
from docutils import nodes
from sphinx.ext.napoleon import Config
from sphinx.ext.napoleon.docstring import GoogleDocstring

DOCS = Path(__file__).parents[2] / "docs"
DIRECTIVE = re.compile(
    r"^\.\. auto(module|class|function|exception)::\s+(\S+)\n((?:   :.*\n)*)", re.MULTILINE
)
NAPOLEON = Config(napoleon_use_param=True, napoleon_use_rtype=True)
# what a plain-text docstring turns into by accident (the parameter table's bold names aside)
ACCIDENTS = (
    nodes.block_quote,
    nodes.definition_list,
    nodes.emphasis,
    nodes.strong,
    nodes.problematic,
    nodes.system_message,
    nodes.substitution_reference,
    nodes.reference,
    nodes.footnote_reference,
    nodes.citation_reference,
    nodes.title,
    nodes.transition,
    nodes.target,
)


def _import(qualified: str):
    parts = qualified.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    for part in parts[cut:]:
        obj = getattr(obj, part)
    return obj


def _rendered() -> tuple[dict[str, str], set[str]]:
    """({qualified name: docstring} of every object the site's pages document, the names of properties)."""
    found, properties = {}, set()
    for page in sorted(DOCS.rglob("*.md")):
        if "_build" in page.parts:
            continue
        for kind, name, options in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            obj = _import(name)
            doc = inspect.cleandoc(obj.__doc__ or "") if kind == "module" else inspect.getdoc(obj)
            found[name] = doc or ""
            members = re.search(r":members:(.*)", options)
            if kind == "class" and members:
                wanted = [m.strip() for m in members.group(1).split(",") if m.strip()]
                for attr in wanted or [a for a in vars(obj) if not a.startswith("_")]:
                    member = inspect.getattr_static(obj, attr)
                    if isinstance(member, property) or callable(getattr(obj, attr)):
                        found[f"{name}.{attr}"] = inspect.getdoc(member) or ""
                    if isinstance(member, property):
                        properties.add(f"{name}.{attr}")
    return found, properties


RENDERED, PROPERTIES = _rendered()


def accidents(doc: str) -> list[str]:
    """The accidental markup of a docstring, as napoleon hands it to reStructuredText."""
    text = str(GoogleDocstring(doc, NAPOLEON))
    tree = docutils.core.publish_doctree(text, settings_overrides={"report_level": 5, "halt_level": 5})
    found = []
    for node in tree.findall(lambda n: isinstance(n, ACCIDENTS)):
        if isinstance(node, nodes.strong) and isinstance(node.parent, nodes.field_name):
            continue
        found.append(f"{type(node).__name__}: {' '.join(node.astext().split())[:60]}")
    return found


def property_summary(doc: str, name: str = "x") -> str:
    """A property's first line as napoleon hands it on: autodoc passes a property as an attribute, whose
    first line napoleon reads as "type: description" where it holds a colon outside `code`."""
    text = str(GoogleDocstring(doc, NAPOLEON, what="property", name=name))
    return "" if ":type:" in text else text.lstrip().splitlines()[0]


def test_the_check_sees_a_colon_in_a_propertys_first_line():
    assert property_summary("The stats recorded: entropy first.") != "The stats recorded: entropy first."
    assert property_summary("The stats recorded (`stats=`), entropy first.\n\nMore: here.") == (
        "The stats recorded (`stats=`), entropy first."
    )


def test_the_check_sees_a_formula_an_indented_block_and_a_star():
    assert any("substitution" in a or "problematic" in a for a in accidents("The mean |difference|."))
    assert any("block_quote" in a for a in accidents("Intro.\n\n    q   (B, H, T, D)"))
    assert not accidents("Intro::\n\n    q   (B, H, T, D)\n\nThe mean `|difference|`.")
    assert any("problematic" in a for a in accidents("Takes **kwargs and *args."))


def test_the_site_renders_the_docstrings_of_the_reference():
    assert len(RENDERED) > 150 and "entropy_lens.EntropyRecorder.mean" in RENDERED


@pytest.mark.parametrize("name", sorted(n for n, doc in RENDERED.items() if doc))
def test_a_rendered_docstring_has_no_accidental_markup(name):
    found = accidents(RENDERED[name])
    assert not found, f"{name}: {found} (end the paragraph before an indented block with '::'; `|x|`)"


def test_the_site_documents_properties():
    assert len(PROPERTIES) > 20 and "entropy_lens.EntropyRecorder.key_stats" in PROPERTIES


@pytest.mark.parametrize("name", sorted(n for n in PROPERTIES if RENDERED[n]))
def test_a_propertys_summary_renders_as_written(name):
    first = RENDERED[name].splitlines()[0]
    assert property_summary(RENDERED[name], name) == first, (
        f"{name}: the first line {first!r} renders as 'TYPE: body' (a colon outside `code` in a property's "
        "first line); write it without the colon"
    )


def _plain(fragment: str) -> str:
    """A built page's fragment as its reader reads it: tags dropped, entities and smart quotes undone."""
    text = html.unescape(re.sub(r"<[^>]+>", "", fragment))
    for curly, straight in (("“", '"'), ("”", '"'), ("‘", "'"), ("’", "'"), ("…", "...")):
        text = text.replace(curly, straight)
    return " ".join(text.split())


@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
@pytest.mark.slow
def test_the_built_reference_shows_each_propertys_summary_as_written(site):
    """On the built pages, each property's description opens with its docstring's first line (code
    marks aside), and its signature carries no type made of that line."""
    entries = {}
    for page in sorted(site.rglob("*.html")):
        pattern = r'<dt class="sig sig-object py" id="([^"]+)">(.*?)</dt>\s*<dd>(.*?)</dd>'
        for name, signature, body in re.findall(pattern, page.read_text(encoding="utf-8"), re.DOTALL):
            entries.setdefault(name, (_plain(signature), _plain(body)))
    shown = [name for name in sorted(PROPERTIES) if RENDERED[name] and name in entries]
    assert len(shown) > 20 and "entropy_lens.EntropyRecorder.key_stats" in shown
    for name in shown:
        first = " ".join(RENDERED[name].splitlines()[0].replace("`", "").split())
        signature, body = entries[name]
        assert body.startswith(first), f"{name}: the page shows {body[:80]!r}, not {first!r}"
        assert first[: len(first) // 2] not in signature, f"{name}: its summary became a type: {signature!r}"
