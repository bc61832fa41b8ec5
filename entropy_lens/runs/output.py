"""Where a run's results go: checked before any work, written by one run at a time, never lost.

    check_file_target(path, flag)     --out must be a file that can be written: a regular file or nothing
    check_replaceable(path, force)    and, for a command that writes one file, kept unless --force, never
                                      a file the run reads, a link's target named when replaced
    check_folder_target(path, flag)   (not a folder, a device, a FIFO, a socket, nor a link to one), not
                                      under a file, in a writable place (a probe file is made and removed)
    OutputLock(path)                  one writer per output (runs/lock.py)
    save_or_rescue(path, save, what)  a write that fails at the end (disk full, the folder gone) saves
                                      the finished work elsewhere and says where
    OutputSettings                    --out, --resume, --force, --quiet, declared once for every command
                                      that writes (each words its own --out: cli/options.add_settings)

A scan's `--out` (the `Output` below):

    out exists, --resume, same scan      the finished file is the result: nothing runs
    out exists, --resume, unreadable     scanned again (said), the file replaced when done
    out exists, --resume, another scan   error (pass --force or another --out)
    out exists, neither flag             error (the three ways forward are named)
    out exists, --force                  overwritten when the new scan is done (atomically)
    a checkpoint, no --force             resumed (said): a plain rerun continues an interrupted scan
    a checkpoint, --force                discarded (said), the scan starts over
    a foreign file at out, --resume      error, kept (only a file with a results file's arrays is repaired)
    a foreign file at the checkpoint     error, kept, --force or not (move it away)

A long scan checkpoints into `<out>.partial.npz` (its running sums, the samples done, the scan's
identity, and what it decided at run time: fused paths, threads); a rerun continues from it. Every
check runs before any model is loaded, so bad input never leaves a file behind.

Whether a file holds "this scan" is `scan_difference` (None: the same scan), which names the first
setting that differs in every refusal (a checkpoint, a results file, a sweep, the ranks of one launch);
--stats counts as a set there (`comparable_scan`), while files keep what was given.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError, problem
from entropy_lens.results import (
    ARRAYS,
    ScanResult,
    WriteFailed,
    check_regular_target,
    npz_holds,
    printable,
    write_failure_reason,
)
from entropy_lens.runs.configs import ScanConfig
from entropy_lens.runs.provenance import recorded_settings, settings_files
from entropy_lens.settings import Checked, first_difference, setting
from entropy_lens.statistics import ENTROPY, EXTRA_STATS, KEY_STATISTICS, PARAMETERS, STATISTICS

__all__ = [
    "CHECKPOINT",
    "Output",
    "OutputSettings",
    "canonical_stats",
    "check_file_target",
    "check_folder_target",
    "check_replaceable",
    "comparable_scan",
    "default_out",
    "partial_path",
    "rescue",
    "rescue_path",
    "save_or_rescue",
    "say",
    "scan_difference",
]


@dataclass(frozen=True, kw_only=True)
class OutputSettings(Checked):
    """Where a command writes and what it does with what is there: the flags every command that writes
    generates from here (the ones it has), each with its own words where its output differs."""

    out: str | None = setting(None, help="the file or folder to write")
    resume: bool = setting(False, help="finish an interrupted run (or reuse a finished one)")
    force: bool = setting(False, help="overwrite an existing --out")
    quiet: bool = setting(False, help="no progress bar")


CHECKPOINT = ("here", "in the checkpoint")  # how `scan_difference` words a checkpoint's other flags
CHECKPOINT_ARRAYS = ("identity", "wall_s")  # a checkpoint's own arrays (runs/sums.py ScanSums.save)


def default_out(config) -> Path:
    """results/<model>-len<N>[-s<scale>|-hs].npz for a ScanConfig."""
    name = Path(config.model.rstrip("/")).name.removesuffix(".gguf")
    tag = f"-s{config.scale:g}" if config.scale is not None else ("-hs" if config.head_scales else "")
    return Path("results") / f"{name}-len{config.length}{tag}.npz"


def partial_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.npz")


def check_file_target(path: str | Path, *, flag: str = "--out", example: str = "x.npz") -> Path:
    """Refuse now, in one line, a file output that could not be written at the end."""
    path = check_regular_target(path, flag=flag, example=example)
    _check_writable_place(path, flag)
    return path


def check_replaceable(
    path: str | Path, *, force: bool, inputs: dict[str, str] | None = None, example: str = "x.npz"
) -> Path:
    """A one-file --out checked before any work (`check_file_target`), then against what stands there: an
    existing file is kept unless `force`; a file the run reads (`inputs`, {flag: path}) is refused even
    with it (the run would replace what it reads); a symlink is written through, the link kept, so with
    `force` the file it points to is named on stderr (`say`) before it is replaced.

    Args:
        path: the --out given.
        force: whether --force was given.
        inputs: {flag: path} of the files the run reads (--prompt-file, --data).
        example: the file name suggested where a folder is given.

    Returns:
        Path: `path`.
    """
    target = check_file_target(path, example=example)
    if not target.exists():
        return target
    for flag, source in (inputs or {}).items():
        if Path(source).exists() and os.path.samefile(target, source):
            raise EntropyLensError(
                f"--out {printable(path)} is the {flag} file {printable(source)} this run reads; pass another --out"
            )
    link = f" (a link to {printable(os.path.realpath(target))})" if target.is_symlink() else ""
    if not force:
        raise EntropyLensError(
            f"{printable(path)}{link} already exists; pass --force to overwrite it, or another --out"
        )
    if link:
        say(
            f"--out {printable(path)} is a link to {printable(os.path.realpath(target))}: --force replaces that file (the link is kept)"
        )
    return target


def check_folder_target(path: str | Path, *, flag: str = "--out") -> Path:
    """Refuse now, in one line, a folder output that could not be made or written."""
    path = check_regular_target(path, flag=flag, folder=True)
    _check_writable_place(path / "x", flag, shown=path)
    return path


def _check_writable_place(path: Path, flag: str, *, shown: Path | None = None) -> None:
    """The nearest existing folder above `path` must be a folder we can create files in."""
    shown = path if shown is None else shown
    place = path.absolute().parent
    while not place.exists() and not place.is_symlink():
        place = place.parent
    if not place.is_dir():
        raise EntropyLensError(
            f"{flag} {shown}: {place} is a file, so nothing can be written under it; pass another {flag}"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".entropy-lens-probe-", dir=place)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise EntropyLensError(
            f"{flag} {shown}: cannot write in {place} ({err.strerror or err}); pass a writable location"
        ) from None


def rescue_path(path: Path) -> Path:
    """Where a result that cannot be written to `path` goes: the cache's `rescued/` folder
    ($ENTROPY_LENS_CACHE or ~/.cache/entropy_lens), under the name with a UTC time stamp."""
    from entropy_lens.models.gguf import cache_root

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return cache_root() / "rescued" / f"{path.stem}-{stamp}-{os.getpid()}{''.join(path.suffixes)}"


def save_or_rescue(path: Path, save: Callable[[Path], object], *, what: str) -> Path:
    """`save(path)`; if that fails, `rescue` (below): the finished work is never thrown away."""
    try:
        save(path)
    except (OSError, WriteFailed) as err:
        rescue(path, save, what=what, error=err)
    return path


def rescue(path: Path, save: Callable[[Path], object], *, what: str, error: OSError | WriteFailed) -> None:
    """Writing `path` failed with `error` (disk full, the folder removed or made read-only during the
    run): `save` to `rescue_path(path)`, else to the temporary folder, and raise an error naming where
    the finished `what` is now. Only when nothing can be written anywhere is the work lost, and the
    error says so."""
    reason = write_failure_reason(error)
    tried, rescued = [], rescue_path(path)
    for alternative in (rescued, Path(tempfile.gettempdir()) / rescued.name):
        try:
            save(alternative)
        except (OSError, WriteFailed) as err:
            tried.append(f"{alternative}: {write_failure_reason(err)}")
            continue
        raise EntropyLensError(
            f"could not write {path} ({reason}); the finished {what} is saved in {alternative} instead: "
            f"move it with `mv {alternative} {path}` once {path.parent} is writable"
        )
    raise EntropyLensError(
        f"could not write {path} ({reason}) nor anywhere else ({'; '.join(tried)}): the {what} is lost; "
        "free disk space or pass a writable --out and rerun"
    )


@dataclass(frozen=True)
class Output:
    """The scan's destination (`path` None: nothing is written) and the user's --resume/--force."""

    path: Path | None
    resume: bool = False
    force: bool = False

    @classmethod
    def of(cls, out: str | Path | None, *, resume: bool = False, force: bool = False) -> Output:
        if out is not None:
            check_file_target(out, example="scan.npz")
            check_regular_target(partial_path(Path(out)))
        return cls(Path(out) if out is not None else None, resume, force)

    def finished(self, scan_config: dict) -> ScanResult | None:
        """The result already at `path` when --resume names this same scan; None when the scan must run.
        Raises when an existing file would be overwritten without --force, or when a checkpoint of
        another scan is there and would be lost."""
        if self.path is None:
            return None
        if self.path.exists() and not self.force:
            if not self.resume:
                raise EntropyLensError(
                    f"{self.path} already exists; pass --resume to reuse it, --force to overwrite it, "
                    "or another --out"
                )
            try:
                done = ScanResult.load(self.path)
            except EntropyLensError as err:
                if not npz_holds(self.path, (*ARRAYS, "meta"), first="meta"):  # not ours: never replaced
                    raise EntropyLensError(
                        f"{self.path} is not an entropy-lens results file ({problem(err)}), so --resume "
                        "keeps it; pass another --out, or --force to overwrite it"
                    ) from None
                say(f"{problem(err)}: scanning it again (--resume repairs it)")
                done = None
            theirs = None if done is None else done.meta.get("scan_config")
            differs = "the scan's flags (none recorded in the file)" if theirs is None else None
            # a --head-scales file compared as the file named (the file names it from its folder)
            ours = settings_files(recorded_settings(scan_config, self.path), self.path)
            theirs = settings_files(theirs, self.path)
            differs = differs or scan_difference(ours, theirs, names=("here", "in the file"))
            if done is not None and differs is None:
                return done
            if done is not None:
                raise EntropyLensError(
                    f"{self.path} holds a different scan ({differs}); pass --force to overwrite it or "
                    "another --out"
                )
        partial = self.partial
        if partial.exists() and not npz_holds(partial, CHECKPOINT_ARRAYS, first=CHECKPOINT_ARRAYS[0]):
            raise EntropyLensError(
                f"{partial} stands where this scan keeps its checkpoint but is not one (another program's "
                "file?), and is kept; move it away or pass another --out"
            )
        if partial.exists():
            if self.force:
                partial.unlink()
                say(f"discarded the checkpoint {partial} of an unfinished scan (--force starts over)")
                return None
            theirs = checkpoint_scan_config(partial)
            differs = None if theirs is None else scan_difference(scan_config, theirs, names=CHECKPOINT)
            if differs is not None:
                raise EntropyLensError(
                    f"{partial} is the checkpoint of an unfinished scan with other flags ({differs}); rerun "
                    "with those flags to finish it, or pass --force to discard it (or another --out)"
                )
        return None

    @property
    def partial(self) -> Path | None:
        """The checkpoint file (None when nothing is written)."""
        return None if self.path is None else partial_path(self.path)

    def resumable(self) -> Path | None:
        """The checkpoint to continue from (a plain rerun resumes, as --resume does; --force has
        discarded it in `finished`)."""
        return self.partial if self.partial is not None and self.partial.exists() else None


def checkpoint_scan_config(partial: Path) -> dict | None:
    """The scan_config a checkpoint belongs to (None: unreadable, which `ScanSums.restore` reports)."""
    try:
        with np.load(partial, allow_pickle=False) as z:
            return json.loads(str(z["identity"]))["scan_config"]
    except Exception:  # noqa: BLE001 - any damage: restore says what it is and starts over
        return None


def say(message: str) -> None:
    """One line to stderr about what a run did to its files (resumed, repaired, discarded)."""
    print(f"entropy-lens: {message}", file=sys.stderr, flush=True)


def canonical_stats(stats: str) -> str:
    """--stats as the set it asks for: the statistics beyond entropy once each, in STATISTICS's order,
    "all" when that is every one and "entropy" when none ("max_prob,distance" and "distance,max_prob" are
    one scan). A name that is no statistic leaves it as given (`ScanConfig.check` refuses it)."""
    if stats == "all":
        return stats
    asked = set(filter(None, stats.split(",")))
    if asked - set(STATISTICS):
        return stats
    extras = [name for name in EXTRA_STATS if name in asked]
    return "all" if extras == list(EXTRA_STATS) else ",".join(extras) or ENTROPY.name


def comparable_scan(record: dict) -> dict:
    """A scan's record (a `ScanConfig.to_dict()`, or an identity holding one under "scan_config") as two
    records of one scan are equal: --stats as a set (`canonical_stats`), a statistic's parameter
    (--first-keys, --recent-keys, --query-window) left out where no statistic taking it is recorded.
    Records are compared this way, never stored so: results files and cache keys keep what was given."""
    if "scan_config" in record:
        return {**record, "scan_config": comparable_scan(record["scan_config"])}
    if "stats" not in record:
        return dict(record)
    out = {**record, "stats": canonical_stats(record["stats"])}
    for name in _idle_parameters(out["stats"]):  # it changes no number of this scan
        out.pop(name, None)
    return out


def _idle_parameters(stats: str) -> list[str]:
    """The statistics' parameters (statistics.PARAMETERS) that no statistic a canonical --stats records
    takes: K without first_mass, W without recent_mass, the query window without a key statistic."""
    recorded = [s for s in (*STATISTICS.values(), *KEY_STATISTICS.values()) if _records(stats, s.name)]
    taken = {parameter.name for s in recorded for parameter in s.parameters}
    return [name for name in PARAMETERS if name not in taken]


def _records(stats: str, name: str) -> bool:
    """Whether a canonical --stats (`canonical_stats`) records the statistic `name`."""
    return stats == "all" or name in stats.split(",")


def scan_difference(ours: dict, theirs: dict, *, names: tuple[str, str] = ("here", "there")) -> str | None:
    """The first setting in which two scans' records (`comparable_scan`'s inputs, as made or as read back
    from JSON) differ, as "--seed (1 here, 0 there)"; None when they are the same scan."""
    labels = {"config_hash": "the checkpoint's config.json", "chunks": "the chunks drawn from --data"}
    ours, theirs = comparable_scan(ours), comparable_scan(theirs)
    if "scan_config" in ours:  # the flags first: --seed or --len, not the chunks they drew, is named
        ours = {"scan_config": ours["scan_config"], **ours}
    return first_difference(ours, theirs, cls=ScanConfig, labels=labels, names=names)
