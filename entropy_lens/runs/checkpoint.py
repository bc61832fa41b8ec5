"""A scan's checkpoint: the one owner of what a partial file must match, what it restores, and when it is
written.

    checkpoint = Checkpointer(run, sums, output, started=t0, every_s=60)
    checkpoint.restore()          # a rerun: the sums and what the interrupted process decided (said)
    checkpoint.every_so_often()   # after each batch: saved every `every_s` seconds
    checkpoint.interrupted()      # Ctrl-C / SIGTERM: saved, and the message that says how to finish
    checkpoint.write(result)      # the end: `out` written atomically, the partial file removed

The partial file (`<out>.partial.npz`, runs/output.py) holds the running sums, the samples done, the
run's `identity` (the scan's config, the model's config hash, the chunks drawn) and what the run
`decided` at run time that changes its numbers (the paths `--fused auto` chose, the CPU threads), so a
resumed scan ends with the same arrays as an uninterrupted one, bit for bit. Only a single-process scan
with an `out` checkpoints: under torchrun no rank writes one (resuming is single-process).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from entropy_lens.capture.fused import PathChoices
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, WriteFailed, write_failure_reason
from entropy_lens.runs.output import Output, partial_path, rescue, say
from entropy_lens.runs.sums import ScanSums

__all__ = ["Checkpointer"]


class Checkpointer:
    """The checkpoint of `run`'s `sums` at `output` (runs/scan.py's Run; runs/output.py's Output)."""

    def __init__(self, run, sums: ScanSums, output: Output, *, started: float, every_s: float):
        self.run, self.sums, self.output = run, sums, output
        self.started, self.every_s = started, every_s
        self.path: Path | None = output.partial if run.world.size == 1 else None  # None: never written
        self.last = time.perf_counter()

    @property
    def identity(self) -> dict:
        """What a partial file must match to be resumed by this run."""
        run = self.run
        return {
            "scan_config": run.config.to_dict(),
            "config_hash": run.lm.config_hash,
            "chunks": run.chunks.indices,
        }

    def decided(self) -> dict:
        """What the run decided at run time that changes its numbers."""
        choices = self.run.choices
        return {
            "fused_choices": choices.to_record() if choices is not None else {},
            "threads": torch.get_num_threads(),
        }

    def restore(self) -> None:
        """Continue from the partial file when there is one to resume (runs/output.py decides), with
        what the interrupted process decided at run time; said in a line either way."""
        output, run = self.output, self.run
        if output.resumable() is None:
            return
        if run.world.size > 1:
            raise EntropyLensError(
                f"{output.partial} is the checkpoint of an unfinished single-process scan; finish it "
                "without torchrun, or pass --force to discard it"
            )
        decided = self.sums.restore(output.partial, self.identity)
        if decided is None:
            say(f"the checkpoint {output.partial} is unreadable: starting the scan over")
            return
        run.choices = PathChoices.from_record(decided.get("fused_choices"), timer=run.choices.timer)
        threads = decided.get("threads")
        if threads is not None and threads != torch.get_num_threads():
            say(
                f"the interrupted scan ran with {threads} CPU threads, this process has "
                f"{torch.get_num_threads()}: numbers may differ from an uninterrupted scan in the last "
                f"bits; pass --threads {threads} to resume it exactly"
            )
        say(
            f"resuming {output.path} from its checkpoint: {self.sums.samples} of {run.config.samples} "
            "samples done (--force starts over)"
        )

    def save(self) -> None:
        wall_s = time.perf_counter() - self.started
        self.sums.save(self.path, self.identity, wall_s, self.decided())
        self.last = time.perf_counter()

    def every_so_often(self) -> None:
        if self.path is not None and time.perf_counter() - self.last >= self.every_s:
            self.save()

    def interrupted(self) -> str | None:
        """Save what is done (if anything) and return the line that says how to finish; None when nothing
        was saved."""
        if self.path is None or not self.sums.samples:
            return None
        self.save()
        return (
            f"interrupted after {self.sums.samples} samples, saved in {self.path}; rerun the same "
            "command to finish the scan from there"
        )

    def write(self, result: ScanResult) -> None:
        """Save the finished result and drop the partial file. If `out` cannot be written, the finished
        sums go to the partial file (rerunning the command then writes the result without scanning
        again), or else the result is rescued elsewhere; the error says where."""
        out = self.output.path
        try:
            result.save(out)
        except (OSError, WriteFailed) as err:
            if self.path is not None:
                try:
                    self.save()
                except (OSError, WriteFailed):
                    pass
                else:
                    raise EntropyLensError(
                        f"could not write {out} ({write_failure_reason(err)}); the finished scan is kept in its "
                        f"checkpoint {self.path}: rerun the same command once {out.parent} is writable "
                        "and it writes the result without scanning again"
                    ) from None
            rescue(out, result.save, what="scan", error=err)
        partial_path(out).unlink(missing_ok=True)
