"""Issue 65, item 5: only files a scan recognises as its own are resumed, repaired or replaced. main read
another program's np.savez at --out as a damaged result ("lacks entropy…: scanning it again") and
overwrote it on --resume, and deleted a text file at `<out>.partial.npz` as an unreadable checkpoint.
And item 8: --resume over a difference in a statistic's parameter (--recent-keys, --first-keys, --query-window)
of a scan that records no statistic taking it."""

import dataclasses

import numpy as np
import pytest

from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.configs import ScanConfig
from entropy_lens.runs.output import Output, partial_path, scan_difference

CONFIG = ScanConfig(model="tiny-nope", length=16, samples=1, data="austen:persuasion")


def test_resume_keeps_another_programs_npz_at_out(tmp_path):
    out = tmp_path / "foreign.npz"
    np.savez(out, weights=np.arange(5))
    before = out.read_bytes()
    with pytest.raises(
        EntropyLensError, match=r"is not an entropy-lens results file .* --resume keeps it"
    ) as err:
        Output.of(out, resume=True).finished(CONFIG.to_dict())
    assert "\n" not in str(err.value) and "--force" in str(err.value)
    assert out.read_bytes() == before
    assert Output.of(out, force=True).finished(CONFIG.to_dict()) is None  # --force: the user said so


@pytest.mark.parametrize("content", [b"notes\n", b"PK\x03\x04 truncated"], ids=["text", "truncated"])
def test_resume_keeps_a_file_it_cannot_recognise(tmp_path, content):
    out = tmp_path / "r.npz"
    out.write_bytes(content)
    with pytest.raises(EntropyLensError, match="is not an entropy-lens results file"):
        Output.of(out, resume=True).finished(CONFIG.to_dict())
    assert out.read_bytes() == content


def test_resume_still_repairs_its_own_damaged_file(tmp_path, capsys):
    """A results file's arrays with an unreadable meta (tests/runs/test_reliability.py's damaged file):
    scanned again, as the README says."""
    out = tmp_path / "r.npz"
    arrays = {k: np.zeros((1, 1, 4)) for k in ("entropy", "entropy_sq")}
    arrays |= {k: np.zeros(4) for k in ("loss", "loss_sq", "count")}
    np.savez(out, meta=np.array("{not json"), **arrays)
    assert Output.of(out, resume=True).finished(CONFIG.to_dict()) is None
    assert "scanning it again" in capsys.readouterr().err
    out.write_bytes(out.read_bytes()[: out.stat().st_size // 2])  # cut short: its first member, meta, named
    assert Output.of(out, resume=True).finished(CONFIG.to_dict()) is None
    assert "scanning it again" in capsys.readouterr().err


@pytest.mark.parametrize("force", [False, True])
def test_a_foreign_file_at_the_checkpoints_name_is_kept(tmp_path, force):
    out = tmp_path / "notes.npz"
    partial = partial_path(out)
    partial.write_text("my notes", encoding="utf-8")
    with pytest.raises(
        EntropyLensError, match=r"notes.npz.partial.npz stands where .* is not one .* is kept"
    ) as err:
        Output.of(out, force=force).finished(CONFIG.to_dict())
    assert "\n" not in str(err.value) and partial.read_text(encoding="utf-8") == "my notes"


def test_a_checkpoint_of_its_own_is_still_discarded_by_force(tmp_path, capsys):
    out = tmp_path / "r.npz"
    partial = partial_path(out)
    np.savez(partial, identity=np.array("{}"), wall_s=np.array(1.0))
    assert Output.of(out, force=True).finished(CONFIG.to_dict()) is None
    assert not partial.exists() and "discarded the checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    "parameter, value, taker",
    [("recent_keys", 32, "recent_mass"), ("first_keys", 2, "first_mass"), ("query_window", 8, "received")],
)
def test_a_parameter_differs_only_where_a_statistic_taking_it_is_recorded(parameter, value, taker):
    """--recent-keys without recent_mass (issue 65, item 8), and likewise --first-keys without first_mass
    (refused on main: "a.npz holds a different scan (--first-keys (2 here, 1 in the file))") and the
    query window without a key statistic: the value changes no number of the scan."""
    flag = "--" + parameter.replace("_", "-")
    for stats in ("entropy", "max_prob,varentropy"):
        ours = dataclasses.replace(CONFIG, stats=stats)
        assert (
            scan_difference(ours.to_dict(), dataclasses.replace(ours, **{parameter: value}).to_dict()) is None
        )
    for stats in (taker, "all", f"max_prob,{taker}"):
        ours = dataclasses.replace(CONFIG, stats=stats)
        differs = scan_difference(ours.to_dict(), dataclasses.replace(ours, **{parameter: value}).to_dict())
        assert differs is not None and flag in differs
