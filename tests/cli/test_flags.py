"""The run-wide flags parsed once (entropy_lens/flags.py, issue 49): --backend, --fused, --stats and
--first-keys become typed values where a run starts, and the layers below take only those."""

import json
import sys

import pytest
import torch
from tiny import make_tiny_model

from entropy_lens import flags
from entropy_lens.capture import EntropyRecorder
from entropy_lens.capture.call import Session
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import (
    Backend,
    Fused,
    Measure,
    Stats,
    parse_backend,
    parse_fused,
    parse_params,
    parse_stats,
)
from entropy_lens.kernels import ScoreMods, plan
from entropy_lens.runs.scan import ScanConfig, scan


def test_each_flag_parses_to_its_typed_value_with_its_one_line_error():
    assert parse_backend("native") is Backend.NATIVE and Backend.NATIVE == "native"
    assert parse_fused("off") is Fused.OFF and parse_fused(Fused.ON) is Fused.ON
    stats = parse_stats(("entropy", "max_prob"))
    assert isinstance(stats, Stats) and stats == ("entropy", "max_prob") and parse_stats(stats) is stats
    assert parse_stats("entropy") == ("entropy",) and dict(parse_params({"first_keys": 3}))["first_keys"] == 3
    # str-valued: results meta, cache keys and commands written from them read as before
    assert json.dumps({"backend": Backend.TORCH_CHUNKED, "fused": Fused.AUTO}) == json.dumps(
        {"backend": "torch_chunked", "fused": "auto"}
    )
    assert f"{Backend.NATIVE}" == "native"
    with pytest.raises(EntropyLensError, match="unknown entropy backend 'flash'; choose one of auto"):
        parse_backend("flash")
    with pytest.raises(EntropyLensError, match="fused='yes' is not known; use one of auto, on, off"):
        parse_fused("yes")
    with pytest.raises(ValueError, match=r"unknown row statistic \['fading'\]"):
        parse_stats(("entropy", "fading"))
    with pytest.raises(EntropyLensError, match="first_keys"):
        parse_params({"first_keys": 0})
    assert Measure.parse(recent_keys=64)["recent_keys"] == 64
    with pytest.raises(
        EntropyLensError, match=r"recent_keys must be a whole number \(got 2.5\); pass recent_keys=64"
    ):
        Measure.parse(recent_keys=2.5)
    with pytest.raises(TypeError, match="unknown argument 'recent_key' .did you mean recent_keys"):
        Measure.parse(recent_key=3)


def test_the_layers_below_the_entrance_refuse_a_raw_string():
    """A Session and a layer's plan take parsed values only: a string cannot slip past the parse."""
    for kw in ({"backend": "native"}, {"fused": "off"}, {"stats": ("entropy",)}):
        with pytest.raises(TypeError, match="is not parsed; pass entropy_lens.flags.Measure.parse"):
            Session(measure=kw)
    q = k = v = torch.randn(1, 2, 4, 8)
    mods = ScoreMods.build(q, k)
    with pytest.raises(TypeError, match="backend='auto' is not parsed"):
        plan("auto", Fused.AUTO, q, k, v, mods)
    with pytest.raises(TypeError, match="fused='off' is not parsed"):
        plan(Backend.AUTO, "off", q, k, v, mods)
    assert plan(Backend.AUTO, Fused.OFF, q, k, v, mods).fixed.kernel is Backend.TORCH_CHUNKED
    # the public entrance still takes the names
    model = make_tiny_model()
    session = EntropyRecorder(model, backend="torch_chunked", fused="on", stats="entropy").session
    measure = session.measure
    assert (measure.backend, measure.fused, measure.stats) == (Backend.TORCH_CHUNKED, Fused.ON, ("entropy",))


def test_a_scan_parses_each_flag_once(tiny_dir, monkeypatch):
    """Over a whole scan (two batches, every layer) each flag's string is parsed once, by the config;
    the recorder of each batch and every layer get the parsed value (first_keys is an int throughout)."""
    parsed = {"backend": 0, "fused": 0, "stats": 0}

    def counting(name, parse):
        def wrapped(value, *rest):  # a string read: the user's, not a parsed value passed on
            parsed[name] += isinstance(value, str) and not isinstance(value, (Backend, Fused))
            return parse(value, *rest)

        return wrapped

    for name in parsed:
        original = getattr(flags, f"parse_{name}")
        for module in [m for key, m in sys.modules.items() if key.startswith("entropy_lens")]:
            if getattr(module, f"parse_{name}", None) is original:
                monkeypatch.setattr(module, f"parse_{name}", counting(name, original))
    # --stats is read once by split_slices (which takes the row-slice statistics apart), then parse_stats
    # reads the rest as a tuple
    split = flags.split_slices
    for module in [m for key, m in sys.modules.items() if key.startswith("entropy_lens")]:
        if getattr(module, "split_slices", None) is split:
            monkeypatch.setattr(module, "split_slices", counting("stats", split))
    sessions = []
    monkeypatch.setattr(Session, "__post_init__", lambda self: sessions.append(self))
    config = ScanConfig(
        model=str(tiny_dir),
        length=24,
        samples=2,
        batch_size=1,
        data="austen:northanger",
        stats="max_prob,first_mass,recent_mass",
        first_keys=2,
        recent_keys=5,
        fused="on",
    )
    result = scan(config, progress=False)
    assert parsed == {"backend": 1, "fused": 1, "stats": 1}
    measures = [s.measure for s in sessions]
    assert len(sessions) == 2 and all(
        isinstance(m.backend, Backend) and m["first_keys"] == 2 for m in measures
    )
    assert all(type(m["recent_keys"]) is int and m["recent_keys"] == 5 for m in measures)
    assert set(result.stats) >= {"max_prob", "first_mass", "recent_mass"} and result.meta["first_keys"] == 2
    assert result.meta["recent_keys"] == 5
    assert result.meta["scan_config"]["fused"] == "on" and result.meta["backend"] in (
        "native",
        "torch_chunked",
    )
