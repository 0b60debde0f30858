"""wandb runs written offline, decoded from their run file: what a user finds in them (history, metrics, table,
figures, artifact, summary), the same run id after --resume, and wandb modes that never leak between runs."""
from __future__ import annotations

import glob
import json
import math
import os
from pathlib import Path

import pytest

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.records.tracking import (
    WANDB_RUN_FILE,
    offline_run_dirs,
    offline_run_records,
    resolve_wandb_mode,
    run_name,
    run_tags,
    sync_command,
    wandb_off_note,
)
from islands_kit.run import run_experiment

pytest.importorskip("wandb")


@pytest.fixture
def no_wandb_env(monkeypatch):
    """The config decides: no WANDB_MODE in the environment (conftest sets it to disabled for everything else)."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("ISLANDS_KIT_QUIET", raising=False)  # the end-of-run line is checked


def smoke(experiment: str = "two_site", **over) -> object:
    return apply_overrides(get_preset(experiment, "smoke"), {"threads": 1, **over})


def offline_dirs(out: Path) -> list[Path]:
    return sorted((out / "wandb").glob("offline-run-*"))


def by_type(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        kind = next(k for k in r if k not in ("num", "control", "Info", "uuid"))
        out.setdefault(kind, []).append(r[kind])
    return out


def items(rec: dict, field: str = "item") -> dict[str, object]:
    """A history/summary record as {"a/b": value}."""
    return {"/".join(i.get("nestedKey") or [i["key"]]): json.loads(i["valueJson"]) for i in rec.get(field, [])}


def test_resolve_wandb_mode(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert [resolve_wandb_mode(m) for m in ("offline", "online", "disabled")] == ["offline", "online", "disabled"]
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the caller's environment can switch wandb off ...
    assert resolve_wandb_mode("offline") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")  # ... or choose the mode, but never switch on a disabled run
    assert resolve_wandb_mode("online") == "offline" and resolve_wandb_mode("disabled") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "nonsense")
    assert resolve_wandb_mode("online") == "online"


@pytest.mark.slow
def test_offline_run_holds_history_metrics_table_figures_and_artifact(tmp_path, no_wandb_env, capsys):
    cfg = smoke(wandb_mode="offline", wandb_group="g-test", log_every=4, progress=True)
    res = run_experiment(cfg, tmp_path)
    (run_dir,) = offline_dirs(tmp_path)
    info = json.loads((tmp_path / WANDB_RUN_FILE).read_text())
    assert info["id"] in run_dir.name and info["mode"] == "offline" and info["group"] == "g-test"
    # the end of the run says how to upload it
    assert f"wandb sync {tmp_path / 'wandb'}/offline-run-*-{info['id']}" in capsys.readouterr().out
    recs = by_type(offline_run_records(run_dir))

    (run,) = recs["run"]
    assert run["runId"] == info["id"] and run["jobType"] == "experiment" and run["runGroup"] == "g-test"
    assert {"two_site", "preset:smoke", "corpus:shakespeare", "strategy:diloco", "sync_mode:lockstep",
            "tokens:30720"} <= set(run["tags"])
    assert run["displayName"] == f"two_site-smoke-s0-lockstep-30.7ktok-{tmp_path.name}"
    metrics = {m.get("name") or m.get("globName"): m for m in recs["metric"]}
    assert metrics["eval/bpb"]["stepMetric"] == "tokens" and metrics["eval_sim/*"]["stepMetric"] == "sim_time_s"
    assert metrics["link/*"]["stepMetric"] == "sim_time_s" and metrics["train/*"]["stepMetric"] == "tokens"

    hist = [items(h) for h in recs["history"]]
    train = [h for h in hist if "train/loss_nats" in h]
    assert [h["step"] for h in train] == [4, 8, 12, 16, 20, 24]  # every log_every steps
    # units in the names: nats per byte for the loss, bits per byte beside it (the same number over ln 2)
    assert all(h["train/bpb"] == pytest.approx(h["train/loss_nats"] / math.log(2)) for h in train)
    assert all({"train/loss_nats_island0", "train/loss_nats_island1"} <= set(h) for h in train)
    assert not any("train/loss" in h for h in hist)
    assert all(h["tokens"] == h["step"] * 40 * 32 for h in train)
    assert all(h["train/tokens_per_s"] > 0 for h in train[1:])
    assert all(f"routing/balance_loss/layer{layer}" in h for h in train for layer in range(2))
    assert [h["link/cross_site_bytes"] for h in train] == sorted(h["link/cross_site_bytes"] for h in train)
    jsonl = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines()]
    evals = [h for h in hist if "eval/bpb" in h]
    curve = [r.get("val_bpb_subset", r["val_bpb"]) for r in jsonl]  # the subset to its end, the final's included
    assert [(h["tokens"], h["eval/bpb"], h["eval_sim/bpb"]) for h in evals] == \
        [(r["tokens"], c, c) for r, c in zip(jsonl, curve)]
    (final_full,) = [h["eval/final_bpb_all_held_out"] for h in hist if "eval/final_bpb_all_held_out" in h]
    assert final_full == res["final_val_bpb"] == jsonl[-1]["val_bpb"]
    assert [h["sim_time_s"] for h in evals] == [r["sim_time_s"] for r in jsonl]

    final = next(h for h in hist if any(k.startswith("eval_history") for k in h))
    assert final["eval_history/_type"] == "table-file" and final["eval_history/nrows"] == len(jsonl)
    figures = {k.split("/")[1] for k in final if k.startswith("figures/")}
    assert figures == {"bpb_vs_tokens", "bpb_vs_sim_time", "link_bytes", "routing_load"}

    arts = {a["type"]: a for a in recs["artifact"]}
    names = {e["path"] for e in arts["run-result"]["manifest"]["contents"]}
    assert {"result.json", "history.jsonl", "figures/bpb_vs_tokens.png", "figures/routing_load.png"} <= names
    summary = {}
    for s in recs["summary"]:
        summary.update(items(s, "update"))
    assert summary["final_val_bpb"] == res["final_val_bpb"]
    assert summary["compressor_bpb"]["xz"] == res["compressor_bpb"]["xz"]
    assert summary["versions"]["islands_kit"] == res["versions"]["islands_kit"]
    assert recs["exit"][0].get("exitCode", 0) == 0


@pytest.mark.slow
def test_two_runs_in_one_process_keep_their_own_wandb_mode(tmp_path, no_wandb_env):
    for name, mode in (("a", "offline"), ("b", "disabled"), ("c", "offline")):
        run_experiment(smoke("baseline", steps=4, wandb_mode=mode), tmp_path / name)
        assert "WANDB_MODE" not in os.environ  # nothing written back for the next run to inherit
    assert len(offline_dirs(tmp_path / "a")) == 1 and len(offline_dirs(tmp_path / "c")) == 1
    assert not (tmp_path / "b" / "wandb").exists() and not (tmp_path / "b" / WANDB_RUN_FILE).exists()
    ids = [json.loads((tmp_path / n / WANDB_RUN_FILE).read_text())["id"] for n in "ac"]
    assert ids[0] != ids[1]


@pytest.fixture(params=["same_second", "clock"])
def wandb_start_clock(request, monkeypatch):
    """wandb names an offline folder by its start second: ``same_second`` pins that clock so a run and its resume
    collide (wandb then appends ``-1`` to the second folder), ``clock`` leaves the real clock."""
    if request.param == "same_second":
        import types

        import wandb.sdk.wandb_init as wandb_init

        monkeypatch.setattr(wandb_init, "time", types.SimpleNamespace(time=lambda: 1_700_000_000.0))
    return request.param


@pytest.mark.slow
def test_resume_continues_the_same_wandb_run(tmp_path, no_wandb_env, wandb_start_clock, capsys):
    cfg = smoke("two_site", steps=8, checkpoint_every=4, wandb_mode="offline", log_every=2, progress=True)
    first = tmp_path / "first"
    run_experiment(cfg, first)
    first_id = json.loads((first / WANDB_RUN_FILE).read_text())["id"]
    capsys.readouterr()
    run_experiment(cfg, first, resume=first)  # the same folder: a second offline folder, same run id
    dirs = offline_run_dirs(first, first_id)
    assert len(dirs) == 2 and dirs == offline_run_dirs(first)
    if wandb_start_clock == "same_second":
        assert dirs[1].name == dirs[0].name + "-1"
    # the upload command printed at the end of the resumed run matches both folders, and no other run's
    cmd = next(line for line in capsys.readouterr().out.splitlines() if "wandb sync" in line)
    pattern = cmd.split("wandb sync ", 1)[1].strip()
    assert sorted(Path(p) for p in glob.glob(pattern)) == dirs
    recs = by_type(offline_run_records(dirs[-1]))
    assert recs["run"][0]["runId"] == first_id
    train = [items(h) for h in recs["history"] if "train/loss_nats" in items(h)]
    assert [h["step"] for h in train] == [6, 8]  # continued after the checkpoint at step 4
    other = tmp_path / "elsewhere"  # resumed into another folder: the id comes from the checkpoint's folder
    run_experiment(cfg, other, resume=first / "checkpoint.pt")
    assert json.loads((other / WANDB_RUN_FILE).read_text())["id"] == first_id


def test_offline_run_dirs_parse_the_id_and_order_resumed_folders(tmp_path):
    names = ["offline-run-20250101_120000-abc12345-1", "offline-run-20250101_115959-abc12345",
             "offline-run-20250101_120000-abc12345", "offline-run-20250101_120000-abc12345-2",
             "offline-run-20250101_120000-zzz99999", "latest-run"]
    for n in names:
        (tmp_path / "wandb" / n).mkdir(parents=True)
    got = [p.name for p in offline_run_dirs(tmp_path, "abc12345")]
    assert got == [names[1], names[2], names[0], names[3]]
    assert len(offline_run_dirs(tmp_path)) == 5 and offline_run_dirs(tmp_path / "none") == []
    assert sync_command(tmp_path, "abc12345").endswith("offline-run-*-abc12345*")


def test_offline_run_records_refuses_other_files(tmp_path):
    (tmp_path / "x.wandb").write_bytes(b"not a run file")
    with pytest.raises(ValueError, match="not a wandb run file"):
        offline_run_records(tmp_path / "x.wandb")
    with pytest.raises(FileNotFoundError, match="no .wandb file"):
        offline_run_records(tmp_path / "empty") if (tmp_path / "empty").mkdir() is None else None


def wandb_log(records, block: int = 32768) -> bytes:
    """An offline run file in wandb's block format (header, then one chunk per record, split across blocks as the
    writer does: full, or first / middle / last), for tests of the reader."""
    import struct
    import zlib

    out = bytearray(b":W&B\xbe\xef\x01")
    for rec in records:
        data, first = rec.SerializeToString(), True
        while True:
            left = block - len(out) % block
            if left < 7:
                out += b"\0" * left
                continue
            n = min(len(data), left - 7)
            last = n == len(data)
            kind = (1 if last else 2) if first else (4 if last else 3)
            out += struct.pack("<IHB", zlib.crc32(data[:n]), n, kind) + data[:n]
            data, first = data[n:], False
            if last:
                break
    return bytes(out)


def test_offline_run_records_reads_a_file_still_being_written(tmp_path):
    from wandb.proto import wandb_internal_pb2

    from islands_kit.records.tracking import wait_for_offline_run

    run = wandb_internal_pb2.Record()
    run.run.run_id = "abc"
    big = wandb_internal_pb2.Record()  # spans two blocks: a first and a last chunk
    big.history.item.add(key="x", value_json="1" * 40000)
    done = wandb_internal_pb2.Record()
    done.exit.exit_code = 0
    whole = wandb_log([run, big, done])
    f = tmp_path / "run-abc.wandb"
    f.write_bytes(whole)
    assert [next(iter(r)) for r in offline_run_records(f)] == ["run", "history", "exit"]
    partial = wandb_log([run, big])
    f.write_bytes(partial[:-100])  # the writer is inside the big record's last chunk
    assert [next(iter(r)) for r in offline_run_records(f)] == ["run"]
    f.write_bytes(whole[:-3])  # inside the exit record
    assert [next(iter(r)) for r in offline_run_records(f)] == ["run", "history"]
    assert wait_for_offline_run(f, timeout_s=0.2) is False  # no exit record yet: waits, then gives up, no error
    f.write_bytes(whole)
    assert wait_for_offline_run(f, timeout_s=5) is True


def test_the_comparison_is_a_wandb_run_with_a_table(tmp_path, no_wandb_env):
    from islands_kit.compare import compare_table
    from islands_kit.notebooks import comparison_report, comparison_to_wandb

    base = {"experiment": "baseline", "seed": 0, "preset": "smoke", "tokens": 100, "final_val_bpb": 4.0,
            "cross_site_bytes": 1000, "ddp_equivalent_bytes": 1000, "sim_wall_clock_s": 1.0, "compute_utilization": 0.5}
    runs = [base, dict(base, experiment="two_site", cross_site_bytes=10, final_val_bpb=4.4)]
    rows, _ = comparison_report(runs, tmp_path)
    shared = {"wandb_project": "p", "wandb_group": "compare-x", "wandb_mode": "offline"}
    text = comparison_to_wandb(rows, shared, tmp_path)
    (run_dir,) = offline_dirs(tmp_path)
    assert f"wandb sync {tmp_path / 'wandb'}/offline-run-*" in text and "group 'compare-x'" in text
    recs = by_type(offline_run_records(run_dir))
    assert recs["run"][0]["jobType"] == "comparison" and recs["run"][0]["runGroup"] == "compare-x"
    assert recs["run"][0]["displayName"] == "compare-x"  # the group's name, not compare-compare-x
    (logged,) = [items(h) for h in recs["history"]]
    assert logged["comparison/_type"] == "table-file" and logged["comparison/nrows"] == 2
    table_file = run_dir / "files" / logged["comparison/path"]
    table = json.loads(table_file.read_text())
    assert table["columns"] == list(compare_table(runs)[0])
    assert [r[table["columns"].index("x_fewer_bytes")] for r in table["data"]] == [1.0, 100.0]
    arts = {a["type"]: a for a in recs["artifact"]}
    names = {e["path"] for e in arts["comparison"]["manifest"]["contents"]}
    assert {"compare.json", "compare.md", "compare.csv", "compare.txt"} <= names
    summary = {k: v for rec in recs["summary"] for k, v in items(rec, "update").items()}
    # one seed each: the ratio and n = 1 in the run's summary, never a zero-width interval
    assert summary["bpb_vs_ref/two_site s0/mean"] == pytest.approx(1.1) and summary["bpb_vs_ref/two_site s0/n"] == 1
    assert summary["bpb_vs_ref/two_site s0/text"] == "1.1000 (n = 1, no interval)"
    assert summary["bpb_vs_ref/two_site s0/ci95_low"] is None
    assert summary["bpb_vs_ref/two_site s0/verdict"] == "not resolved"  # one seed: no interval, no verdict


def test_the_comparison_summary_carries_every_ratio_with_its_interval():
    from islands_kit.compare import compare_table, comparison_summary, seed_summary

    base = {"experiment": "baseline", "preset": "smoke", "tokens": 100, "cross_site_bytes": 1000,
            "ddp_equivalent_bytes": 1000, "sim_wall_clock_s": 1.0, "compute_utilization": 0.5}
    runs = [dict(base, seed=s, final_val_bpb=4.0 + 0.1 * s) for s in range(3)]
    runs += [dict(base, experiment="two_site", seed=s, cross_site_bytes=10, final_val_bpb=(4.0 + 0.1 * s) * (1.02 + 0.01 * s))
             for s in range(3)]
    rows = compare_table(runs)
    seeds = seed_summary(rows, runs)
    summ = comparison_summary(rows, seeds)
    assert summ["bpb_vs_ref/two_site/n"] == 3 and "bpb_vs_ref/baseline/mean" not in summ
    lo, hi = summ["bpb_vs_ref/two_site/ci95_low"], summ["bpb_vs_ref/two_site/ci95_high"]
    assert lo < summ["bpb_vs_ref/two_site/mean"] < hi and 1.0 < lo and summ["bpb_vs_ref/two_site/resolved"] is True
    assert summ["bpb_vs_ref/two_site/mean"] == pytest.approx((1.02 * 1.03 * 1.04) ** (1 / 3))
    assert summ["bpb_vs_ref/two_site/verdict"] == "behind"  # the words come from the interval (stats.verdict)


def test_link_bytes_figure_draws_the_runs_transfer_staircase(tmp_path, no_wandb_env, monkeypatch):
    """The CLI's and wandb's link_bytes.png is drawn from the run's transfers (link_timeline.jsonl), the staircase
    the experiment notebooks draw, not from the evaluation points alone."""
    from islands_kit import plots

    seen: dict[str, object] = {}
    draw = plots.link_bytes

    def spy(runs, **kw):  # type: ignore[no-untyped-def]
        seen.update(kw.get("timelines") or {})
        return draw(runs, **kw)

    monkeypatch.setattr(plots, "link_bytes", spy)
    res = run_experiment(smoke(wandb_mode="offline"), tmp_path)
    timeline = [json.loads(line) for line in (tmp_path / "link_timeline.jsonl").read_text().splitlines()]
    assert (tmp_path / "link_bytes.png").exists()
    assert timeline and seen == {res["experiment"]: timeline}


def test_the_runs_of_the_two_site_notebook_get_distinct_names_saying_what_differs(tmp_path):
    from islands_kit.notebooks import decoupled_pair

    main = smoke("two_site")
    pair = decoupled_pair(main, 2, 2.0)
    names = [run_name(main, tmp_path / "nb" / "two_site")] + [
        run_name(c, tmp_path / "nb" / "two_site" / "decoupled" / label) for label, c in pair.items()]
    assert names == ["two_site-smoke-s0-lockstep-30.7ktok", "two_site-smoke-s0-lockstep-20.5ktok",
                     "two_site-smoke-s0-decoupled-41ktok"]
    tags = [set(run_tags(c)) for c in (main, *pair.values())]
    assert len({frozenset(t) for t in tags}) == 3  # the tags tell them apart too
    assert run_name(smoke("baseline", seed=3), tmp_path / "sweep" / "s3") == "baseline-smoke-s3-30.7ktok"


def test_a_run_without_wandb_says_so(tmp_path, no_wandb_env, capsys, monkeypatch):
    from islands_kit import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "baseline", "--preset", "smoke", "--set", "steps=2", "--set", "threads=1"]) == 0
    assert "wandb: off (the smoke preset sets wandb_mode=disabled; --set wandb_mode=offline logs the run)" in \
        capsys.readouterr().out
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_off_note(smoke("baseline", wandb_mode="offline")) == "wandb: off (WANDB_MODE=disabled in the environment)"
    monkeypatch.delenv("WANDB_MODE")
    assert wandb_off_note(smoke("baseline", wandb_mode="offline")) is None


def test_every_run_ends_with_one_wandb_line_even_when_quiet(tmp_path, no_wandb_env, capsys):
    """The smoke preset turns progress off: the run still says what wandb did, in one line."""
    run_experiment(smoke("baseline", steps=2), tmp_path / "a")
    out = capsys.readouterr().out.splitlines()
    assert out == ["wandb: off (the smoke preset sets wandb_mode=disabled; --set wandb_mode=offline logs the run)"]


@pytest.mark.slow  # an offline wandb run
def test_an_offline_run_says_its_folder_and_upload_command_and_always_has_a_group(tmp_path, no_wandb_env, capsys):
    from islands_kit.notebooks import config_summary

    cfg = smoke("baseline", steps=2, wandb_mode="offline")  # no group given
    assert "group 'baseline-smoke'" in config_summary(cfg)
    run_experiment(cfg, tmp_path)
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("wandb:")]
    info = json.loads((tmp_path / WANDB_RUN_FILE).read_text())
    (run_dir,) = offline_dirs(tmp_path)
    assert line == (f"wandb: offline run {info['id']} (project 'islands_kit', group 'baseline-smoke') in {run_dir}; "
                    f"upload it with: {sync_command(tmp_path, info['id'])}")
    recs = by_type(offline_run_records(run_dir))
    assert recs["run"][0]["runGroup"] == "baseline-smoke" == info["group"]
