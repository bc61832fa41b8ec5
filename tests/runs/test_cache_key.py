"""The cache key (settings.Recorded.cache_key): a setting that changes the numbers changes the key, one that
changes only how they are computed does not, every field is one or the other, and the committed runs of
the figures (figures/runs) are named by the keys of the configs they record."""

import dataclasses
import json
from pathlib import Path

import pytest

from entropy_lens.errors import EntropyLensError
from entropy_lens.figures.cache import RunCache
from entropy_lens.results import ScanResult
from entropy_lens.runs.configs import HeadSearchConfig, PasskeyConfig, ScanConfig

RUNS = Path(__file__).parents[2] / "figures" / "runs"
CONFIGS = (ScanConfig, HeadSearchConfig, PasskeyConfig)

SCAN = ScanConfig(model="tiny-nope", length=64)
SEARCH = HeadSearchConfig(model="tiny-nope", length=64)
PASSKEY = PasskeyConfig(model="tiny-nope", lengths=(32, 64))

# a value other than the default for each field in a key: each changes the numbers
CHANGES_NUMBERS = [
    *(
        (SCAN, name, value)
        for name, value in {
            "model": "tiny-rope",
            "dtype": "bfloat16",
            "device": "cpu",
            "nope": True,
            "rope_scaling": "dynamic:2",
            "train_len": 32,
            "trust_remote_code": True,
            "revision": "v1",
            "data": "stdlib",
            "seed": 1,
            "samples": 3,
            "stride": 16,
            "scale": 1.2,
            "head_scales": "h.npy",
            "scale_schedule": "log:0.5",
            "length": 128,
            "entropy": "mean",
            "stats": "max_prob",
            "first_keys": 4,
            "recent_keys": 16,
        }.items()
    ),
    *(
        (SEARCH, name, value)
        for name, value in {"steps": 3, "lr": 0.5, "batch": 4, "init": 1.5, "lower_bound": 0.5}.items()
    ),
    *(
        (SEARCH, name, value)
        for name, value in {"scale_schedule": "log:0.5", "nope": True, "seed": 2}.items()
    ),
    *(
        (PASSKEY, name, value)
        for name, value in {"lengths": (32, 128), "depths": 3, "keys": 2, "seed": 1}.items()
    ),
    (PASSKEY, "head_scales", "h.npy"),
]

# only how the numbers are computed (kernel, batching, sharding, memory): the same cached run
CHANGES_HOW = [
    (SCAN, "batch_size", 4),
    (SCAN, "backend", "torch"),
    (SCAN, "fused", "off"),
    (SCAN, "context_parallel", 2),
    (SEARCH, "micro_batch", 2),
    (SEARCH, "checkpointing", True),
    (SEARCH, "chunk", 64),
]


@pytest.mark.parametrize("cls", CONFIGS)
def test_every_field_is_in_the_key_or_said_not_to_change_numbers(cls):
    names = [f.name for f in dataclasses.fields(cls)]
    assert sorted(cls.KEY + cls.NOT_KEY) == sorted(names), "a field is in neither KEY nor NOT_KEY, or in both"
    assert set(cls.KEY) == set(cls.KEY + cls.NOT_KEY) - set(cls.NOT_KEY)
    # the run's own flags are no setting of its numbers: not fields, so in no key
    assert not {"out", "progress", "quiet", "threads", "dist_timeout", "resume", "force"} & set(names)


@pytest.mark.parametrize(("config", "name", "value"), CHANGES_NUMBERS, ids=lambda x: getattr(x, "name", x))
def test_a_setting_that_changes_numbers_changes_the_key(config, name, value):
    other = dataclasses.replace(config, **{name: value})
    assert other.cache_key() != config.cache_key()
    assert other.cache_key()["v"] == config.cache_key()["v"] == type(config).KEY_VERSION


@pytest.mark.parametrize(("config", "name", "value"), CHANGES_HOW, ids=lambda x: getattr(x, "name", x))
def test_a_setting_of_how_numbers_are_computed_keeps_the_key(config, name, value):
    other = dataclasses.replace(config, **{name: value})
    assert other.cache_key() == config.cache_key()
    assert other.to_dict() != config.to_dict()  # recorded in the results all the same


def test_the_key_version_names_the_cached_run(tmp_path):
    cache = RunCache(None, tmp_path, False)
    bumped = type("Bumped", (ScanConfig,), {"KEY_VERSION": ScanConfig.KEY_VERSION + 1})
    again = bumped(**SCAN.to_dict())
    assert cache._path("scan", again, ".npz") != cache._path("scan", SCAN, ".npz")
    assert cache._path("scan", SCAN, ".npz", bin_width=8) != cache._path("scan", SCAN, ".npz")


def test_the_committed_runs_are_named_by_the_keys_of_the_configs_they_record():
    """Each committed scan, passkey table and head-scale search is where the figures look for it: its
    file name hashes the cache key of the config it records (a key change without renaming them fails)."""
    cache = RunCache(None, RUNS, False)
    scans = sorted(RUNS.glob("scan-*.npz"))
    assert scans
    for path in scans:
        recorded = ScanResult.load(path).meta["scan_config"]
        assert path in _names(cache, "scan", ScanConfig, recorded, ".npz")
    for path in sorted(RUNS.glob("passkey-*.json")):
        recorded = json.loads(path.read_text())["config"]
        recorded = {**recorded, "lengths": tuple(recorded["lengths"])}
        assert path in _names(
            cache, "passkey", PasskeyConfig, recorded, ".json", length=max(recorded["lengths"])
        )
    for path in sorted(RUNS.glob("heads-*.safetensors")):
        config = HeadSearchConfig(**json.loads(Path(f"{path}.json").read_text())["config"])
        assert cache._path("heads", config, ".safetensors") == path


def _names(cache, kind, cls, recorded, suffix, **extra):
    """The cache names a recorded config may have. A recorded head-scale path is where the file lay when
    the run ran (another checkout, the name before the rename); the key hashes the file's contents, so
    each committed search of that model and length is a candidate."""
    if not recorded.get("head_scales"):
        return {cache._path(kind, cls(**recorded), suffix, **extra)}
    stem = "-".join(Path(recorded["head_scales"]).name.split("-")[:-1])
    heads = sorted(RUNS.glob(f"{stem}-*.safetensors"))
    assert heads, f"no committed head-scale search {stem}-*"
    return {cache._path(kind, cls(**{**recorded, "head_scales": str(h)}), suffix, **extra) for h in heads}


def test_a_file_written_before_every_field_was_recorded_resumes_as_the_same_scan(tmp_path):
    """The committed scans were written when fields added after a release were left out at their default
    (the old ADDED): --resume still finds such a file the same scan (a missing field reads as its default),
    and a setting that differs is still named."""
    import shutil

    from entropy_lens.runs.output import Output
    from entropy_lens.runs.provenance import settings_files

    path = next(
        p for p in sorted(RUNS.glob("scan-*.npz")) if "stride" not in ScanResult.load(p).meta["scan_config"]
    )
    recorded = ScanResult.load(path).meta["scan_config"]
    out = tmp_path / path.name
    shutil.copy(path, out)
    # the settings as a rerun passes them: a --head-scales file named from the file's folder, read from there
    config = ScanConfig(**settings_files(recorded, out))
    assert set(config.to_dict()) > set(recorded)  # what is recorded now holds more fields
    assert Output.of(out, resume=True).finished(config.to_dict()) is not None
    other = dataclasses.replace(config, seed=config.seed + 1).to_dict()
    with pytest.raises(EntropyLensError, match="different scan .--seed"):
        Output.of(out, resume=True).finished(other)
