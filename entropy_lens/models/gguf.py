"""GGUF files -> a cached float32 Hugging Face folder.

GGUF files are dequantised by transformers (float32; its time: docs/internals/layout.md), then saved
once as a float32 safetensors folder + tokenizer under the cache (env ENTROPY_LENS_CACHE or
~/.cache/entropy_lens). Every load, the first included, then reads that folder, so the first and
later loads give the same model. The cache key is the file name, its size and a hash of its first
and last MiB (not mtime: a reinstall should not invalidate it, an edited file must). The folder is
written to a temporary sibling and renamed into place with a completion marker inside, so a crashed
or concurrent writer never leaves a half cache that a later load trusts. Making one is done under an
flock on the cache's folder (the kernel releases it when its holder dies, however it dies): a second
process that needs a cache meanwhile (a test suite's other worker, another environment's Python) waits,
saying so in one line, then reads the first's, or reuses it, instead of converting again. The conversion
says on stderr that it is running and how long it takes (it is the one silent wait of a first run).
Each transformers version keeps a cache of its own (it writes the tokenizer, and another version's decodes
differently); where another version's cache of the file is there (a second environment: kvpress's
transformers 5.2 beside `.venv`'s), `reuse_weights` takes its weights and config instead of dequantising
again, where this version reads them as they are (its config equal to what this version reads from the
GGUF, every tensor loaded bit for bit), and converts the tokenizer alone; else one line says why not,
and the file is converted. `ensure_gguf_cache(gguf, convert=..., reuse=...)` takes another converter and
another reuse (tests pass fast fakes that copy a tiny folder): the caching, its atomic rename and its
clean-up are the same whatever makes the folder.
The training length a GGUF declares (`<arch>.context_length`, e.g. 8192 for SmolLM2) is read from the
file's header by `gguf_train_len` (a few kB of key-value pairs, no tensors), since the converted
config.json carries no `train_len`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from entropy_lens.errors import EntropyLensError, first_line

__all__ = [
    "CACHE_MARKER",
    "CONVERSION_S",
    "cache_root",
    "config_difference",
    "context_length",
    "convert_gguf",
    "convert_tokenizer",
    "ensure_gguf_cache",
    "gguf_cache_dir",
    "gguf_train_len",
    "read_gguf_metadata",
    "reuse_weights",
    "weights_differ",
]

CACHE_MARKER = ".entropy_lens_complete"  # written last inside a cache folder: its presence = complete
# SmolLM2-135M's conversion, the range in seconds the first run's line states: benchmarks/gguf_convert_cpu.py's
# record (benchmarks/results/gguf_convert_cpu.json) on a quiet machine to a busy one; tests/benchmarks/test_gguf_convert.py
# holds the record inside it
CONVERSION_S = (60, 180)
_STALE_PARTIAL_S = (
    3600  # a half-written cache older than this has no live writer (a conversion takes far less)
)


def cache_root() -> Path:
    return Path(os.environ.get("ENTROPY_LENS_CACHE") or Path.home() / ".cache" / "entropy_lens")


def _gguf_fingerprint(path: Path, chunk: int = 1 << 20) -> str:
    """sha256[:16] of size + first MiB + last MiB: cheap, and changes when the file does."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(chunk))
        if size > chunk:
            f.seek(max(size - chunk, chunk))
            digest.update(f.read())
    return digest.hexdigest()[:16]


def gguf_cache_dir(gguf: Path) -> Path:
    """Where the float32 copy of `gguf` lives (whether or not it exists yet): one per transformers version,
    which writes the tokenizer (a copy made by another version, e.g. the kvpress environment's 5.2, decodes
    differently)."""
    import transformers

    return cache_root() / "gguf" / f"{gguf.stem}-{_gguf_fingerprint(gguf)}-tf{transformers.__version__}"


# GGUF value types (the format's spec): code -> struct format of a scalar; 8 is a string, 9 an array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def read_gguf_metadata(gguf: Path, *, stop_at: tuple[str, ...] = ()) -> dict:
    """The key-value metadata in `gguf`'s header (little-endian GGUF v2/v3), stopping early once every
    key of `stop_at` has been read; arrays (the tokenizer's vocabulary) are skipped, kept as None."""
    with open(gguf, "rb") as f:

        def take(fmt: str):
            size = struct.calcsize("<" + fmt)
            data = f.read(size)
            if len(data) < size:
                raise EntropyLensError(
                    f"{gguf} ends inside its header; the file is truncated, download it again"
                )
            return struct.unpack("<" + fmt, data)[0]

        def string() -> str:
            return f.read(take("Q")).decode("utf-8", errors="replace")

        def value(kind: int):
            if kind in _SCALARS:
                return take(_SCALARS[kind])
            if kind == _STRING:
                return string()
            if kind == _ARRAY:
                item, n = take("I"), take("Q")
                for _ in range(n):
                    value(item)
                return None
            raise EntropyLensError(f"{gguf}: unknown GGUF value type {kind}; is this a GGUF file?")

        if f.read(4) != b"GGUF":
            raise EntropyLensError(
                f"{gguf} is not a GGUF file (no GGUF magic); pass a .gguf file or an HF folder"
            )
        version = take("I")
        if version < 2:
            raise EntropyLensError(f"{gguf} is GGUF version {version}; convert it to version 2 or later")
        take("Q")  # tensor count
        metadata: dict = {}
        for _ in range(take("Q")):
            key = string()
            metadata[key] = value(take("I"))
            if stop_at and all(k in metadata for k in stop_at):
                break
        return metadata


def context_length(metadata: Mapping) -> int | None:
    """The context length GGUF metadata declares: `<general.architecture>.context_length`, else any
    `*.context_length` key (None if none, or not a positive whole number)."""
    arch = metadata.get("general.architecture")
    value = metadata.get(f"{arch}.context_length") if arch else None
    if value is None:
        value = next((v for k, v in metadata.items() if k.endswith(".context_length")), None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return int(value)


def gguf_train_len(gguf: Path) -> int | None:
    """The training length `gguf` declares (its header's context length; SmolLM2-135M: 8192), or None."""
    head = read_gguf_metadata(gguf, stop_at=("general.architecture",))
    arch = head.get("general.architecture")
    found = context_length(head)
    if found is None and arch:
        found = context_length(read_gguf_metadata(gguf, stop_at=(f"{arch}.context_length",)))
    return found


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise `gguf` with transformers and save it, float32 with its tokenizer, into folder `out`."""
    import torch
    from transformers import AutoModelForCausalLM

    from entropy_lens.progress import every_bar_off

    try:  # its "Converting and de-quantizing GGUF tensors" and "Loading weights" bars off: one line says it
        with every_bar_off():
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, local_files_only=True, dtype=torch.float32
            )
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        raise _unreadable(gguf, e) from None
    # The model is already dequantised; save_pretrained refuses GGUF-"quantised" models until the
    # quantizer and its config entry are gone (checked in transformers 5.23).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with _writing(out), every_bar_off():  # "Writing model shards"
        model.save_pretrained(out)
    convert_tokenizer(gguf, out)


def convert_tokenizer(gguf: Path, out: Path) -> None:
    """`gguf`'s tokenizer as this transformers reads it, saved into folder `out` (part of `convert_gguf`, and
    all that `reuse_weights` converts)."""
    from transformers import AutoTokenizer

    from entropy_lens.progress import every_bar_off

    try:
        with every_bar_off():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        raise _unreadable(gguf, e) from None
    with _writing(out):
        tokenizer.save_pretrained(out)


def _unreadable(gguf: Path, err: BaseException) -> EntropyLensError:
    return EntropyLensError(
        f"transformers cannot read {gguf} ({first_line(err)}); use a GGUF of an architecture "
        "transformers supports (e.g. Llama) or a Hugging Face folder"
    )


@contextlib.contextmanager
def _writing(out: Path):
    """A write into the cache folder `out`: a failure (a full disk) refused in one line naming the fix."""
    try:
        yield
    except OSError as e:
        raise EntropyLensError(
            f"cannot write the model cache in {out.parent} ({e}); free disk space or set "
            "ENTROPY_LENS_CACHE to another folder"
        ) from None


# what differs between two transformers versions' saves of one model and changes nothing it computes
UNCOMPARED = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype"}
# what reuse_weights takes from another version's cache: the model's files, never its tokenizer's
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json")


def reuse_weights(gguf: Path, other: Path, out: Path) -> str | None:
    """Fill folder `out` from `other`, a complete cache of `gguf` that another transformers version made: its
    weights and config where this transformers reads them as they are (the config it reads from the GGUF
    itself, every tensor of the safetensors loaded, bit for bit: `weights_differ`), and the tokenizer
    converted here (each version writes its own, and another version's decodes differently). The
    dequantisation, most of a conversion, is skipped. None when done; else why not, in a few words (the
    caller converts instead)."""
    from transformers import AutoConfig

    try:
        wanted = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        found = AutoConfig.from_pretrained(other, local_files_only=True)
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        return f"its config cannot be compared with the GGUF's here ({first_line(e)})"
    differ = config_difference(wanted.to_dict(), found.to_dict())
    if differ is not None:
        return f"its config reads differently here ({differ})"
    for f in sorted({f for pattern in MODEL_FILES for f in other.glob(pattern)}):
        with _writing(out):
            shutil.copy2(f, out / f.name)
    differ = weights_differ(out)
    if differ is not None:
        return differ
    convert_tokenizer(gguf, out)
    return None


def config_difference(wanted: dict, found: dict) -> str | None:
    """The first setting in which two configs' dicts differ, as "name: a here, b there" (None: none), the
    keys of UNCOMPARED and the quantisation's (gone once dequantised) left out."""
    left = UNCOMPARED | {"quantization_config"}
    keys = sorted((set(wanted) | set(found)) - left)
    name = next((k for k in keys if wanted.get(k) != found.get(k)), None)
    return None if name is None else f"{name}: {wanted.get(name)!r} here, {found.get(name)!r} there"


def weights_differ(folder: Path) -> str | None:
    """Why the model in `folder` does not load here as its safetensors hold it (a key missing, unexpected
    or of another shape, a tensor of other numbers once loaded), in a few words; None where it does."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from entropy_lens.progress import every_bar_off

    try:
        with every_bar_off():
            model, info = AutoModelForCausalLM.from_pretrained(
                folder, local_files_only=True, dtype=torch.float32, output_loading_info=True
            )
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        return f"its weights do not load here ({first_line(e)})"
    found = {kind: names for kind, names in info.items() if names}
    if found:
        kind, names = next(iter(found.items()))
        return f"its weights do not load here as saved ({kind.replace('_', ' ')}: {', '.join(sorted(map(str, names))[:3])})"
    state = model.state_dict()
    for path in sorted(folder.glob("*.safetensors")):
        for name, tensor in load_file(path).items():
            if name in state and not torch.equal(state[name], tensor.to(state[name].dtype)):
                return f"its weights load as other numbers here ({name})"
    return None


def _remove_stale_partials(final: Path) -> None:
    """Delete half-written caches left by killed writers (old enough that no writer is alive)."""
    for stale in final.parent.glob(f".{final.name}.*.partial"):
        try:
            if time.time() - stale.stat().st_mtime > _STALE_PARTIAL_S:
                shutil.rmtree(stale, ignore_errors=True)
        except OSError:  # removed by another process meanwhile
            continue


def ensure_gguf_cache(gguf: Path, *, convert=convert_gguf, reuse=reuse_weights) -> Path:
    """The cached float32 HF folder for `gguf`, made first if needed (atomically): from another transformers
    version's cache of it where `reuse(gguf, other, folder)` can (returning None), else converted with
    `convert(gguf, folder)`."""
    final = gguf_cache_dir(gguf)
    if (final / CACHE_MARKER).is_file():
        return final
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        folder = os.open(final.parent, os.O_RDONLY)
    except OSError as e:
        raise _unwritable(final, e) from None
    try:
        _wait_for_other_writers(folder, gguf)
        if (final / CACHE_MARKER).is_file():  # made by the process waited for
            return final
        return _make_cache(gguf, final, convert, reuse)
    finally:
        os.close(folder)  # releases the flock


def _unwritable(final: Path, err: OSError) -> EntropyLensError:
    return EntropyLensError(
        f"cannot write the model cache under {final.parent} ({err}); set ENTROPY_LENS_CACHE to a writable folder"
    )


def _wait_for_other_writers(folder: int, gguf: Path) -> None:
    """Take the flock on the cache's folder (fd `folder`), waiting, with one line, while another process
    makes a cache in it."""
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(
            f"waiting for another process that is making a model cache beside {gguf.name}'s",
            file=sys.stderr,
            flush=True,
        )
        fcntl.flock(folder, fcntl.LOCK_EX)


def _make_cache(gguf: Path, final: Path, convert, reuse) -> Path:
    """`ensure_gguf_cache`'s making of the cache `final` (the lock held): in a temporary sibling, renamed
    into place with its marker."""
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    except OSError as e:
        raise _unwritable(final, e) from None
    try:
        _remove_stale_partials(final)
        made = _from_another_version(gguf, final, tmp, reuse)
        if not made:
            # the one silent wait of a first run: say so, on stderr (stdout is results)
            print(
                f"converting {gguf.name} to a float32 cache in {final}, once for transformers "
                f"{final.name.rsplit('-tf', 1)[1]} (SmolLM2-135M: {CONVERSION_S[0] // 60}-{CONVERSION_S[1] // 60} "
                "min on 2 cores)",
                file=sys.stderr,
                flush=True,
            )
            t0 = time.perf_counter()
            convert(gguf, tmp)
            print(f"converted in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        meta = {"gguf": str(gguf), "size": gguf.stat().st_size}
        (tmp / CACHE_MARKER).write_text(json.dumps(meta))
        if final.exists() and not (final / CACHE_MARKER).is_file():
            shutil.rmtree(final, ignore_errors=True)  # an unmarked folder is never trusted
        try:
            os.rename(tmp, final)  # atomic on one filesystem; fails if another writer won the race
        except OSError:
            if not (final / CACHE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left when the rename succeeded
    return final


def _from_another_version(gguf: Path, final: Path, tmp: Path, reuse) -> bool:
    """Fill `tmp` from the newest complete cache of `gguf` that another transformers version made (a second
    environment: kvpress's), saying so in one line; or say once why not, emptying `tmp` (False)."""
    stem, version = final.name.rsplit("-tf", 1)
    others = sorted(
        (
            other
            for other in final.parent.glob(stem + "-tf*")
            if other != final and (other / CACHE_MARKER).is_file()
        ),
        key=lambda other: _version_key(other.name.rsplit("-tf", 1)[1]),
    )
    if not others:
        return False
    other = others[-1]
    theirs = other.name.rsplit("-tf", 1)[1]
    print(
        f"making the cache of {gguf.name} for transformers {version} in {final} from transformers {theirs}'s "
        "where its weights load the same here (checked now), with a tokenizer of this version's",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    why = reuse(gguf, other, tmp)
    if why is None:
        print(
            f"made in {time.perf_counter() - t0:.0f} s, without converting again", file=sys.stderr, flush=True
        )
        return True
    print(f"the cache of transformers {theirs} is not reused: {why}", file=sys.stderr, flush=True)
    for f in tmp.iterdir():  # what the attempt copied
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    return False


def _version_key(version: str) -> tuple:
    """ "5.24.0" -> (5, 24, 0): versions in numeric order (a part that is not a number sorts first)."""
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))
