"""Where a scan's results go, and what an existing file there means (--out, --resume, --force).

    out exists, --resume, same scan      the finished file is the result: nothing runs
    out exists, --resume, another scan   error (pass --force or another --out)
    out exists, neither flag             error (the three ways forward are named)
    out exists, --force                  overwritten when the new scan is done (atomically)

A long scan checkpoints into `<out>.partial.npz` (its running sums, the samples done, the scan's
identity); `--resume` continues from it. Every check runs before any model is loaded, so bad input
never leaves a file behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult

__all__ = ["Output", "default_out", "partial_path"]


def default_out(config) -> Path:
    """results/<model>-len<N>[-s<scale>|-hs].npz for a ScanConfig."""
    name = Path(config.model.rstrip("/")).name.removesuffix(".gguf")
    tag = f"-s{config.scale:g}" if config.scale is not None else ("-hs" if config.head_scales else "")
    return Path("results") / f"{name}-len{config.length}{tag}.npz"


def partial_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.npz")


@dataclass(frozen=True)
class Output:
    """The scan's destination (`path` None: nothing is written) and the user's --resume/--force."""

    path: Path | None
    resume: bool = False
    force: bool = False

    @classmethod
    def of(cls, out: str | Path | None, *, resume: bool = False, force: bool = False) -> Output:
        return cls(Path(out) if out is not None else None, resume, force)

    def finished(self, scan_config: dict) -> ScanResult | None:
        """The result already at `path` when --resume names this same scan; None when the scan must run.
        Raises when an existing file would be overwritten without --force."""
        if self.path is None or not self.path.exists():
            return None
        if self.resume:
            done = ScanResult.load(self.path)
            if done.meta.get("scan_config") == scan_config:
                return done
            raise EntropyLensError(
                f"{self.path} holds a different scan; pass --force to overwrite it or another --out"
            )
        if not self.force:
            raise EntropyLensError(
                f"{self.path} already exists; pass --resume to reuse it, --force to overwrite it, "
                "or another --out"
            )
        return None

    @property
    def partial(self) -> Path | None:
        """The checkpoint file (None when nothing is written)."""
        return None if self.path is None else partial_path(self.path)

    def resumable(self) -> Path | None:
        """The checkpoint to continue from: only with --resume, and only if one exists."""
        return self.partial if self.resume and self.partial is not None and self.partial.exists() else None

    def write(self, result: ScanResult) -> None:
        """Save the finished result (atomically) and drop the checkpoint."""
        if self.path is not None:
            result.save(self.path)
            self.partial.unlink(missing_ok=True)
