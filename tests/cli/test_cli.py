"""The command line itself: --help and argument errors without torch, --threads on every command."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from cli_cases import COMMANDS

from entropy_lens.cli import build_parser, main
from entropy_lens.results import ScanResult

_IMPORTS_AFTER = """
import contextlib, io, sys
from entropy_lens.cli import main
for argv in {argvs!r}:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
print(sorted(m for m in ("torch", "transformers", "matplotlib", "scipy") if m in sys.modules))
"""


def test_help_and_argument_errors_import_no_torch():
    """`--help` and a bad flag return before torch and transformers load (they take seconds)."""
    argvs = [["--help"], *([c, "--help"] for c in COMMANDS), ["scan", "tiny-nope"], ["fit"], ["nope"]]
    code = _IMPORTS_AFTER.format(argvs=argvs)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]", run.stdout


def test_generate_refuses_an_existing_out_before_torch_loads(tmp_path):
    """Issue 80 item 3: `generate --out F` with F there is refused before torch and transformers load
    (it took 4-6 s on 2 shared cores, the model's imports first; now what --help takes)."""
    out = tmp_path / "gen.npz"
    out.write_bytes(b"kept")
    argv = ["generate", "tiny-nope", "--data", "austen:emma", "--out", str(out)]
    code = "import sys\nfrom entropy_lens.cli import main\nprint(main(sys.argv[1:]))\n"
    code += "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    run = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    assert run.stdout.split("\n")[:2] == ["2", "[]"], run.stdout
    assert f"{out} already exists; pass --force" in run.stderr and out.read_bytes() == b"kept"


def test_python_dash_m_help_imports_no_torch():
    code = "import runpy, sys; sys.argv = ['entropy-lens', '--help']\n"
    code += "try:\n    runpy.run_module('entropy_lens', run_name='__main__')\nexcept SystemExit:\n    pass\n"
    code += "print('torch' in sys.modules, file=sys.stderr)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "usage: entropy-lens" in run.stdout and run.stderr.strip() == "False"


def test_every_command_takes_threads():
    parser = build_parser()
    for command in COMMANDS:
        args = parser.parse_args([*_minimal(command), "--threads", "3"])
        assert args.threads == 3, command


def _minimal(command: str) -> list[str]:
    return {
        "scan": ["scan", "tiny-nope", "--len", "8"],
        "sweep": ["sweep", "tiny-nope", "--len", "8", "--scales", "1", "--out", "x"],
        "ppl": ["ppl", "tiny-nope", "--lens", "32"],
        "passkey": ["passkey", "tiny-nope", "--lens", "256", "--out", "x.json"],
        "generate": ["generate", "tiny-nope", "--data", "austen:emma", "--out", "x.npz"],
        "eval": ["eval", "tiny-nope", "--tasks", "arc_easy", "--out", "x.json"],
        "eval-table": ["eval-table", "1", "x.json"],
        "fit": ["fit", "x"],
        "train-tiny": ["train-tiny", "--kind", "nope"],
        "search-heads": ["search-heads", "tiny-nope", "--len", "8", "--out", "x.safetensors"],
        "figures": ["figures"],
        "view": ["view", "x.npz"],
    }[command]


def test_threads_below_one_is_one_line(capsys):
    assert main(["fit", "no-such-sweep", "--threads", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("entropy-lens: error: --threads must be at least 1") and len(err.splitlines()) == 1


@pytest.mark.slow
def test_threads_are_applied_recorded_and_printed(tiny_dir, tmp_path):
    """In its own process (set_threads changes the process): the meta and the header say what ran."""
    out = tmp_path / "t.npz"
    argv = ["scan", str(tiny_dir), "--len", "16", "--samples", "1", "--threads", "1", "--out", str(out)]
    run = subprocess.run(
        [sys.executable, "-m", "entropy_lens", *argv], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert ScanResult.load(out).meta["threads"] == 1
    assert "threads 1," in run.stdout  # the run's header line
    assert "threads" not in ScanResult.load(out).meta["scan_config"]  # --resume compares scan_config


def test_every_command_keeps_its_options_and_defaults():
    """Each command's flags, defaults, choices and arity equal the committed list: changing one is a
    deliberate edit of tests/cli_options.json (python tools/cli_options.py rewrites it)."""
    import json
    from pathlib import Path

    from entropy_lens.cli import option_table

    committed = json.loads((Path(__file__).parents[1] / "cli_options.json").read_text(encoding="utf-8"))
    current = json.loads(json.dumps(option_table()))  # tuples -> lists, as the file holds them
    assert current.keys() == committed.keys()
    for command in committed:
        assert current[command] == committed[command], (
            f"`entropy-lens {command}` options changed; if on purpose, run python tools/cli_options.py"
        )
    assert sum(len(rows) for rows in committed.values()) > 60


def test_record_is_the_entropy_reduction_flag_and_the_old_entropy_flag_still_works(capsys):
    """--record heads|mean|none (what a scan records of every statistic) was --entropy: both give the
    config's `entropy` field (the meta's and the cache key's name is unchanged), the help names the old
    flag, and a command rebuilt from a config uses the new one."""
    from entropy_lens.cli.options import config_from_args
    from entropy_lens.runs import ScanConfig
    from entropy_lens.settings import command_words

    parser = build_parser()
    for command in ("scan", "sweep"):
        extra = ["--scales", "1", "--out", "o"] if command == "sweep" else []
        new, old = (
            parser.parse_args([command, "m", "--len", "8", *extra, flag, "none"])
            for flag in ("--record", "--entropy")
        )
        assert new.entropy == old.entropy == "none"
        assert config_from_args(ScanConfig, new, entropy=new.entropy) == config_from_args(
            ScanConfig, old, entropy=old.entropy
        )
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--record {heads,mean,none}, --entropy {heads,mean,none}" in text
        assert "[--entropy: the old name, still accepted]" in text
    words = command_words(ScanConfig(model="m", length=8, entropy="mean"))
    assert words == ["m", "--len", "8", "--record", "mean"]
    assert ScanConfig(model="m", length=8, entropy="none").cache_key()["entropy"] == "none"


def test_messages_and_docs_name_record_not_the_old_entropy_flag():
    """Errors and docs say --record heads|mean|none; --entropy appears only where the alias is declared and
    where the docs note the old name (issue 49)."""
    root = Path(__file__).parent.parent
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in [*(root / "entropy_lens").rglob("*.py"), *(root / "docs").rglob("*.md")]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "--entropy" in line
        and 'aliases=("--entropy",)' not in line
        and "old name" not in line
        and "was `--entropy`" not in line
    ]
    assert not found, found


def test_flags_are_generated_from_the_settings_with_their_defaults():
    """Every generated flag's default is its dataclass field's default, and parsing the flags gives the
    config the same values: the one way from flags to a config (cli/options.py)."""
    import dataclasses

    from entropy_lens.cli.options import config_from_args, settings_from_args
    from entropy_lens.runs import HeadSearchConfig, PerplexityConfig, ScanConfig
    from entropy_lens.training import TinyRecipe

    parser = build_parser()
    cases = {
        ScanConfig: ["scan", "tiny-nope", "--len", "64"],
        PerplexityConfig: ["ppl", "tiny-nope", "--lens", "32", "64"],
        HeadSearchConfig: ["search-heads", "tiny-nope", "--len", "64", "--out", "x.safetensors"],
        TinyRecipe: ["train-tiny", "--kind", "rope"],
    }
    for cls, argv in cases.items():
        args = parser.parse_args(argv)
        given = settings_from_args(cls, args)
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for name, value in given.items():
            if defaults[name] is not dataclasses.MISSING and name != "kind":
                assert value == defaults[name], (cls.__name__, name)
        config = config_from_args(cls, args, **({"init": 1.0} if cls is HeadSearchConfig else {}))
        assert isinstance(config, cls)
    args = parser.parse_args(
        [
            "ppl",
            "m",
            "--lens",
            "32",
            "64",
            "--seed",
            "3",
            "--nope",
            "--scale-schedule",
            "log:0.2",
            "--stride",
            "4",
        ]
    )
    config = config_from_args(PerplexityConfig, args)
    assert (config.seed, config.nope, config.scale_schedule, config.stride) == (3, True, "log:0.2", 4)
    assert config.lengths == (32, 64) and config.scan_config(32).scale_schedule == "log:0.2"
    sweep = parser.parse_args(["sweep", "m", "--len", "8", "--scales", "1,2", "--out", "o"])
    assert config_from_args(ScanConfig, sweep, entropy=sweep.entropy).entropy == "mean"  # sweep's own default
    with pytest.raises(TypeError, match="no flags for TinyRecipe"):
        config_from_args(TinyRecipe, sweep)


def test_figure_flags_override_the_settings_file_only_when_given():
    from entropy_lens.cli.options import settings_from_args
    from entropy_lens.figures import FiguresConfig

    args = build_parser().parse_args(["figures", "--len", "2048", "--nope-ckpt", "a"])
    overrides = settings_from_args(FiguresConfig, args)
    assert overrides["length"] == 2048 and overrides["nope"] == "a"
    assert all(v is None for k, v in overrides.items() if k not in ("length", "nope"))
    config = FiguresConfig.build({"samples": 7, "rope": "b"}, **overrides)
    assert (config.samples, config.rope, config.nope, config.length) == (7, "b", "a", 2048)


def test_command_words_rebuild_the_config_through_the_parser():
    """`settings.command_words` writes the flags that `add_settings` reads back into the same config
    (the sweep's resume command is made this way), a three-state flag's False as --no-<flag>."""
    import shlex

    from entropy_lens.cli.options import config_from_args
    from entropy_lens.runs.configs import ScanConfig
    from entropy_lens.runs.sweep import sweep_command
    from entropy_lens.settings import command_words

    config = ScanConfig(
        model="my models/nope 1b",  # a space: quoted
        length=64,
        samples=3,
        data="austen:emma",
        seed=2,
        stride=32,
        nope=True,
        rope_scaling="linear:2",
        train_len=16,
        trust_remote_code=True,
        scale=1.5,
        entropy="none",
        fused="off",
    )
    words = shlex.split(" ".join(["scan", *command_words(config)]))
    assert config_from_args(ScanConfig, build_parser().parse_args(words)) == config
    assert command_words(ScanConfig(model="m", length=8)) == ["m", "--len", "8"]  # defaults left out

    swept = dataclasses.replace(config, scale=None)
    words = shlex.split(sweep_command(swept))[1:] + ["--scales", "1", "--out", "x"]
    args = build_parser().parse_args(words)
    assert config_from_args(ScanConfig, args, entropy=args.entropy) == swept
    assert "--entropy" not in sweep_command(dataclasses.replace(swept, entropy="mean"))  # sweep's default
    kept = dataclasses.replace(swept, nope=False)  # rotary kept on purpose: --no-nope
    assert "--no-nope" in sweep_command(kept)
    args = build_parser().parse_args(shlex.split(sweep_command(kept))[1:] + ["--scales", "1", "--out", "x"])
    assert config_from_args(ScanConfig, args, entropy=args.entropy) == kept


def test_a_misspelt_stats_name_is_one_line_with_the_closest_name(capsys, tmp_path):
    out = str(tmp_path / "s.npz")
    assert main(["scan", "tiny-rope", "--len", "16", "--stats", "max_probability", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(did you mean max_prob?)" in err, err
    assert main(["scan", "tiny-rope", "--len", "16", "--stats", "all,max_prob", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert "`all` cannot be combined with other statistics" in err and "unknown" not in err, err
