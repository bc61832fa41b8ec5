"""lm-eval's index of its own task folder (~15,000 YAMLs: 14 s on 2 cores), built once per test process
for the tests here that run `entropy-lens eval` in-process: each run builds a TaskManager over lm-eval's
tasks and the folders it names, as lm-eval's CLI does, and the index of the installed package's folder is
the same every time. The other folders (the package's passkey tasks, tests/harness_tasks, a test's own)
are read anew on every build. The tests that build it carry `xdist_group("lm-eval-index")`, so one worker
builds it once."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _lm_eval_own_tasks_indexed_once():
    try:
        import lm_eval.tasks
        from lm_eval.tasks._index import TaskIndex
    except ImportError:  # no lm-eval (the tests skip), or another layout of it (each build reads all)
        yield
        return
    own = Path(lm_eval.tasks.__file__).parent
    build = TaskIndex.build
    built: dict = {}

    def own_folder_once(paths, **options):
        paths = [Path(p) for p in paths]
        if not paths or paths[0] != own:
            return build(paths, **options)
        key = tuple(sorted(options.items()))
        if key not in built:
            built[key] = build([own], **options)
        # later folders override earlier ones, as build merges them
        return {**built[key], **build(paths[1:], **options)}

    TaskIndex.build = staticmethod(own_folder_once)
    yield
    TaskIndex.build = staticmethod(build)
