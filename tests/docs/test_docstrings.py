"""The public docstrings as the API reference renders them (docs/conf.py: napoleon's Google style, the
prose shown as written): each callable's Args/Returns/Raises sections parse into the field list that
becomes its parameter table, and no docstring enumerates a declared set (statistics, backends, fused
modes) by hand in a way that misses a member. Source checks, no Sphinx build: the built page's tables
are tests/docs/test_docs.py's."""

from __future__ import annotations

import enum
import importlib
import inspect
import re

import pytest
from sphinx.ext.napoleon import Config
from sphinx.ext.napoleon.docstring import GoogleDocstring

from entropy_lens import statistics
from entropy_lens.flags import BACKENDS, FUSED_MODES

MODULES = ("entropy_lens", "entropy_lens.kernels", "entropy_lens.monitor", "entropy_lens.analysis")
# modules whose docstrings state a contract a reader of the API reads beside it
CONTRACTS = (*MODULES, "entropy_lens.kernels.received", "entropy_lens.kernels.triton_entropy")
NAPOLEON = Config(napoleon_use_param=True, napoleon_use_rtype=True)
FIELD = re.compile(r"^:(param|type|returns|rtype|raises)\b")


def _public() -> dict[str, object]:
    """{qualified name: object} of every public callable and of its public methods and properties."""
    found = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj):
                continue
            found.setdefault(f"{module_name}.{name}", obj)
            if isinstance(obj, type):
                for attr, member in vars(obj).items():
                    if (
                        not attr.startswith("_")
                        and member.__doc__
                        and (callable(member) or hasattr(member, "fget"))
                    ):
                        found.setdefault(f"{module_name}.{name}.{attr}", getattr(obj, attr))
    return found


PUBLIC = _public()


def _takes_arguments(obj) -> bool:
    if isinstance(obj, property) or not callable(obj):
        return False
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # an exception class: its message is no documented argument
        return False
    return any(name not in ("self", "cls") for name in params)


def _fields(doc: str) -> list[str]:
    return [line for line in str(GoogleDocstring(doc, NAPOLEON)).splitlines() if FIELD.match(line)]


@pytest.mark.parametrize("name", sorted(n for n, obj in PUBLIC.items() if _takes_arguments(obj)))
def test_every_public_callable_documents_its_arguments(name):
    obj = PUBLIC[name]
    doc = inspect.getdoc(obj) or ""
    fields = _fields(doc)
    params = [line for line in fields if line.startswith(":param")]
    assert params, f"{name}: no Args section (napoleon, Google style) for its parameter table"
    assert fields[0].startswith(":param"), f"{name}: Args comes first, before Returns and Raises"
    documented = {re.sub(r"^:param (\\\*)*", "", line).split(":")[0].strip() for line in params}
    documented = {part.strip() for names in documented for part in names.split(",")}
    wanted = {
        p.name
        for p in inspect.signature(obj).parameters.values()
        if p.name not in ("self", "cls") and p.kind is not p.VAR_KEYWORD and p.kind is not p.VAR_POSITIONAL
    }
    if isinstance(obj, enum.EnumType):  # Flag("value"): the functional API's keywords are not its contract
        wanted = {"value"}
    assert wanted <= documented, f"{name}: Args lacks {sorted(wanted - documented)}"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_napoleon_leaves_the_prose_as_written_and_types_plain(name):
    """A line of prose that reads as a section header (`Note:`, `Example:` alone on a line) would become
    markup; a Returns line with a colon in its description would make a type of its first part."""
    doc = inspect.getdoc(PUBLIC[name]) or ""
    out = str(GoogleDocstring(doc, NAPOLEON)).splitlines()
    first = next((i for i, line in enumerate(out) if FIELD.match(line)), len(out))
    section = re.search(r"^(Args|Returns|Raises):$", doc, re.MULTILINE)
    prose = doc[: section.start()] if section else doc
    assert [line.rstrip() for line in out[:first]] == [line.rstrip() for line in prose.splitlines()], name
    for line in out:
        if line.startswith(":rtype:"):
            assert re.fullmatch(r":rtype: [\w.\[\], |]+", line), f"{name}: {line}"


def _enumerations(text: str, names) -> list[set[str]]:
    """The names of each run of three or more of `names` in `text`, separated by commas, "|", "/", "or"
    or "and" (quoted or not): a hand-written list of a declared set."""
    word = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    token = rf"[\"'`]?(?<![\w.])(?:{word})(?![\w])[\"'`]?"
    sep = r"\s*(?:,\s*(?:or\s+|and\s+)?|\|\s*|/\s*|\s+or\s+|\s+and\s+)\s*"
    runs = re.finditer(rf"{token}(?:{sep}{token}){{2,}}", text)
    return [set(re.findall(rf"(?<![\w.])(?:{word})(?![\w])", run.group())) for run in runs]


DECLARED = {  # a declared set and the lists of it generated from a declaration (complete by construction)
    "statistics.STATISTICS": (tuple(statistics.STATISTICS), statistics.EXTRA_STATS),
    "statistics.KEY_STATISTICS": (tuple(statistics.KEY_STATISTICS),),
    "flags.BACKENDS": (BACKENDS,),
    "flags.FUSED_MODES": (FUSED_MODES,),
}


def test_the_enumeration_check_finds_a_list_that_misses_one():
    text = "stats: entropy, sink_mass, max_prob, collision_entropy, varentropy, distance, first_mass"
    found = _enumerations(text, statistics.STATISTICS)
    assert found and set(statistics.STATISTICS) - found[0] == {"recent_mass", "max_logit"}
    assert _enumerations('"auto", "reference", "torch_chunked" or "native"', BACKENDS)
    assert not _enumerations("the entropy and the loss, per head", statistics.STATISTICS)


def test_no_public_docstring_enumerates_a_declared_set_by_hand_and_misses_one():
    docs = {name: inspect.getdoc(obj) or "" for name, obj in PUBLIC.items()}
    docs |= {module: importlib.import_module(module).__doc__ or "" for module in CONTRACTS}
    for where, text in docs.items():
        for declared, (names, *generated) in DECLARED.items():
            for listed in _enumerations(text, names):
                if any(listed == set(view) for view in generated):
                    continue
                missing = sorted(set(names) - listed)
                assert not missing, (
                    f"{where} lists {sorted(listed)} by hand and misses {missing}: name {declared} instead"
                )


def test_the_drifted_statistics_lists_now_name_the_declaration():
    """The two lists issue 58 found without max_logit say where the statistics are declared."""
    import entropy_lens.kernels
    from entropy_lens.kernels import triton_entropy

    assert "statistics.STATISTICS" in inspect.getdoc(entropy_lens.kernels.attention_stats)
    assert "statistics.STATISTICS" in triton_entropy.__doc__


def test_a_config_documents_every_setting_from_its_help():
    """settings.documented: a config's Args are its settings' --help texts, so neither can drift."""
    from entropy_lens import PasskeyConfig, ScanConfig
    from entropy_lens.settings import SETTING

    for config in (ScanConfig, PasskeyConfig):
        doc = inspect.getdoc(config)
        for field in config.__dataclass_fields__.values():
            if SETTING in field.metadata and field.init:
                help_words = " ".join(field.metadata[SETTING]["help"].split())
                assert help_words in " ".join(doc.split()), (config.__name__, field.name)
