"""Named corpora and user files -> a list of documents (plain strings).

`load_documents(data)` accepts one string, the value of `--data`:

    "austen"                  Jane Austen's six novels (bundled), one document per novel, in file order
    "austen:<novel>"          one novel: "austen:persuasion", or a unique prefix ("austen:pride")
    "austen-minus:<novel>"    the other five: a training split that holds one novel out
    "stdlib"                  the running interpreter's standard-library source, one document per .py file
    a path                    a .txt file, a folder of .txt files, or a .jsonl file with a "text" field
                              per line

Design choices:

- A document is the unit that the packer (`chunks.py`) separates with the tokenizer's
  end-of-document token, so a novel is one document, not one per chapter or line.
- The bundled novels live in package data as gzip (`corpora/austen/NN_<novel>.txt.gz`); the
  `NN_` prefix fixes their order and is not part of the name users type.
- "stdlib" is a second, code-like domain that exists on every machine that runs the toolkit.
  Tests, site-packages, idlelib and lib2to3 are left out (test data, third-party code and
  retired tools), and so are files that are not UTF-8 and files with no text. The text
  depends on the Python version, which the description records.
- Empty documents are dropped everywhere: they would add only a separator to the stream.
- `.npy` token ids are not documents; `token_chunks` reads them without tokenising.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import platform
import sysconfig
from importlib import resources
from pathlib import Path

from entropy_lens.errors import EntropyLensError

__all__ = ["AUSTEN_NOVELS", "BUNDLED_CORPORA", "FILE_KINDS", "load_documents"]

_AUSTEN_DIR = resources.files("entropy_lens.data").joinpath("corpora", "austen")
_AUSTEN_FILES = {  # "persuasion" -> "03_persuasion.txt.gz"
    f.name.removesuffix(".txt.gz").split("_", 1)[1]: f.name
    for f in sorted(_AUSTEN_DIR.iterdir(), key=lambda f: f.name)
    if f.name.endswith(".txt.gz")
}
AUSTEN_NOVELS: tuple[str, ...] = tuple(_AUSTEN_FILES)

BUNDLED_CORPORA: tuple[str, ...] = (
    "austen",
    *(f"austen:{n}" for n in AUSTEN_NOVELS),
    *(f"austen-minus:{n}" for n in AUSTEN_NOVELS),
    "stdlib",
)
FILE_KINDS = 'a .txt file, a folder of .txt files, or a .jsonl file with a "text" field per line'

_STDLIB_SKIP = {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}


def load_documents(data: str) -> tuple[list[str], str]:
    """`data` (a bundled name or a path) -> (documents, description), e.g.
    (["...Persuasion..."], "austen:persuasion (1 document)")."""
    documents, label = load_labelled(data)
    n = len(documents)
    return documents, f"{label} ({n:,} document{'s' * (n != 1)})"


def load_labelled(data: str) -> tuple[list[str], str]:
    """Like `load_documents`, but the description is the bare label ("austen:persuasion",
    the path as given): `token_chunks` adds its own counts."""
    if not isinstance(data, str) or not data:
        raise EntropyLensError(f"--data {data!r} is not a corpus; pass {_choices()}")
    if data == "austen":
        documents, label = [_novel(n) for n in AUSTEN_NOVELS], "austen"
    elif data.startswith(("austen:", "austen-minus:")):
        kind, _, query = data.partition(":")
        novel = _match_novel(data, query)
        keep = [novel] if kind == "austen" else [n for n in AUSTEN_NOVELS if n != novel]
        documents, label = [_novel(n) for n in keep], f"{kind}:{novel}"
    elif data == "stdlib":
        documents = list(_stdlib())
        label = f"stdlib of Python {platform.python_version()}"
    else:
        documents, label = _from_path(data), data
    documents = [d for d in documents if d]
    if not documents:
        raise EntropyLensError(
            f"--data {data!r} holds no text; pass a corpus with some text, e.g. --data austen"
        )
    return documents, label


def _choices() -> str:
    novels = ", ".join(AUSTEN_NOVELS)
    return (
        f"austen, austen:<novel>, austen-minus:<novel> (novels: {novels}), stdlib, or {FILE_KINDS} "
        "(a scan or sweep also reads a .npy of token ids shaped [N, --len + 1])"
    )


def _match_novel(data: str, query: str) -> str:
    query = query.strip().lower().replace("-", "_").replace(" ", "_")
    if query in AUSTEN_NOVELS:
        return query
    hits = [n for n in AUSTEN_NOVELS if query and n.startswith(query)]
    if len(hits) == 1:
        return hits[0]
    what = f"matches {', '.join(hits)}" if hits else "names no novel"
    kind = data.partition(":")[0]
    raise EntropyLensError(
        f"--data {data!r} {what}; pass {kind}:<novel> with one of {', '.join(AUSTEN_NOVELS)}"
    )


@functools.cache
def _novel(name: str) -> str:
    # Bundled files never change, so the decompressed text (~4 MB for all six) is kept.
    return gzip.decompress(_AUSTEN_DIR.joinpath(_AUSTEN_FILES[name]).read_bytes()).decode("utf-8")


def _stdlib():
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [s for s in subfolders if s not in _STDLIB_SKIP]
        paths += [Path(folder, f) for f in files if f.endswith(".py")]
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        try:
            yield path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue


def _from_path(data: str) -> list[str]:
    path = Path(data).expanduser()
    if path.suffix == ".npy":
        raise EntropyLensError(
            f"--data {data!r} holds token ids, not text; pass it to token_chunks (which reads .npy "
            f"as-is), or pass {_choices()}"
        )
    if path.is_dir():
        files = sorted(
            (p for p in path.rglob("*") if p.is_file() and _is_txt(p)),
            key=lambda p: p.relative_to(path).as_posix(),
        )
        if not files:
            raise EntropyLensError(f"--data {data!r} is a folder with no .txt files; pass {_choices()}")
        return [_read_text(p) for p in files]
    if path.is_file() and _is_txt(path):
        return [_read_text(path)]
    if path.is_file() and path.suffix == ".jsonl":
        return _read_jsonl(path)
    problem = "is not a file of a known kind" if path.exists() else "is not a bundled corpus or a path"
    raise EntropyLensError(f"--data {data!r} {problem}; pass {_choices()}")


def _is_txt(path: Path) -> bool:
    return path.name.endswith((".txt", ".txt.gz"))


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EntropyLensError(
            f"{str(path)!r} is not UTF-8 (byte {e.start:,}); re-save it as UTF-8 or leave it out of --data"
        ) from None


def _read_jsonl(path: Path) -> list[str]:
    documents = []
    fix = 'make each line an object like {"text": "..."}'
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            where = f"line {number} of {str(path)!r}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise EntropyLensError(f"{where} is not UTF-8; re-save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise EntropyLensError(f"{where} is not JSON ({e.msg}); {fix}") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise EntropyLensError(f'{where} has no string "text" field; {fix}')
            documents.append(record["text"])
    return documents
