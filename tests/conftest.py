"""Fixtures shared by the tests. Model and tokenizer builders live in tests/tiny.py (pytest puts tests/
on sys.path, so test modules import it as `tiny`)."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# Under pytest-xdist, each worker's torch gets its share of the cores (cores // workers threads): more
# threads than cores spin against each other in OpenMP's busy waits (docs/internals/layout.md has the
# measurement). Child processes (CLI runs, torchrun) keep their own defaults.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
WORKER_THREADS = max(1, (os.cpu_count() or 1) // WORKERS)


_CALLS = []  # every test's call report (under xdist, the workers' reports arrive here too)


def pytest_runtest_logreport(report):
    if report.when == "call":
        _CALLS.append(report)


def pytest_terminal_summary(terminalreporter):
    """Tests over the slow line without the `slow` marker, named at the end (tests/slow_marks.py)."""
    from slow_marks import SLOW_SECONDS, unmarked_slow

    found = unmarked_slow(_CALLS)
    if found:
        terminalreporter.write_sep("=", f"over {SLOW_SECONDS:g} s without @pytest.mark.slow: mark them slow")
        for line in found:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(config, items):
    """The xdist groups repaired (`_xdist_groups_on_pytest_9`); tests marked `full` (the exhaustive form of
    a claim a cheaper test holds) run under `make test-full` only: elsewhere they are deselected, and the
    header's "deselected" count says how many."""
    from kernel_grid import grid_kind

    _xdist_groups_on_pytest_9(config, items)
    if grid_kind() == "full":
        return
    exhaustive = [item for item in items if item.get_closest_marker("full")]
    if exhaustive:
        config.hook.pytest_deselected(items=exhaustive)
        items[:] = [item for item in items if not item.get_closest_marker("full")]


def _xdist_groups_on_pytest_9(config, items):
    """`--dist loadgroup` (make test) keeps the tests of one `xdist_group` on one worker, so a session or
    module fixture they share (the figures' pipeline, the tiny models' sweeps, the docs' site) is made once.
    pytest-xdist 3.8 marks a grouped test by appending "@group" to `item._nodeid`, which pytest 9 no longer
    reads (the id lives in `item._id`): every group was spread over both workers and its fixture made on
    each. Here the worker appends it where pytest 9 reads it (a no-op where xdist's own renaming worked)."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest before 9 reads `_nodeid`, where xdist's own renaming works
        return
    for item in items:
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_as_in_a_terminal():
    """Ctrl-C is Python's KeyboardInterrupt in the tests and in the CLI children they interrupt, as in a
    terminal, also where the suite runs as a shell's background job (`make test &`), which starts with
    SIGINT ignored, an ignored signal a child inherits."""
    import signal

    earlier = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, earlier)


@pytest.fixture(scope="session", autouse=True)
def _worker_threads_from_the_start():
    """The worker's share of the cores from its first fixture on: a group's shared session or module
    fixture (the figures' pipeline, the tiny models' sweeps), made in its first test's set-up, comes
    before the per-test setting below, and a group is often a worker's first work (xdist sends the largest
    first), when torch still has every core beside the other worker's."""
    if WORKERS > 1:
        import torch

        torch.set_num_threads(WORKER_THREADS)


RUN_CACHE = "ENTROPY_LENS_TEST_CACHE"  # set by a parent run for its side environments' children


def run_cache(tmp_path_factory) -> Path:
    """The model cache (ENTROPY_LENS_CACHE) of the whole run, one folder for every xdist worker and for the
    side environments' children (tests/environments.py passes it as ENTROPY_LENS_TEST_CACHE), so the
    bundled GGUF is converted once a run, not once per worker and environment (models/gguf.py makes a
    cache under an flock, and another transformers version's reuses the weights): the parent's, else
    the xdist run's temporary folder (the workers' basetemps are popen-gw0, popen-gw1 in it), else the
    session's."""
    given = os.environ.get(RUN_CACHE)
    if given:
        return Path(given)
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "cache"


@pytest.fixture(autouse=True)
def _seed_and_isolate_cache(tmp_path_factory, monkeypatch):
    import resource

    import torch

    torch.manual_seed(0)
    if WORKERS > 1:
        torch.set_num_threads(WORKER_THREADS)  # again per test: a test's --threads may have changed it
    # Model caches go to the run's folder, never the user's home.
    monkeypatch.setenv("ENTROPY_LENS_CACHE", str(run_cache(tmp_path_factory)))
    limits = resource.getrlimit(resource.RLIMIT_AS)
    yield
    # A cap left on the worker's address space outlives the test: every process it starts later inherits
    # it (Chromium, which reserves far more than it uses, died at start-up with SIGTRAP under one).
    left = resource.getrlimit(resource.RLIMIT_AS)
    if left != limits:
        resource.setrlimit(resource.RLIMIT_AS, limits)
        pytest.fail(f"the test left RLIMIT_AS at {left} (it was {limits}); lift it on leaving")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny GQA Llama folder (2 layers, 4 query heads over 2 KV heads, head_dim 16)."""
    from tiny import make_tiny_dir

    return make_tiny_dir(tmp_path_factory.mktemp("tiny") / "tiny-gqa")


@pytest.fixture(scope="session")
def benchmark_script():
    """load(name) -> benchmarks/<name>.py as a module, imported from its path (bench_children.load_script)."""
    from bench_children import load_script

    return load_script


@pytest.fixture(scope="session")
def figures_made(tmp_path_factory):
    """The figures pipeline at figure_cases.MINIMAL, run once per session (test_figures.py's tests and
    notebook 02's read its out/ and cache/): (root, exit code)."""
    from figure_cases import run_minimal

    return run_minimal(tmp_path_factory.mktemp("figures"))


@pytest.fixture(scope="session")
def text_file(tmp_path_factory):
    """60 KB of Persuasion: enough for a 300-entry BPE and a few training steps (the micro train-tiny
    recipes of tests/training, tests/monitor and tests/figures)."""
    from entropy_lens.data import load_documents

    docs, _ = load_documents("austen:persuasion")
    path = tmp_path_factory.mktemp("text") / "persuasion-head.txt"
    path.write_text(docs[0][:60_000])
    return path
