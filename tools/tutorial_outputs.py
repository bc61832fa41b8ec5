"""The tutorials with their outputs, for the site: each notebook of notebooks/ (committed without outputs,
where the tests run it) executed headlessly as committed, in a kernel of this interpreter with cwd =
notebooks/, and stored with its outputs (plots, tables, printed numbers) in docs/tutorials/executed/,
which the site renders in its place (docs/conf.py). tests/figures/test_notebooks.py holds the stored
copies to the notebooks: the same cells, and the same printed text as a fresh run.

    python tools/tutorial_outputs.py [--check]     # rewrite the stored copies (--check: say which are stale)
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "docs" / "tutorials" / "executed"


def execute(path: Path):
    """The notebook at `path` run cell by cell (an error in any cell raises), with its outputs."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as jupyter:
        spec = Path(jupyter) / "kernels" / "python3"
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        (spec / "kernel.json").write_text(
            json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"})
        )
        # tqdm.auto (imported by transformers) warns "IProgress not found" in a kernel without ipywidgets,
        # naming its own file: a machine's path in the stored page (issue 70); text bars work without it. The
        # filter names the message: PYTHONWARNINGS cannot name tqdm's class, not imported at start-up.
        quiet = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), "ignore:IProgress not found"]))
        env = {**os.environ, "JUPYTER_PATH": jupyter, "PYTHONWARNINGS": quiet}
        env.pop("MPLBACKEND", None)  # an Agg backend would leave no image outputs
        old = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            client = nbclient.NotebookClient(
                nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(NOTEBOOKS)}}
            )
            client.execute()
        finally:
            os.environ.clear()
            os.environ.update(old)
    return nb


# an output above this size (the explorer's page, plotly inlined: megabytes) is stored as a still of it
LARGEST_OUTPUT = 1 << 20
STILL = ROOT / "docs" / "view.png"
STILL_NOTE = (
    "The explorer is interactive: run this cell in Jupyter (or `entropy-lens view`) to use it. A still of "
    "it (docs/view.png) stands here, since the page inlines plotly and would add megabytes to the site."
)


def machine_paths(text: str) -> list[str]:
    """This machine's own folders that `text` names (the checkout, the interpreter's prefix, the home)."""
    places = {str(ROOT), sys.prefix, sys.base_prefix, str(Path.home())} - {"", "/"}
    return sorted(p for p in places if p in text)


def stored(nb):
    """`nb` as the site stores it: an output larger than LARGEST_OUTPUT replaced by a still of the page; an
    output naming this machine's folders (a warning's file) refused."""
    import base64

    import nbformat

    for cell in nb.cells:
        for i, out in enumerate(cell.get("outputs", [])):
            found = machine_paths(json.dumps(out.get("text", "")) + json.dumps(out.get("data", {})))
            if found:
                raise SystemExit(
                    f"an output of cell {cell.source.splitlines()[0][:60]!r} names this machine's {found[0]}; "
                    "make the cell print no local path (silence the warning that does) and run this again"
                )
            size = sum(
                len(v) if isinstance(v, str) else sum(map(len, v)) for v in out.get("data", {}).values()
            )
            if size > LARGEST_OUTPUT:
                still = base64.b64encode(STILL.read_bytes()).decode()
                cell.outputs[i] = nbformat.v4.new_output(
                    "display_data", data={"image/png": still, "text/plain": STILL_NOTE}
                )
    return nb


# what differs from run to run in a printed results meta (the scan's own clock): left out of the comparison
VOLATILE = re.compile(r"('(wall_time_s|created_utc)': )[^,}\n]+")


def printed(nb) -> list[str]:
    """Each code cell's printed text and plain-text results, in order: what a fresh run must reproduce
    (a meta's wall time and creation time, VOLATILE, left out)."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                parts.append(out["text"] if isinstance(out["text"], str) else "".join(out["text"]))
            elif out.get("output_type") == "execute_result":
                text = out.get("data", {}).get("text/plain", "")
                parts.append(text if isinstance(text, str) else "".join(text))
        texts.append(VOLATILE.sub(r"\1…", "".join(parts)))
    return texts


def main(argv: list[str]) -> int:
    import nbformat

    from entropy_lens.results import atomic_write_text

    check = "--check" in argv
    EXECUTED.mkdir(parents=True, exist_ok=True)
    stale = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = stored(execute(path))
        target = EXECUTED / path.name
        old = nbformat.read(target, as_version=4) if target.is_file() else None
        if (
            old is None
            or printed(old) != printed(nb)
            or [c.source for c in old.cells] != [c.source for c in nb.cells]
        ):
            stale.append(path.name)
        if not check:
            atomic_write_text(target, nbformat.writes(nb))
        print(f"{path.name}: executed, {sum(c.cell_type == 'code' for c in nb.cells)} code cells", flush=True)
    verb = "stale" if check else "written"
    print(f"{verb}: {', '.join(stale)}" if stale else "the stored tutorials are up to date")
    return 1 if stale and check else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
