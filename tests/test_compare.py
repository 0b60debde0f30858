"""islands_kit.compare and ``islands-kit compare``: refusals that name the difference, one reference for the bytes
column, ratios paired by seed, mean ± spread over seeds, and the four output formats. Synthetic result.json files
(written the way run.py writes them), plus one real seed sweep through the CLI."""
from __future__ import annotations

import csv
import io
import json
import math
import statistics
import warnings

import pytest

from islands_kit import cli
from islands_kit.compare import (
    ComparisonError,
    compare_table,
    expand_run_dirs,
    ratio_words,
    render,
    report,
    seed_summary,
    select_runs,
)
from islands_kit.records.tracking import load_result, write_json_atomic


def result(experiment: str = "baseline", seed: int = 0, bpb: float = 3.0, sent: int = 1_000_000, steps: int = 100,
           corpus: str = "shakespeare", sha: str = "aa" * 32, **config) -> dict:
    cfg = {"experiment": experiment, "seed": seed, "steps": steps, "islands": [{"batch_size": 24}, {"batch_size": 16}],
           "model": {"seq_len": 128}, "wandb_mode": "offline", **config}
    return {"experiment": experiment, "preset": "demo", "seed": seed, "corpus": corpus, "corpus_sha256": sha,
            "tokens": steps * 40 * 128, "steps": steps, "params_total": 10, "params_active": 5, "final_val_bpb": bpb,
            "val_curve": [[steps * 40 * 128, bpb]], "compressor_bpb": {"gzip": 3.1, "bz2": 2.4, "xz": 2.7},
            "cross_site_bytes": sent, "ddp_equivalent_bytes": 2_000_000, "routing_sync_bytes": 0,
            "peak_link_bytes_per_s": 1.0, "sim_wall_clock_s": 10.0, "compute_utilization": 0.9, "wall_time_s": 1.0,
            "versions": {}, "git_sha": None, "config": cfg}


def write(tmp_path, name: str, res: dict):
    d = tmp_path / name
    d.mkdir(parents=True)
    write_json_atomic(d / "result.json", res)
    return d


def test_runs_on_two_corpora_are_refused_naming_the_difference(tmp_path):
    a = write(tmp_path, "base", result())
    b = write(tmp_path, "ts-enwiki", result("two_site", corpus="enwiki", sha="bb" * 32))
    runs = [load_result(a), load_result(b)]
    with pytest.raises(ComparisonError) as e:
        compare_table(runs)
    msg = str(e.value)
    assert "corpus: the runs differ" in msg and f"shakespeare: {a}" in msg and f"enwiki: {b}" in msg
    assert "token budget" not in msg  # only what differs is named
    # the CLI refuses too, with the same words, before printing any table
    assert cli.main(["compare", str(a), str(b)]) == 2
    # the same name with other bytes is another corpus too
    with pytest.raises(ComparisonError, match=r"corpus: .*shakespeare \[aaaa.*shakespeare \[bbbb"):
        compare_table([result(), result("two_site", sha="bb" * 32)])


def test_token_budgets_are_compared_as_planned(tmp_path):
    with pytest.raises(ComparisonError, match=r"token budget: the runs differ \(512,000 tokens: baseline s0; "
                                              r"1,024,000 tokens: two_site s0\)"):
        compare_table([result(), result("two_site", steps=200)])
    # a run that stopped early (diverged) keeps its budget: comparable, and shown as diverged
    early = dict(result("two_site", bpb=math.nan), tokens=1280, diverged_at_step=1)
    rows = compare_table([result(), early])
    assert rows[1]["token_budget"] == rows[0]["token_budget"] and "diverged at step 1" in render(rows)


def test_allow_mismatch_warns_and_marks_the_rows(capsys, tmp_path):
    runs = [result(), result("two_site", corpus="enwiki", sha="bb" * 32), result("eight_cell", steps=50)]
    with pytest.warns(RuntimeWarning, match="compared anyway"):
        rows = compare_table(runs, allow_mismatch=True)
    assert [r["mismatch"] for r in rows] == ["", "different corpus", "different token budget"]
    text = render(rows, wide=True)
    assert text.splitlines()[0].split()[-1] == "note" and "different corpus" in text.splitlines()[2]
    dirs = [write(tmp_path, n, r) for n, r in zip("abc", runs)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the command line says it in one plain line, not as a Python RuntimeWarning
        assert cli.main(["compare", *map(str, dirs), "--allow-mismatch"]) == 0
    out, err = capsys.readouterr()
    assert "different token budget" in out
    assert err.startswith("warning: compare: the runs differ in corpus and token budget, so they are not comparable: ")
    assert "RuntimeWarning" not in err and len(err.strip().splitlines()) == 1


def test_ratios_paired_by_seed_and_bytes_against_each_runs_own_all_reduce():
    runs = [result("two_site", 0, 3.3, sent=10_000), result("baseline", 0, 3.0, sent=2_000_000),
            result("baseline", 1, 3.2, sent=2_000_000), result("two_site", 1, 3.36, sent=20_000),
            dict(result("eight_cell", 1, 3.6, sent=4_000_000), ddp_equivalent_bytes=14_000_000),
            result("eight_cell", 2, 3.6, sent=0)]
    rows = compare_table(runs)
    # bytes: one reference, the fp32 all-reduce among the row's own islands (eight cells all-reduce more than two
    # sites, so the eight_cell run sends fewer than its own all-reduce though more than the baseline run)
    assert [r["x_fewer_bytes"] for r in rows] == [200.0, 1.0, 1.0, 100.0, 3.5, math.inf]
    text = render(rows, wide=True)
    assert "bytes vs own all-reduce" in text.splitlines()[0]
    words = [ratio_words(r["x_fewer_bytes"]) for r in rows]
    assert words == ["200x fewer", "same", "same", "100x fewer", "3.5x fewer", "none sent"]
    assert ratio_words(0.5) == "2.0x more" and all(w in text for w in words)
    # bpb is divided by the baseline of the same seed
    assert [r["paired_with"] for r in rows] == ["baseline s0", "baseline s0", "baseline s1", "baseline s1",
                                                "baseline s1", "baseline s0"]
    assert rows[0]["bpb_vs_ref"] == pytest.approx(1.1) and rows[3]["bpb_vs_ref"] == pytest.approx(1.05)
    assert rows[4]["bpb_vs_ref"] == pytest.approx(3.6 / 3.2)
    # another reference, by experiment or by run label: bpb ratios change, byte ratios do not
    rows = compare_table(runs, reference="two_site")
    assert rows[1]["x_fewer_bytes"] == 1.0 and rows[1]["bpb_vs_ref"] == pytest.approx(3.0 / 3.3)
    assert compare_table(runs, reference="baseline s1")[0]["reference"] == "baseline s1"
    with pytest.raises(ComparisonError, match="reference: 'nope'"):
        compare_table(runs, reference="nope")


def test_the_legend_explains_every_number_column_the_table_shows_and_no_other():
    text = report([result(), result("two_site", bpb=3.3, sent=10_000)])[2]
    legend = text.split("\n\n")[-1]
    for column in ("bpb:", "bpb / baseline:", "link bytes:", "bytes vs baseline:", "bytes vs own all-reduce:",
                   "sim s: simulated wall-clock", "util: compute utilisation"):
        assert column in legend
    # per island was left out to fit 100 columns, and the legend no longer explains it; --wide shows and explains it
    assert "left out to fit 100 columns: corpus, preset, tokens, per island;" in text
    assert "per island:" not in legend and "tokens / active param" not in legend
    assert "per island:" in report([result(), result("two_site", bpb=3.3, sent=10_000)], wide=True)[2].split("\n\n")[-1]
    assert "reference run baseline s0" in legend
    # one seed per configuration: the ratios carry no interval, and the legend says so instead of printing "± 0"
    assert "one seed's ratio (n = 1, no interval)" in " ".join(legend.split()) and "±" not in text


def test_a_fitted_table_names_runs_by_their_folders_last_parts_not_absolute_paths(tmp_path):
    """A notebook runs in its output folder, so its runs' folders were absolute paths that crowded columns out."""
    from islands_kit.compare.text import short_run_labels

    assert short_run_labels(["/home/u/runs/demo/baseline", "/home/u/runs/demo/two_site", "rel/x"]) == \
        ["baseline", "two_site", "rel/x"]
    assert short_run_labels(["/r/a/s0", "/r/b/s0"]) == ["a/s0", "b/s0"]  # as many parts as tell them apart
    runs = [dict(result(), dir=str(tmp_path / "deep" / "folder" / "baseline")),
            dict(result("two_site", bpb=3.3, sent=10_000), dir=str(tmp_path / "deep" / "folder" / "two_site"))]
    text = report(runs)[2]
    assert str(tmp_path) not in text.split("\n\n")[0]
    assert [line.split()[0] for line in text.splitlines()[2:4]] == ["baseline", "two_site"]
    assert "sim s" in text.splitlines()[1]  # kept: the time the islands buy is never the first column to go


def test_bytes_show_absolutes_first_then_both_ratios_each_named_by_its_reference():
    """eight cells send fewer bytes than their own 8-island all-reduce, yet more than the two-island baseline: the
    table gives the absolute bytes (total, per island, busiest link) and both ratios, headed by their references."""
    base = dict(result(sent=9_500_000), ddp_equivalent_bytes=9_500_000, n_islands=2, ledger={"links": {"0->1": 4_750_000, "1->0": 4_750_000}})
    cells = dict(result("eight_cell", sent=19_000_000), ddp_equivalent_bytes=66_500_000, n_islands=8,
                 ledger={"links": {f"{i}->{i ^ 1}": 792_000 for i in range(8)}})
    old = dict(result("two_site", sent=950_000), ddp_equivalent_bytes=9_500_000)  # a result written before n_islands and the ledger were recorded
    rows = compare_table([base, cells, old])
    assert [r["bytes_per_island"] for r in rows] == [4_750_000, 2_375_000, 475_000]
    assert [r["busiest_link_bytes"] for r in rows] == [4_750_000, 792_000, None]
    assert [ratio_words(r["x_fewer_than_ref"]) for r in rows] == ["same", "2.0x more", "10x fewer"]
    assert [ratio_words(r["x_fewer_bytes"]) for r in rows] == ["same", "3.5x fewer", "10x fewer"]
    lines = render(rows, wide=True).splitlines()
    head = lines[0]
    cols = ["link bytes", "per island", "busiest link", "bytes vs baseline", "bytes vs own all-reduce"]
    at = [head.index(c) for c in cols]
    assert at == sorted(at) and head.index("bpb / baseline") < at[0]  # absolutes first, then the ratios
    cell = lines[2]
    assert [cell[i:].split("  ")[0] for i in at] == ["19.0 MB", "2.4 MB", "792.0 KB", "2.0x more", "3.5x fewer"]
    assert "—" in lines[3]  # no ledger: no busiest link, and no number made up for it
    # against another reference the header names it: no ratio column without its reference
    assert "bytes vs eight_cell" in render(compare_table([base, cells], reference="eight_cell"), wide=True).splitlines()[0]


def test_a_comparison_folder_with_side_runs_inside_a_run_compares_the_runs(tmp_path, capsys):
    """The compare notebook's folder: OUT/<experiment>, and the two_site notebook's lock-step vs decoupled side runs
    inside OUT/two_site (another token budget: comparing them with the rest would be refused)."""
    nb = tmp_path / "nb"
    base = write(nb, "baseline", result())
    ts = write(nb, "two_site", result("two_site", bpb=3.3, sent=10_000))
    side = [write(ts / "decoupled", n, result("two_site", steps=30)) for n in ("decoupled", "lockstep")]
    assert expand_run_dirs([nb]) == [base, ts]
    nested: list = []
    expand_run_dirs([nb], nested)
    assert nested == side
    assert cli.main(["compare", str(nb), "--wide"]) == 0
    out, err = capsys.readouterr()
    assert str(ts) in out and "skipped 2 run(s)" in err and f"{side[0]} (a side run inside another run's folder)" in err
    assert expand_run_dirs([side[0]]) == [side[0]]  # named, a side run is a run like any other


def test_seed_summary_lists_each_seed_once_with_a_paired_interval_only_from_two_seeds():
    from islands_kit.stats import paired_ratio

    bpbs = {"baseline": [3.0, 3.2, 3.1], "two_site": [3.3, 3.36, 3.2]}
    runs = [result(e, s, b) for e, v in bpbs.items() for s, b in enumerate(v)]
    runs.append(result("two_site", 0, 3.5, sync={"H": 100}))  # another configuration of two_site: its own group
    rows = compare_table(runs)
    summ = seed_summary(rows, runs)
    assert [s["experiment"] for s in summ] == ["baseline", "two_site (two_site s0)", "two_site (two_site s0)"]
    base, ts, h100 = summ
    assert base["n_seeds"] == 3 and base["seeds"] == [0, 1, 2] and base["is_reference"]
    assert base["final_val_bpb_mean"] == pytest.approx(statistics.fmean(bpbs["baseline"]))
    assert base["final_val_bpb_sd"] == pytest.approx(statistics.stdev(bpbs["baseline"]))
    assert base["bpb_vs_ref_text"] == "1 (reference)"  # not a degenerate interval [1, 1]
    want = paired_ratio(bpbs["two_site"], bpbs["baseline"])
    assert ts["bpb_vs_ref_mean"] == pytest.approx(want.mean) and ts["bpb_vs_ref_ci95"] == pytest.approx([want.lo, want.hi])
    assert ts["bpb_vs_ref_text"] == want.text() and ts["bpb_vs_ref_n"] == 3
    # one seed: no sd, no interval, and never "± 0"
    assert h100["n_seeds"] == 1 and h100["final_val_bpb_sd"] is None and h100["bpb_vs_ref_ci95"] is None
    assert h100["bpb_vs_ref_text"] == f"{3.5 / 3.0:.4f} (n = 1, no interval)"
    text = report(runs)[2]
    assert want.text() in text and "(n = 1, no interval)" in text and "± 0" not in text and "sd 0.0000" not in text
    assert f"{statistics.fmean(bpbs['two_site']):.4f} (sd {statistics.stdev(bpbs['two_site']):.4f})" in text


def test_a_repeated_seed_is_listed_once_and_counts_once():
    """Two folders holding the same configuration at seed 0 (a comparison folder and a lone run): the seed is listed
    once, averaged, and the interval is not narrowed by counting it twice."""
    runs = [result("baseline", 0, 3.0), result("baseline", 1, 3.2), result("two_site", 0, 3.3),
            result("two_site", 0, 3.3), result("two_site", 1, 3.36)]
    (base, ts) = seed_summary(compare_table(runs), runs)
    assert ts["seeds"] == [0, 1] and ts["n_seeds"] == 2 and ts["runs"] == 3 and ts["bpb_vs_ref_n"] == 2
    assert "seed 0 repeated: averaged" in ts["ratio_note"]
    seeds_table = report(runs)[2].split("over seeds")[1]
    line = next(x for x in seeds_table.splitlines() if x.startswith("two_site"))
    assert line.split()[1:3] == ["0", "1"] and "0 0" not in line


def test_an_interval_that_holds_one_says_not_resolved():
    runs = [result("baseline", 0, 3.0), result("baseline", 1, 3.0), result("two_site", 0, 3.03),
            result("two_site", 1, 2.98)]
    ts = seed_summary(compare_table(runs), runs)[1]
    assert not ts["bpb_vs_ref_resolved"] and ts["bpb_vs_ref_text"].endswith("n=2, not resolved")


def test_unequal_tokens_are_flagged_in_the_row():
    """The orbital satellites lose steps in eclipse: the same budget, fewer trained tokens than the baseline it is
    divided by, and the row says so."""
    runs = [result(), dict(result("orbital", bpb=3.1), tokens=476_000), result("two_site", bpb=3.2)]
    rows = compare_table(runs)
    assert [r["note"] for r in rows] == ["", f"{476_000 / 512_000:.2f}x tokens", ""]
    lines = [line for line in render(rows).splitlines() if line.split()[0] in ("baseline", "orbital", "two_site")]
    assert [line.split()[0] for line in lines] == ["baseline", "orbital", "two_site"]
    assert lines[-2].rstrip().endswith("0.93x tokens") and not lines[-1].rstrip().endswith("tokens")
    assert render(rows, wide=True).splitlines()[2].rstrip().endswith("0.93x tokens")


def test_the_table_fits_100_columns_unless_wide():
    runs = [dict(result(e, s, 3.0 + 0.01 * s, sent=9_517_056 if e == "baseline" else 210_640), n_islands=2,
                 dir=f"runs/demo-with-a-long-folder-name/{e}/s{s}") for e in ("baseline", "two_site", "eight_cell")
            for s in range(3)]
    runs.append(dict(result("orbital", 0, 3.2), tokens=476_000, orbit={"window_wait_s": 12.3}, dir="runs/orbital-demo-s0"))
    text = report(runs)[2]
    assert max(map(len, text.splitlines())) <= 100, text
    assert "--wide shows every column" in text
    for must in ("seed", "bpb", "link", "0.93x tokens", "bytes vs", "own"):
        assert must in text
    wide = report(runs, wide=True)[2]
    head = wide.splitlines()[0]
    for column in ("corpus", "preset", "tokens", "per island", "sim s", "util", "window wait s"):
        assert column in head
    assert max(map(len, wide.splitlines())) > 100 and "--wide shows" not in wide


def test_a_folder_compares_its_real_runs_and_names_the_ones_it_skips(tmp_path, capsys):
    """runs/ after the tour and a demo: the tour's smoke sample_run is no row of the demo's comparison."""
    runs = tmp_path / "runs"
    base = write(runs, "baseline-demo-s0", result())
    ts = write(runs, "two_site-demo-s0", result("two_site", bpb=3.3, sent=10_000))
    sample = write(runs / "notebook-tour", "sample_run", dict(result("two_site", steps=24), preset="smoke"))
    sel = select_runs([runs])
    assert [r["dir"] for r in sel.results] == [str(base), str(ts)]
    assert sel.skipped == [(sample, "a smoke run, a plumbing check, among runs of a real preset")]
    assert len(select_runs([sample, base]).results) == 2  # a smoke run named is compared like any other
    assert cli.main(["compare", str(runs)]) == 0
    out, err = capsys.readouterr()
    assert "sample_run" not in out and "skipped 1 run(s)" in err and str(sample) in err
    only_smoke = tmp_path / "smoke"
    write(only_smoke, "a", dict(result(), preset="smoke"))
    write(only_smoke, "b", dict(result("two_site"), preset="smoke"))
    assert len(select_runs([only_smoke]).results) == 2  # nothing real beside them: they are the comparison


def test_formats(tmp_path, capsys):
    runs = [result(), result("two_site", bpb=3.3, sent=10_000)]
    rows = compare_table(runs)
    md = render(rows, "markdown").splitlines()
    assert md[0].startswith("| run | experiment | corpus | preset | tokens | seed | bpb |") and md[1].startswith("|---|")
    assert len(md) == 4 and "| 200x fewer |" in md[3]
    back = list(csv.DictReader(io.StringIO(render(rows, "csv"))))
    assert back[1]["experiment"] == "two_site" and float(back[1]["x_fewer_bytes"]) == 200.0
    assert float(back[1]["final_val_bpb"]) == 3.3 and back[0]["diverged_at_step"] == ""
    assert json.loads(render(rows, "json")) == json.loads(json.dumps(rows))
    with pytest.raises(ComparisonError, match="format"):
        render(rows, "html")
    dirs = [write(tmp_path, n, r) for n, r in zip(("b", "t"), runs)]
    assert cli.main(["compare", *map(str, dirs), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in out["runs"]] == [str(d) for d in dirs] and out["seeds"] == []
    assert cli.main(["compare", str(tmp_path), "--format", "markdown", "--output", str(tmp_path / "t.md")]) == 0
    assert (tmp_path / "t.md").read_text().startswith("| run |")
    assert expand_run_dirs([tmp_path]) == dirs  # a folder of run folders stands for all of them
    with pytest.raises(FileNotFoundError, match="no result.json"):
        expand_run_dirs([tmp_path / "b" / "nothing-here"] if (tmp_path / "b" / "nothing-here").mkdir() is None else [])


@pytest.mark.slow
def test_cli_seed_sweep_runs_each_seed_and_reports_mean_and_spread(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["run", "two_site", "--seeds", "0", "1", "--set", "steps=6", "--set", "threads=1", "--quiet", "--out", str(out)]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    res = [load_result(out / f"s{s}") for s in (0, 1)]
    assert [r["seed"] for r in res] == [0, 1] and res[0]["final_val_bpb"] != res[1]["final_val_bpb"]
    assert res[0]["config"]["wandb_group"] == res[1]["config"]["wandb_group"].strip() != ""
    assert "[two_site s0]" not in text  # --quiet: no progress lines
    bpbs = [r["final_val_bpb"] for r in res]
    assert f"{statistics.fmean(bpbs):.4f} (sd {statistics.stdev(bpbs):.4f})" in text
    assert cli.main(["run", "two_site", "--seeds", "0", "-1", "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()  # refused before any run


def test_regime_columns_tokens_per_active_param_and_outer_steps():
    runs = [dict(result(), tokens_per_active_param=20.48, outer_steps_per_fragment=None),  # data-parallel
            dict(result("two_site", sent=10_000), tokens_per_active_param=20.48, outer_steps_per_fragment=[25, 24]),
            dict(result("eight_cell", sent=10_000), tokens_per_active_param=20.48, outer_steps_per_fragment=[30, 30]),
            result("two_site", seed=1, sent=10_000)]  # written before these figures were recorded
    rows = compare_table(runs)
    assert [r["outer_steps_per_fragment"] for r in rows] == [None, [25, 24], [30, 30], None]
    table = render(rows, "markdown").splitlines()  # Markdown carries every column
    head = [c.strip() for c in table[0].strip("|").split("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    tpp, outer = head.index("tokens / active param"), head.index("outer steps / fragment")
    assert [c[tpp] for c in cells] == ["20.5", "20.5", "20.5", "—"]
    assert [c[outer] for c in cells] == ["—", "24..25", "30", "—"]
    back = list(csv.DictReader(io.StringIO(render(rows, "csv"))))
    assert back[1]["outer_steps_per_fragment"] == "25 24" and float(back[0]["tokens_per_active_param"]) == 20.48


def test_a_runs_summary_states_its_bytes_against_the_same_reference_as_the_table():
    from islands_kit.notebooks import result_summary

    r = dict(result("eight_cell", sent=4_000_000), ddp_equivalent_bytes=14_000_000, val_bytes=100)
    r["config"]["islands"] = [{"batch_size": 5}] * 8
    text = result_summary(r)
    assert "3.5x fewer than an fp32 gradient all-reduce every step among 8 islands" in text
    assert ratio_words(compare_table([r])[0]["x_fewer_bytes"]) == "3.5x fewer"
    same = dict(result(sent=2_000_000), val_bytes=100)  # a baseline sends what its all-reduce sends
    assert "2,000,000 bytes sent, as many as an fp32 gradient all-reduce every step among 2 islands" in result_summary(same)


def test_a_comparison_of_smoke_runs_says_it_is_no_result():
    smoke = [dict(result(), preset="smoke"), dict(result("two_site", bpb=2.99), preset="smoke")]
    text = report(smoke)[2]
    assert text.splitlines()[0].startswith("smoke: a plumbing check, not a result")  # before any number
    assert "smoke:" not in report([result(), result("two_site", bpb=2.99)])[2]  # the demo's numbers stand alone
    assert report(smoke, "markdown")[2].startswith("smoke: a plumbing check")
    assert not report(smoke, "csv")[2].startswith("smoke")  # CSV stays a table a program reads


def test_rows_are_labelled_by_paths_relative_to_the_working_directory(tmp_path, monkeypatch):
    """The compare notebook reads its runs by absolute path; its tables must not carry this machine's folders."""
    monkeypatch.chdir(tmp_path)
    inside = write(tmp_path / "runs", "baseline", result())
    outside = write(tmp_path.parent / f"{tmp_path.name}-elsewhere", "two_site", result("two_site"))
    rows = compare_table([load_result(inside.resolve()), load_result(outside.resolve()), load_result("runs/baseline")])
    assert [r["run"] for r in rows] == ["runs/baseline", str(outside.resolve()), "runs/baseline"]
    assert rows[0]["reference"] == "runs/baseline" and str(tmp_path) not in render(rows).replace(str(outside), "")


def test_compare_plot_writes_one_figure_from_the_runs_histories(tmp_path, capsys):
    """--plot: bpb over tokens with the 95% band where a configuration has two seeds or more, bytes on a log axis,
    drawn from each run's history.jsonl (a result.json alone: its val_curve)."""
    from islands_kit.compare import curve_groups

    dirs = []
    for e, bpbs in (("baseline", [3.0, 3.1]), ("two_site", [3.2, 3.3])):
        for s, b in enumerate(bpbs):
            d = write(tmp_path / "runs", f"{e}-s{s}", result(e, s, b, sent=10_000))
            hist = [{"step": k * 50, "tokens": k * 50 * 40 * 128, "val_bpb": b + 1.0 / k, "cross_site_bytes": k * 5000}
                    for k in (1, 2)]
            (d / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in hist))
            dirs.append(d)
    lone = write(tmp_path / "other", "eight_cell", result("eight_cell", 0, 3.4, sent=10_000))  # no history.jsonl
    groups = curve_groups([load_result(d) for d in dirs + [lone]])
    assert {k: len(v) for k, v in groups.items()} == {"baseline": 2, "two_site": 2, "eight_cell": 1}
    assert groups["eight_cell"] == [[{"tokens": 512_000, "val_bpb": 3.4, "cross_site_bytes": 10_000, "final": True}]]
    png = tmp_path / "cmp.png"
    assert cli.main(["compare", str(tmp_path / "runs"), str(lone), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"figure -> {png}" in capsys.readouterr().out


def test_runs_made_on_two_machines_or_kernel_sets_are_not_paired(tmp_path):
    intel, amd, same = result(), result("two_site"), result("two_site")
    intel["versions"] = same["versions"] = {"machine": "torch 2.13.0+cpu | AVX512 | x86_64 Intel Xeon | flags 1"}
    amd["versions"] = {"machine": "torch 2.13.0+cpu | AVX2 | x86_64 AMD EPYC | flags 2"}
    with pytest.raises(ComparisonError, match=r"machine: the runs differ .*Intel Xeon.*AMD EPYC"):
        compare_table([intel, amd])
    assert len(compare_table([intel, same])) == 2


def test_a_stub_or_hostile_result_is_skipped_with_one_line_and_the_rest_compared(tmp_path, capsys):
    """``study report`` used to leave stub result.json files (a ledger's figures) under runs/, after which
    ``compare runs`` failed on the first (``lacks result keys [...]``); a hostile result.json (bpb "abc", bytes
    10**4000, a negative bpb) raised inside the table or printed nonsense. Each is now skipped, named with why."""
    runs = tmp_path / "runs"
    base = write(runs, "baseline-demo-s0", result())
    ts = write(runs, "two_site-demo-s0", result("two_site", bpb=3.3, sent=10_000))
    stub = write(runs / "studies" / "t" / "box-0123abcd" / "baseline" / ("a" * 12), "seed0",
                 {"experiment": "baseline", "seed": 0, "final_val_bpb": 2.5, "restored_from": "benchmarks/t.runs.jsonl"})
    partial = write(runs, "partial", {k: v for k, v in result().items() if k != "corpus"})
    hostile = {name: write(runs, name, dict(result(), **change)) for name, change in (
        ("abc", {"final_val_bpb": "abc"}), ("negative", {"final_val_bpb": -1.0}),
        ("huge", {"cross_site_bytes": 10 ** 4000 // 10 ** 3990 * 10 ** 30}))}
    sel = select_runs([runs])
    assert [r["dir"] for r in sel.results] == [str(base), str(ts)]
    why = dict(sel.skipped)
    assert why[stub] == f"{stub / 'result.json'} was restored from the study ledger benchmarks/t.runs.jsonl (its " \
                        "figures only, not a run's whole record)"
    assert why[partial] == f"{partial / 'result.json'} lacks result keys ['corpus']"
    assert why[hostile["abc"]].endswith("final_val_bpb = abc is not a bpb (a number > 0, or null for a diverged run)")
    assert why[hostile["negative"]].endswith("final_val_bpb = -1.0 is not a bpb (a number > 0, or null for a diverged run)")
    assert why[hostile["huge"]].endswith("is not a whole count in [0, 2^63)")
    assert cli.main(["compare", str(runs)]) == 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "skipped 5 run(s)" in err
    assert cli.main(["compare", str(stub)]) == 2  # nothing left to compare: one line naming why
    assert "compare: no run to compare: " in capsys.readouterr().err


def test_compare_plot_refuses_a_history_over_its_limit_unread(tmp_path, capsys):
    from islands_kit.compare.folders import MAX_HISTORY_BYTES

    run = write(tmp_path, "run", result())
    with open(run / "history.jsonl", "wb") as f:
        f.truncate(MAX_HISTORY_BYTES + 1)  # sparse
    assert cli.main(["compare", str(run), "--plot", str(tmp_path / "p.png")]) == 2
    assert f"history.jsonl: {MAX_HISTORY_BYTES + 1:,} bytes, over the limit of {MAX_HISTORY_BYTES:,} for a " \
           "history.jsonl in compare --plot" in capsys.readouterr().err
