"""What a run leaves on disk: files readable by others (0644 under umask 022, not mkstemp's 0600), the link timeline
in its own file (result.json stays small), and compressor floors on exactly the bytes final_val_bpb scores."""
from __future__ import annotations

import json
import os
import stat

import torch

from islands_kit.config import ExperimentConfig
from islands_kit.data import eval_windows, load_data_corpus, split_bytes
from islands_kit.io import atomic_write_bytes
from islands_kit.metrics import compressor_bpb
from islands_kit.notebooks import load_run
from islands_kit.presets import get_preset
from islands_kit.run import LINK_TIMELINE, run_experiment


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
