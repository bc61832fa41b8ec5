"""The built API page documents every public method, property and keyword of the objects it lists, not only
the names of `__all__`: docs/reference/api.md names each object once (`autoclass`/`autofunction`), and
the page it builds must hold, for each class, an entry of every public method and property (its own or
inherited from the package's classes), and, for each callable, every keyword of its signature (or, for
one that forwards `**options`, of the callable it forwards them to). Builds the site once, as
tests/docs/test_docs.py's slow tests do."""

from __future__ import annotations

import enum
import html
import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "docs"))
try:
    import conf  # docs/conf.py
finally:
    sys.path.remove(str(ROOT / "docs"))
API = ROOT / "docs" / "reference" / "api.md"
DIRECTIVE = re.compile(r"^\.\. auto(class|function|exception)::\s+(\S+)\n((?:   :.*\n)*)", re.MULTILINE)


def _forwards():
    """{entry: the callable whose keywords an entry's `**options` are}."""
    from entropy_lens.capture import ScaleSession

    return {"entropy_lens.EntropyRecorder": ScaleSession.__init__}


def _import(qualified: str):
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


def entries() -> dict[str, object]:
    """{qualified name: object} of every object docs/reference/api.md documents (its indexed entries)."""
    found = {}
    for match in DIRECTIVE.finditer(API.read_text(encoding="utf-8")):
        if ":no-index:" not in match.group(3):
            found[match.group(2)] = _import(match.group(2))
    return found


def _ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "entropy_lens"


def public_members(cls: type) -> list[str]:
    """The public methods and properties of `cls`: defined on it or on a base of the package's (an
    undocumented override of an outside base's method, a Trainer event, is that base's to document:
    docs/conf.py's outside_override)."""
    names = []
    for base in reversed([c for c in cls.__mro__ if _ours(c)]):
        for name, member in vars(base).items():
            if name.startswith("_") or name in names or conf.outside_override(base, name):
                continue
            if isinstance(member, (property, classmethod, staticmethod)) or inspect.isfunction(member):
                names.append(name)
    return names


def keywords(obj) -> list[str]:
    """The named parameters of a callable (self, cls, *args and **kwargs aside; an enum's is its value)."""
    if isinstance(obj, enum.EnumType):
        return ["value"]
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return []
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in params if p.name not in ("self", "cls") and p.kind not in skip]


def _sections(page: str) -> dict[str, str]:
    """{id: the HTML of its entry, signature to the next signature}."""
    heads = list(re.finditer(r'<dt class="sig sig-object py" id="([^"]+)">', page))
    ends = [h.start() for h in heads[1:]] + [len(page)]
    return {h.group(1): page[h.start() : end] for h, end in zip(heads, ends, strict=True)}


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def missing(page: str) -> list[str]:
    """What the built API page `page` lacks: "name: member" or "name: keyword=" lines."""
    sections = _sections(page)
    lacking = []
    for name, obj in entries().items():
        if name not in sections:
            lacking.append(f"{name}: no entry")
            continue
        wanted = keywords(obj)
        if name in _forwards():
            wanted += keywords(_forwards()[name])
        text = _text(sections[name])
        lacking += [f"{name}: {kw}=" for kw in wanted if not re.search(rf"\b{re.escape(kw)}\b", text)]
        if not isinstance(obj, type):
            continue
        for member in public_members(obj):
            key = f"{name}.{member}"
            if key not in sections:
                lacking.append(f"{name}: {member} (no entry)")
                continue
            value = inspect.getattr_static(obj, member)
            if isinstance(value, property):
                continue
            text = _text(sections[key])
            lacking += [
                f"{key}: {kw}="
                for kw in keywords(getattr(obj, member))
                if not re.search(rf"\b{re.escape(kw)}\b", text)
            ]
    return lacking


def test_the_check_sees_a_missing_method_and_keyword():
    page = '<dt class="sig sig-object py" id="entropy_lens.EntropyRecorder">(model, **options)</dt>'
    lacking = missing(page)
    assert "entropy_lens.EntropyRecorder: scales=" in lacking
    assert "entropy_lens.EntropyRecorder: mean (no entry)" in lacking
    assert "entropy_lens.ScanResult: no entry" in lacking


@pytest.mark.slow
@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
def test_the_built_api_page_holds_every_public_method_property_and_keyword(site):
    page = (site / "reference" / "api.html").read_text(encoding="utf-8")
    lacking = missing(page)
    assert not lacking, (
        "missing from the built API page (docs/reference/api.md: :members:; Args): " + "; ".join(lacking)
    )
