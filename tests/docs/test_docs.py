"""The documentation site (docs/, Sphinx + MyST): the reference pages name every public name and every
flag of every command, and the site builds offline with warnings as errors, as `make docs` runs it.
The build takes about a minute on 2 cores: those tests are slow; the source checks are not."""

from __future__ import annotations

import enum
import html
import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest

import entropy_lens
import entropy_lens.analysis
import entropy_lens.kernels
import entropy_lens.monitor
from entropy_lens.cli import build_parser

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
PUBLIC = [
    (module.__name__, module.__all__)
    for module in (entropy_lens, entropy_lens.kernels, entropy_lens.monitor, entropy_lens.analysis)
]


def _commands():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return dict(sub.choices)


def _flags(command) -> list[str]:
    return [
        s for a in command._actions if a.option_strings for s in a.option_strings if s not in ("-h", "--help")
    ]


def test_the_api_page_documents_every_public_name():
    page = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    for module, names in PUBLIC:
        for name in names:
            prefix, bare = re.escape(f"{module}."), re.escape(name)
            # a py:data inside its automodule names the bare name (a prefix there would repeat the module's)
            assert re.search(
                rf"(auto\w+::\s+{prefix}{bare}|py:data::\s+({prefix})?{bare})\s*$", page, re.MULTILINE
            ), f"{module}.{name} is public: add it to docs/reference/api.md"


def test_the_cli_extension_lists_every_flag_with_its_help():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from cli_reference import flag_rows
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    for name, command in _commands().items():
        rows = flag_rows(command)
        listed = " ".join(flags for flags, _ in rows)
        for flag in _flags(command):
            assert re.search(rf"(^|[ ,]){re.escape(flag)}([ ,]|$)", listed), f"{name} {flag}"
        helps = {
            a.help
            for a in command._actions
            if a.help and set(a.option_strings) - {"-h", "--help"} and "%" not in a.help
        }
        for text in helps:
            assert any(text.strip() in row for _, row in rows), f"{name}: {text[:40]}"


def test_every_guide_is_in_the_table_of_contents():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in sorted((DOCS / "guides").glob("*.md")) + sorted((DOCS / "internals").glob("*.md")):
        assert f"{page.parent.name}/{page.stem}\n" in index, page


def test_the_readme_is_short_and_about_the_toolkit():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for words in ("on our machines", "2 cores", "measured here", "this machine", "| len |"):
        assert words not in readme, words
    for link in re.findall(r"\]\(((?:docs|notebooks|figures)/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_the_install_guides_times_say_where_and_from_what_they_were_measured():
    """Every time the install guide states sits in its table, beside the machine it ran on and what was
    already there (a cached torch, a built kernel), and `make test`'s own time is among them (issue 61)."""
    page = (DOCS / "guides" / "install.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- times -->\n(.*?)\n<!-- /times -->", page, flags=re.DOTALL)
    assert table, "docs/guides/install.md: the <!-- times --> table"
    header, _, *rows = table.group(1).splitlines()
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "command",
        "time",
        "machine",
        "already there",
    ]
    commands = set()
    for row in rows:
        command, time, machine, there = (c.strip() for c in row.strip().strip("|").split("|"))
        assert re.search(r"\d+(\.\d+)? (s|min)\b", time) and machine and there, row
        commands.add(re.match(r"`[^`]+`", command).group(0))  # the command, without what follows it
    assert {"`make demo`", "`make test`"} <= commands
    outside = page.replace(table.group(0), "")
    assert not re.search(r"\d+ min \d+ s|\d+(\.\d+)? min\b", outside), "a time outside the table"


def test_no_page_types_the_number_of_tests():
    """A count of tests typed into a page is stale at the next commit (issue 70: "5,322 passed" when the
    suite had 5,856): a page says what `make test` runs, not how many."""
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    pages = [p for p in pages if "_build" not in p.parts]
    assert len(pages) > 20
    for page in pages:
        found = re.search(r"\b\d[\d,]* (passed|tests? pass|tests\b)", page.read_text(encoding="utf-8"))
        assert not found, (
            f"{page.relative_to(ROOT)}: {found.group(0)!r}; drop the count (it is not generated)"
        )


def _text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


@pytest.mark.slow
@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
def test_the_built_reference_holds_every_public_name(site):
    api = site / "reference" / "api.html"
    ids = set(re.findall(r'id="([^"]+)"', api.read_text(encoding="utf-8")))
    for module, names in PUBLIC:
        for name in names:
            assert f"{module}.{name}" in ids or f"{module}.{name}" in _text(api), f"{module}.{name}"
    assert "(B, Hq, T, D)" in _text(api)  # the kernels' shape contract, from their docstring


def _resolve(qualified: str):
    """The object an entry's id names ("entropy_lens.monitor.History.at"), read as the page's reader
    would (`entropy_lens.kernels.plan` is the function, not the module); None for a property."""
    parts = qualified.split(".")
    obj = importlib.import_module(parts[0])
    for part in parts[1:]:
        if isinstance(obj, type) and isinstance(inspect.getattr_static(obj, part, None), property):
            return None  # a property: no arguments
        found = getattr(obj, part, None)
        if found is None and inspect.ismodule(obj):
            found = importlib.import_module(f"{obj.__name__}.{part}")
        obj = found
    return obj


def _takes_arguments(obj) -> bool:
    if not callable(obj):
        return False
    if isinstance(obj, enum.EnumType):
        return True  # Backend("auto")
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # an exception class: its message is no documented argument
        return False
    return any(name not in ("self", "cls") for name in params)


@pytest.mark.slow
@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
def test_every_public_callable_in_the_built_reference_has_a_parameter_table(site):
    """Napoleon renders a docstring's Args as the "Parameters" field list: each entry (its signature to
    the next entry's) of a callable that takes an argument holds one, and every public callable that
    takes one has an entry (an object shown twice, `:no-index:`, is checked where it has its id)."""
    page = (site / "reference" / "api.html").read_text(encoding="utf-8")
    heads = list(re.finditer(r'<dt class="sig sig-object py" id="([^"]+)">', page))
    shown = set()
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        obj = _resolve(head.group(1))
        shown.add(id(obj))
        if not _takes_arguments(obj):
            continue
        entry = page[head.start() : after.start() if after else None]
        table = re.search(r'<dl class="field-list[^"]*">\s*<dt class="field-\w+">Parameters<', entry)
        assert table, f"{head.group(1)}: no parameter table (Args section) in the built reference"
    for module, names in PUBLIC:
        for name in names:
            obj = getattr(importlib.import_module(module), name)
            if _takes_arguments(obj):
                assert id(obj) in shown, f"{module}.{name} has no entry of its own in the API page"


@pytest.mark.slow
@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
def test_the_built_cli_reference_holds_every_command_and_flag(site):
    page = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    for name, command in _commands().items():
        start = page.index(f'id="cli-{name}"')
        end = page.find('<section id="cli-', start + 1)
        section = html.unescape(re.sub(r"<[^>]+>", "", page[start : end if end > 0 else None]))
        for flag in _flags(command):
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}([\s,\]=]|$)", section), f"{name} {flag}"


@pytest.mark.slow
@pytest.mark.xdist_group("docs-site")  # one worker builds the site (conftest.site)
def test_the_site_is_offline_and_renders_the_notebooks_and_figures(site):
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', text), page
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        page = site / "tutorials" / f"{notebook.stem}.html"
        # rendered with their outputs (tools/tutorial_outputs.py): each shows its plots
        assert page.is_file() and page.read_text(encoding="utf-8").count("<img") >= 3, notebook.name
    figures = _text(site / "figures.html")
    assert "Figure 17" in figures and (site / "_images").is_dir()
    assert "bundled models" in _text(site / "reference" / "cli.html")  # an epilog, from the parser


def test_the_monitor_guide_runs_as_written():
    """The training-time monitoring guide's Python blocks, run in order in one namespace, on the embedded
    tiny NoPE model: the loop records, the Trainer callback builds, QK-clip runs."""
    page = (DOCS / "guides" / "monitor.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/guides/monitor.md", "exec"), namespace)  # noqa: S102 - the page's own code
    mon, latest = namespace["mon"], namespace["latest"]
    assert set(latest) == {"entropy", "max_logit"} and latest["entropy"].ndim == 2
    assert "attention/entropy/layer_0/mean" in namespace["scalars"]
    assert namespace["history"].steps.tolist() == [1, 2, 3] and mon.recorded == 3


def test_the_kvpress_guide_parses_here_and_runs_in_its_environment():
    """The kvpress guide's Python blocks need kvpress, whose transformers (< 5.3) is not this environment's:
    here they are parsed only; tests/kvpress_cases.py runs them as written (at 1,024 tokens) in
    .venv-kvpress, through tests/kvpress/test_kvpress.py."""
    page = (DOCS / "guides" / "kvpress.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert blocks and "TOKENS = 2_048" in blocks[0]  # the line the run cuts to a test's length
    for block in blocks:
        compile(block, "docs/guides/kvpress.md", "exec")
    cases = (ROOT / "tests" / "kvpress_cases.py").read_text(encoding="utf-8")
    assert "def test_the_guide_runs_as_written" in cases


def test_no_page_installs_the_package_from_an_index():
    """entropy-lens is not published (issue 70: `pip install 'entropy-lens[kvpress]'` finds no
    distribution): every page installs it from a clone, `pip install -e '.[extra]'` or `make`, and the
    kvpress guide runs its examples in the environment `make kvpress-env` builds."""
    pages = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
    installs = 0
    for page in pages:
        for line in page.read_text(encoding="utf-8").splitlines():
            assert not re.search(r"pip install\s+['\"]?entropy[-_]lens", line), (
                f"{page.relative_to(ROOT)}: {line.strip()!r}; the package is not published: "
                "pip install -e '.[extra]' from a clone"
            )
            installs += bool(re.search(r"pip install -e '\.\[\w+\]'", line))
    assert installs >= 3
    guide = (DOCS / "guides" / "kvpress.md").read_text(encoding="utf-8")
    for words in (
        "pip install -e '.[kvpress]'",
        "make kvpress-env",
        ".venv-kvpress/bin/python",
        "not published",
    ):
        assert words in guide, words


def test_the_generation_guide_runs_as_written(tmp_path, monkeypatch):
    """The guide to attention while generating, its Python blocks run in order on the embedded tiny model:
    the recorder's result has a row per generated token, its file reads back, the slice has its shape."""
    page = (DOCS / "guides" / "generation.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 5  # and the nnsight block (```py), run apart by tests/nnsight_cases.py
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/guides/generation.md", "exec"), namespace)  # noqa: S102 - the page's own code
    result = namespace["result"]
    assert result.tokens.shape == (2, 8) and namespace["entropy"].shape[:2] == (2, 8)
    loaded = namespace["GenerationResult"].load(tmp_path / "generation.npz")
    assert (loaded.tokens == result.tokens).all() and tuple(namespace["block"].shape) == (1, 4, 96, 16)
    where = namespace["where"]
    assert where.span_names == ("prompt", "generated", "opening") and namespace["lookback"].shape[-1] == 3
    assert namespace["copied"].shape == namespace["top"].shape == where.stat("entropy").shape
    answer, layers, heads = namespace["answer"], *where.stat("entropy").shape[2:]
    assert namespace["ratio"].shape == (1, 6, layers, heads) and namespace["features"].shape == (
        3,
        layers * heads,
    )
    assert namespace["scores"].shape == (1, layers, heads) and len(namespace["watched"]) == 6
    assert answer.tokens[0].tolist() == namespace["prompt"].answer.tolist()  # the tiny model answers
    page = (tmp_path / "generation.html").read_text(encoding="utf-8")  # the viewed generation
    assert 'id="generation-section"' in page and '"label":"where"' in page


def test_the_passkey_guide_runs_as_written(monkeypatch):
    """The passkey guide's Python block, run from the repository's root as the page's paths assume: SmolLM2's
    committed record becomes a pattern of its 3 KV heads that reads back as exported."""
    import numpy as np

    page = (DOCS / "guides" / "passkey.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 1
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(blocks[0], "docs/guides/passkey.md", "exec"), namespace)  # noqa: S102 - the page's own code
    pattern = namespace["pattern"]
    assert pattern.heads.shape == (30, 9) and pattern.scores.shape == (30, 3)
    assert (namespace["sink"], namespace["recent"]) == (64, 256)
    np.testing.assert_allclose(namespace["scores"], pattern.scores, atol=5e-7)
