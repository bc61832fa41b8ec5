"""Every example command of the README and the guides (docs/**/*.md) RUNS as written, on the embedded
models at small sizes: each page's commands in page order in one fresh working folder (a `view` or a
`passkey --head-scales` reads what an earlier command of the page wrote), in-process through
`entropy_lens.cli.main`. The sizes are cut by `small` (lengths, samples, steps, batches, a scale grid to
three), nothing else of the command changes. Commands that need a GPU, a Hub model or files of the user's are not run: `PARSE_ONLY`
lists them with the reason (tests/cli/test_examples.py parses them and checks their settings), so a new
example that cannot run here fails until it is classified."""

import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest
from cli_cases import PAGES, README, ROOT, page_examples
from figure_cases import PAPER_REDRAW, redraw_committed

from entropy_lens.cli import main

# (pattern searched in the command, why it is not run here)
PARSE_ONLY = [
    (r"--device cuda", "needs a GPU (and a Hub model or a checkpoint folder of the user's)"),
    (r"^entropy-lens eval tiny-nope .*--include-path my_tasks/", "a task folder of the user's (my_tasks/)"),
    (r"^entropy-lens eval-table 1 table1-", "reads the GPU runs' results (table1-*.json)"),
    (r"^entropy-lens eval-table \d t\d-", "reads the GPU runs' results (t1-*.json, t3-*.json)"),
    (r"^entropy-lens figures$", "the whole figures pipeline: hours of scans and training"),
    (r"^entropy-lens figures --config paper$", "the whole figures pipeline: hours of scans and training"),
]

# what a page reads that another page writes: made first, small (the page's own commands follow)
PREPARE = {
    "docs/guides/explorer.md": [
        "entropy-lens scan tiny-nope --len 256 --samples 2 --out results/demo.npz",
        "entropy-lens scan tiny-nope --len 256 --samples 2 --out nope.npz",
        "entropy-lens scan tiny-rope --len 256 --samples 2 --out rope.npz",
        "entropy-lens sweep tiny-nope --len 256 --samples 2 --scales 1.0,1.2,1.4 --out sw/nope",
        "entropy-lens train-tiny --kind nope --steps 2 --warmup 1 --monitor entropy --out mon",
        "entropy-lens generate tiny-nope --data austen:emma --prompt-len 64 --max-new-tokens 4 --out gen.npz",
    ],
}
PREPARE_COPY = {"docs/guides/explorer.md": [("mon/attention-history.npz", "attention.npz")]}

CAP_LEN = 256  # the embedded models' --len (a multiple of their train length 128)


def _cap_list(values: list[str], n: int = 2) -> list[str]:
    """A list of lengths cut as --len is (each at most CAP_LEN, a value the cut repeats once), its first `n`:
    `passkey smollm2 --lens 300 600` runs at 256 alone (SmolLM2 on one thread: half a minute at 300 and 600)."""
    return list(dict.fromkeys(str(min(int(v), CAP_LEN)) for v in values))[:n]


def _small_scales(spec: str) -> str:
    from entropy_lens.runs.sweep import parse_scales

    grid = parse_scales(spec)  # a fit needs three scales: the grid's ends and middle
    return ",".join(f"{s:g}" for s in sorted({grid[0], grid[len(grid) // 2], grid[-1]}))


# flag -> (largest value, or a rewrite of the value)
CAPS = {
    "--len": lambda v: str(min(int(v), CAP_LEN)),
    "--max-length": lambda v: str(min(int(v), CAP_LEN)),
    "--samples": lambda v: str(min(int(v), 2)),
    "--steps": lambda v: str(min(int(v), 2)),
    "--passkey-steps": lambda v: str(min(int(v), 2)),
    "--snapshot": lambda v: str(min(int(v), 1)),
    "--depths": lambda v: str(min(int(v), 1)),
    "--keys": lambda v: str(min(int(v), 1)),
    "--limit": lambda v: str(min(int(v), 2)),
    "--batch-size": lambda v: str(min(int(v), 2)),
    "--batch": lambda v: str(min(int(v), 2)),
    "--smooth": lambda v: str(min(int(v), 5)),
    "--scales": _small_scales,
}
LIST_CAPS = ("--lens",)  # nargs="+" lists of lengths: `_cap_list`
# defaults too large for a test, set where the command leaves them out
ADDED = {
    "scan": ["--samples", "2"],
    "sweep": ["--samples", "2"],
    "ppl": ["--samples", "2"],
    "passkey": ["--depths", "1", "--keys", "1"],
    "search-heads": ["--steps", "2"],
    # a step of the recipe's 32 sequences is 2 s on one thread; of 2, a tenth of that
    "train-tiny": ["--steps", "2", "--warmup", "1", "--batch", "2"],
    "eval": ["--limit", "2"],
}


def parse_only_reason(cmd: str) -> str | None:
    return next((why for pattern, why in PARSE_ONLY if re.search(pattern, cmd)), None)


def small(cmd: str) -> list[str]:
    """The command's arguments (without `entropy-lens`) with its sizes cut to a test's."""
    words = shlex.split(cmd)[1:]
    out, i = [], 0
    while i < len(words):
        word = words[i]
        if word in CAPS and i + 1 < len(words):
            out += [word, CAPS[word](words[i + 1])]
            i += 2
        elif word in LIST_CAPS:
            j = i + 1
            while j < len(words) and not words[j].startswith("--"):
                j += 1
            out += [word, *_cap_list(words[i + 1 : j])]
            i = j
        else:
            out.append(word)
            i += 1
    for flag, value in zip(ADDED.get(out[0], [])[::2], ADDED.get(out[0], [])[1::2], strict=True):
        if flag not in out:
            out += [flag, value]
    return [*out, "--threads", "1"]


def _written(args: list[str]) -> list[str]:
    """What the command says it writes: its --out (view, scan, ...)."""
    return [args[args.index("--out") + 1]] if "--out" in args else []


# The README's commands run in test_the_readmes_commands_run_in_order_after_make_demo (in order, after
# `make demo`, on a copy of the repository, nothing removed in between): a stricter run of the same
# commands, so they are not run a second time here.
RUN_PAGES = [p.relative_to(ROOT).as_posix() for p in PAGES if page_examples(p) and p != README]


def test_every_parse_only_pattern_names_an_example():
    examples = [cmd for page in PAGES for cmd in page_examples(page)]
    for pattern, why in PARSE_ONLY:
        assert any(re.search(pattern, cmd) for cmd in examples), f"no example matches {pattern!r} ({why})"


MODEL_COMMANDS = ("scan", "sweep", "ppl", "passkey", "generate", "eval", "search-heads")


def test_every_example_that_is_run_can_run_here():
    """A new example on a Hub model, a checkpoint of the user's or a GPU fails here, fast, until PARSE_ONLY
    names it (the slow test would otherwise try a download or a device this machine lacks)."""
    from entropy_lens.models.bundled import BUNDLED_MODELS

    for page in PAGES:
        for cmd in page_examples(page):
            if parse_only_reason(cmd):
                continue
            words = shlex.split(cmd)
            where = f"{page.name}: {cmd}: classify it in PARSE_ONLY with the reason, or make it runnable here"
            assert "cuda" not in words and "$" not in cmd, where
            if words[1] in MODEL_COMMANDS:
                assert words[2] in BUNDLED_MODELS, where


def test_the_sizes_are_cut_and_the_rest_is_kept():
    args = small("entropy-lens sweep tiny-nope --len 512 --samples 128 --scales 0.9:1.8:0.05 --out sw/nope")
    assert args == [
        "sweep",
        "tiny-nope",
        "--len",
        "256",
        "--samples",
        "2",
        "--scales",
        "0.9,1.35,1.8",
        "--out",
        "sw/nope",
        "--threads",
        "1",
    ]
    assert small("entropy-lens ppl tiny-nope --lens 128 256 512 1024 --scale 1.2")[:7] == [
        "ppl",
        "tiny-nope",
        "--lens",
        "128",
        "256",
        "--scale",
        "1.2",
    ]
    assert small("entropy-lens train-tiny --kind nope --batch 64 --out my-nope")[3:] == [
        *("--batch", "2", "--out", "my-nope", "--steps", "2", "--warmup", "1", "--threads", "1")
    ]
    assert small("entropy-lens train-tiny --kind rope")[3:] == [
        *("--steps", "2", "--warmup", "1", "--batch", "2", "--threads", "1")
    ]
    assert small("entropy-lens passkey smollm2 --lens 300 600 --depths 10")[:4] == [
        "passkey",
        "smollm2",
        "--lens",
        "256",
    ]


def _page_param(page: str):
    """docs/paper.md's redraw is shared with tests/figures/test_figures.py (figure_cases.redraw_committed):
    on that file's worker (xdist_group "figures"), so it is made once."""
    if page == "docs/paper.md":
        return pytest.param(page, marks=pytest.mark.xdist_group("figures"))
    return page


@pytest.mark.slow
@pytest.mark.parametrize("page", [_page_param(p) for p in RUN_PAGES])
def test_the_pages_examples_run(page, tmp_path, tmp_path_factory, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    if page == "docs/paper.md":  # `figures --cached-only` draws from the committed runs
        (tmp_path / "figures").mkdir()
        (tmp_path / "figures" / "runs").symlink_to(ROOT / "figures" / "runs")
    for cmd in PREPARE.get(page, []):
        assert main(small(cmd)) == 0, cmd
    for source, target in PREPARE_COPY.get(page, []):
        shutil.copy(source, target)
    ran, written = 0, set()
    for cmd in page_examples(ROOT / page):
        if parse_only_reason(cmd):
            continue
        args = small(cmd)
        for out in set(_written(args)) & written:  # an alternative recipe for the same output: afresh
            shutil.rmtree(out) if Path(out).is_dir() else Path(out).unlink()
        start = time.perf_counter()
        if args == PAPER_REDRAW:  # the same command test_committed_readme_is_regenerated_... runs: once
            made, code, err = redraw_committed(tmp_path_factory)
            shutil.copytree(
                made / "figures", "figures", ignore=shutil.ignore_patterns("runs"), dirs_exist_ok=True
            )
            print(err, file=sys.stderr, end="")
        else:
            code = main(args)
        print(f"{time.perf_counter() - start:6.1f}s  {shlex.join(args)}", file=sys.__stdout__)
        err = capsys.readouterr().err
        assert code == 0, f"{page}: {shlex.join(args)} exited {code}: {err[-2000:]}"
        for out in _written(args):
            assert Path(out).exists(), f"{page}: {shlex.join(args)} did not write {out}"
            written.add(out)
        ran += 1
    assert ran or all(parse_only_reason(c) for c in page_examples(ROOT / page))


def make_demo() -> str:
    """The command `make demo` runs (the Makefile's demo recipe), as `entropy-lens ...`."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert recipe, "the Makefile has no demo target"
    (line,) = [x.strip() for x in recipe.group(1).splitlines()]
    assert line.startswith("$(BIN)/entropy-lens "), line
    return line.replace("$(BIN)/entropy-lens", "entropy-lens", 1)


def test_make_demo_and_the_readmes_commands_write_different_files():
    """The README's commands come after `make demo` (its install section first): none may write what
    `make demo` wrote, or it stops at "already exists" (issue 61)."""
    demo = _written(small(make_demo()))
    assert demo, make_demo()
    for cmd in page_examples(README):
        assert not set(_written(small(cmd))) & set(demo), f"README: {cmd} writes {demo[0]}, as make demo does"


def test_the_readmes_commands_write_into_results():
    """A new user's commands write under results/ (make demo's folder, ignored by git), never into the
    checkout's root (issue 80 item 7: `view ... --out report.html`)."""
    for cmd in page_examples(README):
        for out in _written(small(cmd)):
            assert out.startswith("results/"), f"README: {cmd} writes {out}, outside results/"


@pytest.mark.slow
def test_the_readmes_commands_run_in_order_after_make_demo(tmp_path, monkeypatch, capsys):
    """A new user's first commands: on a copy of the repository (no results/, no build output), what
    `make demo` runs, then each command of the README's shell blocks in order, at small sizes (`small`),
    each exiting 0; no output is removed in between (test_the_pages_examples_run starts each page in a
    fresh folder, where the collision with make demo's file never shows)."""
    clone = tmp_path / "clone"
    build = (
        "results",
        "_build",
        "__pycache__",
        ".pytest_cache",
        ".ruff_cache",
        ".venv*",  # the test environments too (.venv-kvpress, .venv-polygraph, .venv-vllm: gigabytes)
        ".git",
        "*.egg-info",
    )
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(*build), symlinks=True)
    monkeypatch.chdir(clone)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    commands = [make_demo(), *page_examples(README)]
    assert len(commands) >= 4 and not any(parse_only_reason(c) for c in commands), commands
    for cmd in commands:
        args = small(cmd)
        code = main(args)
        err = capsys.readouterr().err
        assert code == 0, f"{shlex.join(args)} exited {code} after the commands before it: {err[-2000:]}"
        for out in _written(args):
            assert Path(out).exists(), f"{shlex.join(args)} did not write {out}"
