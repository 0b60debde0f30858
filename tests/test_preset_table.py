"""Every preset of every experiment is what it was before the experiment table (``experiment_table.py``) took over
the lists the presets were written from: ``tests/fixtures/preset_dicts.json`` holds the dicts as they were."""
from __future__ import annotations

import json
from pathlib import Path

from islands_kit.config.presets import PRESETS, TWO_SITE_M1_CONTROL, preset_dict, two_site_m1_control

FIXTURE = Path(__file__).parent / "fixtures" / "preset_dicts.json"


def test_preset_dicts_unchanged() -> None:
    want = json.loads(FIXTURE.read_text())
    got = {f"{e}/{p}": preset_dict(e, p) for e in ("baseline", "two_site", "eight_cell") for p in PRESETS}
    got["two_site_m1_control/demo"] = TWO_SITE_M1_CONTROL
    got["two_site_m1_control/gpu"] = two_site_m1_control("gpu")
    assert json.loads(json.dumps(got)) == want
