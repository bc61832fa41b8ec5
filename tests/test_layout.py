"""The package's layering, read off its import statements (docs/internals/layout.md): each package imports only
the packages below it, and no module imports another module's private names. One test per rule, each
naming every file that breaks it."""

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "entropy_lens"
BASE = {
    "errors",
    "flags",
    "settings",
    "statistics",
    "version",
}  # entropy_lens.errors, .flags, .settings, .statistics, `from entropy_lens import __version__`
# What each top-level package may import (besides itself and BASE): two stacks under `runs`, the compute
# side (models, data, capture -> kernels) and the results side (plotting -> analysis -> results; view ->
# analysis -> results, the interactive pages). `figures` (the paper's pipeline: its runs, their cache and
# the drawing) sits above `runs`, `training` and `plotting` (Figure 18 reruns train-tiny with the monitor);
# `runs` imports nothing from it. `training` (train-tiny, the λ(h) search: every loop that trains) sits
# above `runs` and `monitor` (the search trains its scales through capture's ScaleSession): it writes
# with the runs' one-writer lock and output checks, and its model cards are scans and passkey runs. `harness`
# (lm-evaluation-harness: `eval`) sits above `runs` too: its model loads and scales as the runs do.
# `monitor` (AttentionMonitor, the Trainer callback) sits above `capture`, beside `runs`: it measures a
# user's training loop with the capture machinery and writes its history with the results' file helpers;
# train-tiny and search-heads (--monitor, in `training`) watch their own training with it; `runs`
# imports nothing from it. `kvpress` (the optional extra: kvpress's presses scored by the kernels' key
# statistics, docs/guides/kvpress.md) sits on `capture` (its press scores each layer from the capture's
# pass of the layer's own forward) and `kernels`, and reads DuoAttention's pattern folders with
# the one reader `results` keeps beside their one writer, and reports a long prefill's layers with
# `progress`'s bar; nothing imports it. `vllm` (the lens inside vLLM's workers and front end,
# docs/guides/vllm.md) runs the kernels on what vLLM's attention layers are handed, checks a request's
# statistics with generation's parsers and writes GenerationResults; nothing imports it.
ALLOWED = {
    "cli": {"training", "harness", "figures", "runs", "monitor", "models", "analysis", "results", "view"},
    "harness": {"runs", "models", "data", "results", "progress"},
    "training": {"runs", "monitor", "models", "data", "capture", "results", "analysis", "progress"},
    "runs": {"models", "data", "capture", "generation", "kernels", "results", "analysis", "progress"},
    "monitor": {"capture", "kernels", "results"},
    "generation": {"capture", "kernels", "results"},
    "kvpress": {"capture", "kernels", "results", "progress"},
    "polygraph": {"generation", "capture", "results"},
    "vllm": {"generation", "kernels", "results"},
    "models": {"progress"},
    "data": set(),
    "capture": {"kernels"},
    "kernels": set(),
    "results": set(),
    "analysis": {"results"},
    "plotting": {"analysis", "results"},
    "figures": {"training", "monitor", "runs", "models", "plotting", "analysis", "results"},
    "view": {"analysis", "results"},
    "progress": set(),
    "errors": set(),
    "settings": set(),
    "statistics": set(),
    "flags": set(),
    "__main__": {"cli"},
}


@functools.cache
def _tree(path: Path) -> ast.Module:
    """`path` parsed once (every rule reads the same files)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path):
    """(imported top-level package of entropy_lens, imported names) for every entropy_lens import."""
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "entropy_lens":
            parts = node.module.split(".")
            names = [a.name for a in node.names]
            if len(parts) == 1:  # from entropy_lens import x
                for name in names:
                    yield ("version" if name == "__version__" else name), [name]
            else:
                yield parts[1], names
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "entropy_lens" and len(parts) > 1:
                    yield parts[1], []


def _package(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if _package(p) != "__init__")


def test_imports_run_one_way():
    new = sorted({_package(path) for path in MODULES} - set(ALLOWED))
    assert not new, f"{new}: new top-level packages: add each to docs/internals/layout.md and to ALLOWED"
    upward = [
        f"{path.relative_to(PACKAGE)}: {_package(path)} imports {target}"
        for path in MODULES
        for target, _ in _imports(path)
        if target != _package(path) and target not in BASE | ALLOWED[_package(path)]
    ]
    assert not upward, upward


TESTS_DIR = Path(__file__).parent
TESTS = sorted(p for p in TESTS_DIR.rglob("*.py") if "harness_tasks" not in p.parts)
TOOLS = sorted((PACKAGE.parent / "tools").glob("*.py"))  # scripts beside the package, as the tests


def test_no_private_name_crosses_a_module():
    """Modules meet through public names; so do the tests and the tools (they use the public seams)."""
    private = {
        str(path.relative_to(PACKAGE.parent)): found
        for path in MODULES + TESTS + TOOLS
        if (
            found := [
                n for _, names in _imports(path) for n in names if n.startswith("_") and n != "__version__"
            ]
        )
    }
    assert not private, f"private names imported: {private}"


def test_the_check_sees_imports():
    """The parser finds what it must (else the two tests above would pass on anything)."""
    found = dict(_imports(PACKAGE / "runs" / "scan.py"))
    assert {"capture", "models", "results", "runs"} <= set(found)
    assert TOOLS and "capture" in dict(_imports(PACKAGE.parent / "tools" / "survey_architectures.py"))


# Retired names (docs/reference/glossary.md): each concept has one name across CLI, config, code and meta.
RETIRED = {
    "impl": "backend",
    "resolve_impl": "resolve_backend",
    "IMPLS": "BACKENDS",
    "mult": "scale",
    "multipliers": "scales",
    "lam": "softmax_scale",
    "scale_t": "softmax_scale",
}


def _retired_names(path: Path) -> set[str]:
    """The glossary's retired names `path` uses as an identifier."""
    found = set()
    for node in ast.walk(_tree(path)):
        names = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        found |= {n for n in names if n in RETIRED}
    return found


def test_retired_names_stay_retired():
    """No identifier (variable, argument, attribute, function) uses a name the glossary retired."""
    found = {
        str(path.relative_to(PACKAGE)): sorted(names) for path in MODULES if (names := _retired_names(path))
    }
    assert not found, f"{found}; the glossary's names: " + ", ".join(
        f"{n} -> {RETIRED[n]}" for n in sorted(set().union(*found.values()))
    )


# Retired module names: a module is named for what it is (issue 49: `capture/context.py` read as contextvars).
RETIRED_MODULES = {
    "capture/context.py": "capture/context_parallel.py",
    # the training wing (issue 58): every loop that trains, its checkpoints and histories, in training/
    "runs/head_search.py": "training/head_search.py",
    "runs/head_search_state.py": "training/head_search_state.py",
    "runs/resumable.py": "training/resumable.py",
    "runs/training_record.py": "training/training_record.py",
}


def test_retired_modules_stay_retired():
    """No module comes back under a retired name, and the new one exists."""
    back = [old for old in RETIRED_MODULES if (PACKAGE / old).exists()]
    assert not back, "retired module names: " + ", ".join(f"{o} -> {RETIRED_MODULES[o]}" for o in back)
    assert all((PACKAGE / new).exists() for new in RETIRED_MODULES.values())


def _sibling_imports(path: Path):
    """(module, name) for every name a tests/ file takes from another module in tests/: `from test_x import
    a` gives ("test_x", "a"); `import test_x` then `test_x.a` gives the same."""
    siblings = {p.stem for p in TESTS} - {path.stem}
    tree = _tree(path)
    modules = {}  # local name -> sibling module, for `import test_x [as t]`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in siblings:
            yield from ((node.module, a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            modules |= {(a.asname or a.name): a.name for a in node.names if a.name in siblings}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            yield modules[node.value.id], node.attr


def test_no_test_module_takes_another_ones_private_names():
    """What two test modules share lives under a public name, best in a helper module (tests/tiny.py,
    tests/architectures.py, tests/view_inputs.py, tests/sweeps.py, ...), never as a test module's
    underscored name."""
    private = {
        str(path.relative_to(TESTS_DIR)): found
        for path in TESTS
        if (found := sorted({f"{m}.{n}" for m, n in _sibling_imports(path) if n.startswith("_")}))
    }
    assert not private, f"{private}: make each public in a helper module under tests/"


def test_the_check_sees_test_imports(tmp_path):
    """The sibling-import parser finds both spellings (else the test above would pass on anything)."""
    assert ("architectures", "save_folder") in set(
        _sibling_imports(Path(__file__).parent / "runs" / "test_passkey.py")
    )
    fake = tmp_path / "test_fake.py"
    fake.write_text("from test_kernels import _x, y\nimport test_capture as tc\ntc._z\n", encoding="utf-8")
    assert {("test_kernels", "_x"), ("test_kernels", "y"), ("test_capture", "_z")} <= set(
        _sibling_imports(fake)
    )


def _off_the_path(path: Path) -> list[str]:
    """The modules `path` imports from tests/ that do not lie in tests/ itself (the one folder pytest puts
    on sys.path), as "module.name"."""
    return sorted({f"{m}.{n}" for m, n in _sibling_imports(path) if not (TESTS_DIR / f"{m}.py").exists()})


def test_test_modules_share_through_builders_in_tests(pytestconfig):
    """pytest puts tests/ alone on sys.path (pyproject's `pythonpath`): what test modules share lives in a
    builder module there (tiny.py, architectures.py, kernel_cases.py, capture_cases.py, cli_cases.py,
    figure_cases.py, sweeps.py, view_inputs.py, ...), never in a test module of a subfolder, which would
    need its folder on the path too (issue 49)."""
    assert [Path(p).resolve() for p in pytestconfig.getini("pythonpath")] == [TESTS_DIR.resolve()]
    found = {str(p.relative_to(TESTS_DIR)): names for p in TESTS if (names := _off_the_path(p))}
    assert not found, f"move these into a builder module in tests/: {found}"


def test_the_check_sees_a_test_module_imported(tmp_path):
    """A name taken from a subfolder's test module is found, one from a builder is not (else the test
    above would pass on anything)."""
    fake = tmp_path / "test_fake.py"
    fake.write_text(
        "from test_capture import CPU_FUSED\nfrom tiny import make_tiny_model\n", encoding="utf-8"
    )
    assert _off_the_path(fake) == ["test_capture.CPU_FUSED"]


# packages whose import takes seconds and that few tests need: imported by those tests, not at a test
# module's top, where every xdist worker pays them at collection (nbformat: jsonschema builds its format
# grammars at import)
SLOW_TO_IMPORT = {"nbformat", "nbclient"}


def _top_level_imports(path: Path) -> set[str]:
    """The top-level packages a module imports at its top (not inside a function or class), its
    importorskip calls included."""
    found = set()
    for node in _tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                found |= {a.name.split(".")[0] for a in sub.names}
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                found.add(sub.module.split(".")[0])
            elif (
                isinstance(sub, ast.Call)
                and getattr(sub.func, "attr", None) == "importorskip"
                and sub.args
                and isinstance(sub.args[0], ast.Constant)
            ):
                found.add(str(sub.args[0].value).split(".")[0])
    return found


def test_no_test_module_imports_a_slow_package_at_collection():
    slow = {
        str(path.relative_to(TESTS_DIR)): sorted(found)
        for path in TESTS
        if (found := _top_level_imports(path) & SLOW_TO_IMPORT)
    }
    assert not slow, (
        f"{slow}: import them inside the tests that use them (a find_spec check may skip at the top)"
    )


def test_the_check_sees_a_slow_import_at_the_top(tmp_path):
    """An import or importorskip at the top is found, one inside a test is not (else the test above would
    pass on anything)."""
    fake = tmp_path / "test_fake.py"
    fake.write_text(
        "import pytest\nnb = pytest.importorskip('nbformat')\nfrom nbclient import x\n"
        "def test_x():\n    import torch\n    pytest.importorskip('scipy')\n",
        encoding="utf-8",
    )
    assert _top_level_imports(fake) == {"pytest", "nbformat", "nbclient"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, every import statement counted (those under
    `if TYPE_CHECKING:` and inside functions too): `from entropy_lens.a.b import c` names module a.b,
    or a.b.c where that is a module."""
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        targets = set()
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("entropy_lens"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in modules}
        graph[_module_name(path)] = targets & modules - {_module_name(path)}
    return graph


def test_no_module_import_cycle():
    """No two modules import each other, directly or round a loop, type-checking imports included: a
    reader can read each module after the ones it imports (issue 40: capture/attention.py <-> paths.py)."""
    graph, state, cycles = _module_graph(), {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert len(graph) > 50 and "entropy_lens.capture.paths" in graph["entropy_lens.capture.attention"]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


# A tripwire, not a rule (docs/internals/layout.md): a module is split where its jobs part, never to pass a
# line count. Past TRIPWIRE lines, read it: two jobs are split by job; one job is named here.
TRIPWIRE = 600
LONG_ALLOWED: set[str] = set()  # a module over the wire that holds one job, named with it


def long_modules(paths, root: Path) -> dict[str, int]:
    """Lines of each of `paths` (named relative to `root`) past the TRIPWIRE."""
    return {
        str(path.relative_to(root)): lines
        for path in paths
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > TRIPWIRE
    }


def test_a_long_module_is_read_for_a_second_job():
    """A module over TRIPWIRE lines may hold two jobs: split it where they part, or, if it holds one, name
    it in LONG_ALLOWED with that job."""
    long = long_modules(MODULES, PACKAGE)
    assert not set(long) - LONG_ALLOWED, {name: n for name, n in long.items() if name not in LONG_ALLOWED}
    assert LONG_ALLOWED <= set(long), f"{LONG_ALLOWED - set(long)} no longer trip the wire: drop them"


def test_the_wire_is_at_600_lines_and_each_rule_is_one_test(tmp_path):
    """600 lines pass and 601 trip (the cap of 400 split modules to pass it: issue 78); and each rule here
    is one test naming every file that breaks it, not one test per file."""
    for n in (400, 600, 601):
        (tmp_path / f"m{n}.py").write_text("x = 1\n" * n, encoding="utf-8")
    assert long_modules(sorted(tmp_path.glob("*.py")), tmp_path) == {"m601.py": 601}
    tests = [node for node in _tree(Path(__file__)).body if isinstance(node, ast.FunctionDef)]
    parametrised = [t.name for t in tests if any("parametrize" in ast.unparse(d) for d in t.decorator_list)]
    assert len(tests) > 10 and not parametrised, parametrised


MODIFIERS = {"causal", "mask", "window", "softcap", "sinks", "alibi_slopes", "key_bias"}
# the public entry points (they keep the keywords users call them with) and the record they build
LIST_MODIFIERS = {
    "attention_entropy",
    "attention_stats",
    "attention_with_entropy",
    "attention_received",
    "attention_probs",
    "row_slice_stats",
    "shard_state",
    "build",
}


def test_only_the_public_entry_points_list_the_score_modifiers():
    """Below `attention_entropy`, `attention_stats`, `attention_with_entropy`, `attention_received`,
    `attention_probs`, `row_slice_stats` and `shard_state` the score
    modifiers travel as one `kernels.ScoreMods`: no other function of the package takes them one by one
    (issue 40). A validator or a mask helper may take the two or three it works on; four or more is the
    old tail."""
    listing = []
    for path in MODULES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                named = MODIFIERS & {a.arg for a in args}
                if len(named) >= 4 and node.name not in LIST_MODIFIERS:
                    listing.append(f"{path.relative_to(PACKAGE)}:{node.name} ({', '.join(sorted(named))})")
    assert not listing, listing
