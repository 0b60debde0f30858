"""The checked-in frontier files and the script that writes them from run folders: every point says how to re-make
it (its ``--set`` overrides make a valid config of its experiment at its preset)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from islands_kit.config import apply_overrides
from islands_kit.config.presets import TWO_SITE_M1_CONTROL, get_preset

ROOT = Path(__file__).resolve().parent.parent
FRONTIERS = sorted((ROOT / "benchmarks").glob("frontier*.json"))


@pytest.mark.parametrize("path", FRONTIERS, ids=lambda p: p.name)
def test_every_checked_in_frontier_point_says_how_to_remake_it(path):
    points = json.loads(path.read_text())
    assert points
    for p in points:
        assert p["preset"] == "demo" and p["seeds"][0] == 0, p
        for run in (p, p["baseline"]):  # each a valid config of its experiment
            apply_overrides(get_preset(run["experiment"], p["preset"]), run["overrides"])


@pytest.fixture(scope="module")
def from_runs():
    spec = importlib.util.spec_from_file_location("frontier_from_runs", ROOT / "benchmarks" / "frontier_from_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_point_read_back_from_a_run_holds_the_overrides_that_remake_its_config(from_runs, tmp_path):
    """A run's ``--set`` overrides are read back from its result.json (config against preset) and give that config
    again; what is not a setting (seed, wandb, progress) is left out."""
    sets = {"sync.codec": "ctop64_int2", "sync.codec_block_size": "4096", "sync.diloco.error_feedback_decay": "0.95",
            "sync.diloco.final_codec": "", "sync.stochastic_rounding": "false", "threads": "2", **TWO_SITE_M1_CONTROL}
    cfg = apply_overrides(get_preset("two_site", "demo"), {**sets, "seed": 2, "wandb_mode": "disabled",
                                                           "progress": "false"})
    res = {"experiment": "two_site", "preset": "demo", "config": json.loads(json.dumps(cfg.to_dict()))}
    got = from_runs.overrides_of(res)
    assert got == sets
    again = apply_overrides(get_preset("two_site", "demo"), {**got, "seed": 2, "wandb_mode": "disabled",
                                                             "progress": "false"})
    assert again.to_dict() == cfg.to_dict()
    for d, seed, bpb in ((tmp_path / "run", 2, 2.2), (tmp_path / "base", 2, 2.0)):
        d.mkdir()
        r = dict(res, seed=seed, final_val_bpb=bpb, cross_site_bytes=10, ddp_equivalent_bytes=1000)
        if d.name == "base":
            r.update(experiment="baseline", config=get_preset("baseline", "demo").to_dict())
        (d / "result.json").write_text(json.dumps(r))
    p = from_runs.point("x", [tmp_path / "run"], {2: json.loads((tmp_path / "base" / "result.json").read_text())}, True)
    assert (p["fewer"], p["ratio"], p["seeds"], p["bpb"], p["baseline"]["bpb"]) == (100.0, 2.2 / 2.0, [2], [2.2], [2.0])
    assert p["overrides"] == sets and p["baseline"]["overrides"] == {}
