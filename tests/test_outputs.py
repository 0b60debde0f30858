"""What a run leaves on disk: files readable by others (0644 under umask 022, not mkstemp's 0600), the link timeline
in its own file (result.json stays small), and compressor floors on exactly the bytes final_val_bpb scores."""
from __future__ import annotations

import json
import os
import stat

import pytest
import torch

from islands_kit.config import ExperimentConfig
from islands_kit.config.presets import get_preset
from islands_kit.data import eval_windows, load_data_corpus, split_bytes
from islands_kit.io import atomic_write_bytes, replace_marked_block
from islands_kit.notebooks import load_run
from islands_kit.run import LINK_TIMELINE, run_experiment
from islands_kit.train.metrics import compressor_bpb


def test_atomic_writes_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "a", b"x")
        os.umask(0o077)
        atomic_write_bytes(tmp_path / "b", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o600


def test_marked_block_replaced_in_place_and_added_when_missing(tmp_path):
    doc = tmp_path / "RESULTS.md"
    doc.write_text("# Results\n\nintro\n\n## Later\n\nkept\n")
    replace_marked_block(doc, "t", "first table", at_top=True)  # no markers yet: before the first section
    assert doc.read_text() == "# Results\n\nintro\n\n<!-- t:begin -->\nfirst table\n<!-- t:end -->\n\n## Later\n\nkept\n"
    replace_marked_block(doc, "t", "second\ntable\n")  # markers present: only the block changes
    assert doc.read_text() == "# Results\n\nintro\n\n<!-- t:begin -->\nsecond\ntable\n<!-- t:end -->\n\n## Later\n\nkept\n"
    replace_marked_block(doc, "u", "other")  # another name, no at_top: appended at the end
    assert doc.read_text().endswith("kept\n\n<!-- u:begin -->\nother\n<!-- u:end -->\n")
    assert "second\ntable" in doc.read_text()


def test_marked_block_refuses_a_lone_marker(tmp_path):
    doc = tmp_path / "RESULTS.md"
    before = "# Results\n<!-- t:begin -->\nold\n"
    doc.write_text(before)
    with pytest.raises(ValueError, match="t:begin"):
        replace_marked_block(doc, "t", "new")
    assert doc.read_text() == before  # nothing written


@pytest.mark.slow
def test_run_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    old = os.umask(0o022)
    try:
        cfg = get_preset("two_site", "smoke")
        res = run_experiment(cfg, tmp_path)
    finally:
        os.umask(old)
    for name in ("result.json", "history.jsonl", LINK_TIMELINE, "model.pt", "model.island0.pt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    on_disk = json.loads((tmp_path / "result.json").read_text())
    assert "link_timeline" not in on_disk and "link_timeline" not in res
    rows = [json.loads(line) for line in (tmp_path / LINK_TIMELINE).read_text().splitlines()]
    assert rows and all(len(r) == 6 and r[0] <= r[1] for r in rows)
    assert sum(r[2] for r in rows) == on_disk["cross_site_bytes"]  # every byte on the link is one row's
    for channel in on_disk["ledger"]["channels"]:  # and per channel
        assert sum(r[2] for r in rows if r[5] == channel) == on_disk["ledger"]["channels"][channel]["bytes"]
    assert load_run(tmp_path)["timeline"] == rows
    # the floors: on exactly the scored bytes (what final_val_bpb is measured on), and on the whole split
    cfg2 = ExperimentConfig.from_dict(on_disk["config"])
    _, val = split_bytes(load_data_corpus(cfg2.data).data, cfg2.data.val_fraction)
    _, y = eval_windows(val, cfg2.model.seq_len, cfg2.data.final_eval_bytes)
    assert on_disk["val_bytes"] == y.numel() < val.numel()
    assert on_disk["compressor_bpb"] == compressor_bpb(y.to(torch.uint8).flatten().numpy().tobytes())
    assert on_disk["compressor_bpb_all_val"] == compressor_bpb(val.numpy().tobytes())
    assert on_disk["compressor_bpb"] != on_disk["compressor_bpb_all_val"]
