"""The command line as a user meets it: discoverable config (``config``, ``--help``, nearest-key suggestions),
config files (YAML/JSON, a result.json reruns a run exactly), ``--dry-run``, ``--version``, ``--force``, and
``--resume`` restoring the config from the checkpoint."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest
import yaml

from islands_kit import __version__, config
from islands_kit.cli import build_parser, main
from islands_kit.config import ConfigError, ExperimentConfig, apply_overrides
from islands_kit.config.configfile import config_rows, field_help
from islands_kit.config.presets import PRESETS, get_preset
from islands_kit.sync.butterfly_spec import ButterflyConfig
from islands_kit.sync.decoupled_spec import DecoupledConfig
from islands_kit.sync.diloco_spec import DiLoCoConfig

CONFIG_CLASSES = (config.ExperimentConfig, config.DataConfig, config.ModelConfig, config.OptimConfig,
                  config.SyncConfig, DiLoCoConfig, ButterflyConfig, DecoupledConfig, config.LinkConfig, config.IslandConfig,
                  config.FaultConfig, config.SnooConfig, config.OrbitConfig, config.StationConfig)


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_every_config_field_has_a_one_line_help(cls):
    helps = field_help(cls)
    assert set(helps) == {f.name for f in dataclasses.fields(cls)}
    missing = [k for k, v in helps.items() if not v]
    assert not missing, f"{cls.__name__}: add a '# help' comment to {missing} in islands_kit/config/"


def test_the_preset_fields_help_names_every_preset():
    text = field_help(config.ExperimentConfig)["preset"]
    assert all(f" {name}" in text for name in PRESETS), text


def test_config_command_prints_a_loadable_commented_listing(capsys, tmp_path):
    assert main(["config", "two_site", "--set", "sync.H=4", "--set", "islands.1.batch_size=8"]) == 0
    text = capsys.readouterr().out
    want = apply_overrides(get_preset("two_site", "smoke"), {"sync.H": 4, "islands.1.batch_size": 8})
    assert yaml.safe_load(text) == want.to_dict()  # the listing is the config
    assert "  H: 4  # inner steps per window [default 50]" in text.splitlines()
    assert "  top_k: 2  # experts each token is routed to" in text.splitlines()  # equal to its default: no note
    for key, _value, _default, help_ in config_rows(want):
        assert help_, key
    (tmp_path / "c.yaml").write_text(text)  # and it loads back through --config
    assert main(["config", "--config", str(tmp_path / "c.yaml")]) == 0
    assert capsys.readouterr().out == text


def test_help_lists_experiments_and_presets_and_version(capsys):
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for name in ("baseline", "two_site", "eight_cell", "orbital", *PRESETS, "islands-kit config EXPERIMENT"):
        assert name in text
    nb = build_parser()._subparsers._group_actions[0].choices["notebook"].format_help()
    assert "notebooks: baseline, compare, eight_cell, hierarchical, orbital, poisoned_island, scaling, tour, two_site" in " ".join(nb.split())
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"islands-kit {__version__}"


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["run", "--help"], ["notebook", "--help"],
                                  ["study", "--help"]])
def test_help_and_version_load_no_heavy_library(argv):
    """``--help`` took seconds when the parser's modules imported torch, scipy and matplotlib; every subcommand's
    handler now loads them when it runs (the wall time is in benchmarks/RESULTS.md, timed with farm-bench)."""
    import subprocess
    import sys

    code = ("import sys\nfrom islands_kit.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('torch', 'scipy', 'matplotlib', 'numpy', 'papermill', 'wandb') if m in sys.modules)\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60).stdout
    assert out.splitlines()[-1] == "HEAVY []", out[-500:]


def test_a_run_loads_no_plotting_or_statistics_library(tmp_path):
    """A run process (one per island under torchrun, one per trial in a study) imported matplotlib and scipy.stats
    through the dry-run module and the interval code, about 1.5 s of a 2-step smoke run's 5.2 s (benchmarks/
    RESULTS.md, "Run start-up"); it trains without them."""
    import subprocess
    import sys

    code = ("import sys\nfrom islands_kit.cli import main\nrc = main(sys.argv[1:])\n"
            "heavy = sorted(m for m in ('scipy', 'matplotlib', 'papermill') if m in sys.modules)\n"
            "print('RC', rc, 'HEAVY', heavy)")
    argv = ["run", "two_site", "--preset", "smoke", "--set", "steps=2", "--set", "eval_every=2", "--out", str(tmp_path / "r")]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}).stdout
    assert out.splitlines()[-1] == "RC 0 HEAVY []", out[-500:]
    assert (tmp_path / "r" / "result.json").is_file()


def test_a_subcommand_imports_its_handler_when_it_runs(capsys):
    """The lazy handler runs the named function of its module, and the study handler is the one the parser names."""
    from islands_kit.commands.subcommands import Handler

    parser = build_parser()
    fn = parser.parse_args(["study", "report", "x.toml"]).fn
    assert isinstance(fn, Handler) and (fn.module, fn.function) == ("islands_kit.protocol.command", "study_command")
    assert main(["study", "report", "no/such/study.toml"]) == 2
    assert "no/such/study.toml" in capsys.readouterr().out


def test_config_documents_experiment_with_every_row_of_the_table(capsys):
    from islands_kit.config.experiment_table import EXPERIMENT_TABLE

    assert main(["config", "two_site"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("experiment:")]
    assert f"# {' | '.join(EXPERIMENT_TABLE)} (config/experiment_table.py)" in line
    assert {"hierarchical", "orbital"} <= set(EXPERIMENT_TABLE)


def test_help_lists_every_experiment_of_the_table_even_one_registered_later(capsys):
    from islands_kit.config.experiment_table import EXPERIMENT_TABLE, ExperimentRow, register_experiment, unregister_experiment

    text = " ".join(build_parser().format_help().split())
    for name, row in EXPERIMENT_TABLE.items():  # orbital included: the list is the table's, not a hand-written one
        assert f"{name} {row.description}" in text
    base = EXPERIMENT_TABLE["baseline"]
    register_experiment(ExperimentRow("twin_baseline", "a registered twin of the baseline", base.islands, base.sync))
    try:
        parser = build_parser()
        assert "twin_baseline a registered twin of the baseline" in " ".join(parser.format_help().split())
        assert parser.parse_args(["run", "twin_baseline"]).experiment == "twin_baseline"
        assert "twin_baseline" in parser._subparsers._group_actions[0].choices["run"].format_help()
    finally:
        unregister_experiment("twin_baseline")


def test_seeds_are_taken_as_a_list_a_comma_list_or_a_range(tmp_path, capsys):
    from islands_kit.commands.subcommands import parse_seeds

    assert parse_seeds(["0", "1"]) == parse_seeds(["0,1"]) == [0, 1]
    assert parse_seeds(["0-2"]) == [0, 1, 2] and parse_seeds(["3", "0-1,3"]) == [3, 0, 1]  # once each, in order
    for bad in (["a"], ["-1"], ["2-0"], ["0,,x"], [","]):
        with pytest.raises(ConfigError, match="--seeds: "):
            parse_seeds(bad)
    # counted before the list is made: a hundred billion seeds raised MemoryError, 2^63 failed in every run's config
    for bad in (["0-100000000000"], [str(2 ** 63)], ["0-9999", "10000"]):
        with pytest.raises(ConfigError, match=r"^--seeds: at most 10,000 seeds, each below 2\^32 \(got "):
            parse_seeds(bad)
    for written in (["0,1"], ["0", "1"], ["0-1"]):
        assert main(["run", "baseline", "--seeds", *written, "--dry-run", "--set", "steps=2",
                     "--out", str(tmp_path / "s")]) == 0
        dirs = [line for line in capsys.readouterr().out.splitlines() if line.startswith("dry run: valid")]
        assert [d.split()[5] for d in dirs] == ["0", "1"], dirs
    assert main(["run", "baseline", "--seeds", "0,x", "--dry-run"]) == 2
    assert "--seeds: every seed must be an integer >= 0, given as S, S,S or S-S (got 'x')" in capsys.readouterr().err


@pytest.mark.slow  # trains for seconds
def test_run_orbital_at_smoke(tmp_path, capsys):
    assert main(["run", "orbital", "--preset", "smoke", "--out", str(tmp_path / "o")]) == 0
    res = json.loads((tmp_path / "o" / "result.json").read_text())
    assert res["experiment"] == "orbital" and res["config"]["link"]["schedule"] == "orbit"
    o = res["orbit"]
    assert sum(o["bytes_per_link"].values()) == res["cross_site_bytes"] > 0 and o["window_wait_s"] > 0
    assert "orbital: final_val_bpb=" in capsys.readouterr().out


def test_unknown_keys_suggest_the_nearest(capsys, tmp_path):
    assert main(["run", "two_site", "--set", "sync.HH=4", "--out", str(tmp_path / "x")]) == 2
    assert "sync.HH: unknown key (did you mean sync.H" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("experiment: two_site\nmodel:\n  n_layer: 3\n")
    assert main(["config", "--config", str(tmp_path / "bad.yaml")]) == 2
    assert "model.n_layer: unknown key (did you mean model.n_layers" in capsys.readouterr().err
    # a key of the flat SyncConfig names its place in the per-strategy sub-config, on the command line and in a file
    assert main(["run", "two_site", "--set", "sync.outer_lr=1", "--out", str(tmp_path / "x")]) == 2
    assert "sync.outer_lr: unknown key (did you mean sync.diloco.outer_lr?" in capsys.readouterr().err
    (tmp_path / "old.yaml").write_text("experiment: eight_cell\nsync:\n  delay: 3\n")
    assert main(["config", "--config", str(tmp_path / "old.yaml")]) == 2
    assert "sync.delay: unknown key (did you mean sync.tau?" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_config_file_errors_name_the_file_and_the_rule(capsys, tmp_path):
    cases = {"a.yaml": "experiment: [unclosed", "b.json": "{", "c.toml": "x = 1", "d.yaml": "- 1\n- 2\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        assert main(["config", "--config", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("islands-kit: error: --config:") and name in err and err.count("\n") == 1, err
    (tmp_path / "e.yaml").write_text("experiment: baseline\n")
    assert main(["config", "two_site", "--config", str(tmp_path / "e.yaml")]) == 2
    assert "experiment: the command names 'two_site', the config file 'baseline'" in capsys.readouterr().err
    assert main(["config"]) == 2
    assert "experiment: name one" in capsys.readouterr().err


@pytest.mark.slow
def test_result_json_reruns_exactly_through_yaml_and_json(tmp_path, capsys):
    a = tmp_path / "a"
    assert main(["run", "two_site", "--set", "steps=10", "--set", "sync.tau=2", "--set", "sync.codec=int8",
                 "--out", str(a)]) == 0
    first = json.loads((a / "result.json").read_text())
    capsys.readouterr()
    # result.json's config through the config listing (YAML) ...
    assert main(["config", "--config", str(a / "result.json")]) == 0
    (tmp_path / "rerun.yaml").write_text(capsys.readouterr().out)
    assert main(["run", "--config", str(tmp_path / "rerun.yaml"), "--out", str(tmp_path / "b")]) == 0
    second = json.loads((tmp_path / "b" / "result.json").read_text())
    assert second["config"] == first["config"] and second["final_val_bpb"] == first["final_val_bpb"]
    assert second["val_curve"] == first["val_curve"]
    # ... and result.json itself as the config file (JSON)
    cfg = ExperimentConfig.from_dict(first["config"])
    assert cfg.sync.tau == 2 and cfg.sync.codec == "int8"
    assert main(["run", "--config", str(a / "result.json"), "--out", str(tmp_path / "b"), "--dry-run"]) == 2
    assert "holds a finished run" in capsys.readouterr().err  # --force or another folder
    assert main(["run", "--config", str(a / "result.json"), "--out", str(tmp_path / "b"), "--dry-run",
                 "--force"]) == 0
    out = capsys.readouterr().out
    assert "dry run: valid" in out and "steps 10 x global batch 40" in out and "codec int8" in out


def test_dry_run_trains_nothing(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["run", "eight_cell", "--dry-run", "--out", str(out)]) == 0
    assert "dry run: valid" in capsys.readouterr().out and not out.exists()
    assert main(["run", "baseline", "--dry-run", "--set", "data.corpus=/no/such.txt", "--out", str(out)]) == 2
    assert "data.corpus" in capsys.readouterr().err


def test_a_dry_run_of_a_sweep_names_the_folders_the_sweep_writes_and_how_long_each_run_takes(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["run", "baseline", "--seeds", "0", "1", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    would = [line for line in text.splitlines() if line.startswith("dry run: valid")]
    assert would == [f"dry run: valid; baseline seed {s} would write {out / f's{s}'}/result.json (nothing trained)"
                     for s in (0, 1)]
    # the folders a real sweep writes (the same code picks them) and nothing else named
    assert "baseline-smoke-s0" not in text and not out.exists()
    (time_line,) = [line for line in text.splitlines() if line.startswith("time: about ")]
    assert "per run (measured on this machine: 3 timed steps" in time_line and "all 2 runs" in time_line
    # the default folder of a sweep is the sweep's, not a single run's
    assert main(["run", "baseline", "--seeds", "0", "1", "--dry-run"]) == 0
    assert "would write runs/baseline-smoke-seeds/s1/result.json" in capsys.readouterr().out


def test_a_sweep_checks_only_the_folders_it_writes(tmp_path, capsys, monkeypatch):
    """A finished single run in the default folder (runs/baseline-smoke-s0) is no business of a sweep, which writes
    runs/baseline-smoke-seeds/s*: the sweep goes ahead; a finished run in one of the sweep's own folders stops it."""
    monkeypatch.chdir(tmp_path)
    single = tmp_path / "runs" / "baseline-smoke-s0"
    single.mkdir(parents=True)
    (single / "result.json").write_text("{}")
    assert main(["run", "baseline", "--seeds", "0-1", "--dry-run"]) == 0
    assert "would write runs/baseline-smoke-seeds/s0/result.json" in capsys.readouterr().out
    assert main(["run", "baseline", "--dry-run"]) == 2  # the single run's own folder is still guarded
    assert "runs/baseline-smoke-s0 holds a finished run" in capsys.readouterr().err
    mine = tmp_path / "runs" / "baseline-smoke-seeds" / "s1"
    mine.mkdir(parents=True)
    (mine / "result.json").write_text("{}")
    assert main(["run", "baseline", "--seeds", "0-1", "--dry-run"]) == 2
    assert "runs/baseline-smoke-seeds/s1 holds a finished run" in capsys.readouterr().err


def test_the_time_estimate_comes_from_timed_steps_and_evaluations(monkeypatch):
    import time

    from islands_kit.train import estimate
    from islands_kit.train.experiment import Experiment

    cfg = get_preset("baseline", "smoke")  # 24 steps, an evaluation at step 12 (the final one at 24)
    step = Experiment.train_step

    def slow_step(self):
        time.sleep(0.05)
        return step(self)

    monkeypatch.setattr(Experiment, "train_step", slow_step)
    est = estimate.estimate_run(cfg)
    assert est.steps == 24 and est.n_evals == 1 and est.timed_steps == 3
    assert 0.05 <= est.step_s < 0.5  # what the steps took here, sleep included
    assert est.total_s == pytest.approx(est.setup_s + 24 * est.step_s + est.eval_s + est.final_eval_s)
    resumed = estimate.estimate_run(cfg, start_step=12)  # a resume: only the steps still to train
    assert resumed.steps == 12 and resumed.n_evals == 0


@pytest.mark.slow
def test_resume_restores_the_config_from_the_checkpoint(tmp_path, capsys):
    a = tmp_path / "a"
    assert main(["run", "two_site", "--set", "steps=16", "--set", "checkpoint_every=8", "--set", "sync.tau=2",
                 "--set", "optim.lr=0.004", "--out", str(a)]) == 0
    full = json.loads((a / "result.json").read_text())
    capsys.readouterr()
    # nothing retyped: experiment, preset and every --set come from the checkpoint (step 8)
    assert main(["run", "--resume", str(a), "--out", str(tmp_path / "b")]) == 0
    resumed = json.loads((tmp_path / "b" / "result.json").read_text())
    for k in ("final_val_bpb", "val_curve", "ledger", "sim_wall_clock_s", "config"):
        assert resumed[k] == full[k], k
    capsys.readouterr()
    assert main(["run", "--resume", str(a), "--set", "sync.H=4", "--out", str(tmp_path / "c")]) == 2
    assert "sync.H: cannot change on --resume" in capsys.readouterr().err
    assert main(["run", "--resume", str(a), "--set", "steps=8", "--out", str(tmp_path / "c")]) == 2
    assert "steps: must be > the checkpoint's step 8" in capsys.readouterr().err
    assert main(["run", "eight_cell", "--resume", str(a), "--out", str(tmp_path / "c")]) == 2
    assert "experiment: the checkpoint in" in capsys.readouterr().err
    assert main(["run", "two_site", "--preset", "smoke", "--set", "sync.tau=2", "--resume", str(a), "--set",
                 "steps=20", "--dry-run", "--out", str(tmp_path / "c")]) == 0  # retyped and equal: accepted
    assert main(["run", "--resume", str(a), "--set", "steps=20", "--dry-run", "--out", str(tmp_path / "c")]) == 0
    assert "steps 20 x" in capsys.readouterr().out
    assert main(["config", "--resume", str(a), "--set", "steps=20"]) == 0
    restored = yaml.safe_load(capsys.readouterr().out)
    assert restored == dict(full["config"], steps=20)
    assert main(["run", "--resume", str(a), "--out", str(tmp_path / "b")]) == 2  # another finished run: refused
    assert "holds a finished run" in capsys.readouterr().err
    assert main(["run", "--resume", str(a), "--dry-run"]) == 0  # continuing in place (the default --out) is allowed
    assert f"would resume {a} and write {a.resolve()}/result.json" in capsys.readouterr().out
    assert not (tmp_path / "c").exists()


def test_corpora_command_fetches_and_verifies_the_registered_corpora(capsys):
    from islands_kit.data import CORPORA

    assert main(["corpora"]) == 0
    out = capsys.readouterr().out
    for name, src in CORPORA.items():
        assert f"{name}: {src.bytes:,} bytes, sha256 {src.sha256} verified" in out
    assert main(["corpora", "tinystories"]) == 2
    assert "corpora: unknown corpus 'tinystories' (registered: enwiki, shakespeare)" in capsys.readouterr().err


def test_did_you_mean_knows_common_synonyms_and_corpus_names(capsys, tmp_path):
    assert main(["run", "two_site", "--set", "optim.learning_rate=0.01", "--out", str(tmp_path / "x")]) == 2
    assert "optim.learning_rate: unknown key (did you mean optim.lr or" in capsys.readouterr().err
    assert main(["run", "two_site", "--set", "model.num_experts=4", "--out", str(tmp_path / "x")]) == 2
    assert "(did you mean model.n_experts" in capsys.readouterr().err
    assert main(["run", "two_site", "--set", "data.corpus=shakespear", "--dry-run", "--out", str(tmp_path / "x")]) == 2
    assert "did you mean shakespeare?" in capsys.readouterr().err
    # a nanoGPT user's flat keys name the kit's field in its section
    for typed, meant in (("lr", "optim.lr"), ("learning_rate", "optim.lr"), ("max_iters", "steps"),
                         ("n_embd", "model.d_model"), ("batch_size", "islands.0.batch_size or islands.1.batch_size")):
        assert main(["run", "two_site", "--set", f"{typed}=1", "--out", str(tmp_path / "x")]) == 2
        assert f"{typed}: unknown key (did you mean {meant}?)" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_set_with_a_space_says_to_use_key_equals_value(capsys):
    assert main(["run", "two_site", "--set", "sync.H", "10"]) == 2
    err = capsys.readouterr().err
    assert "--set sync.H: use key=value, one word (--set sync.H=10)" in err and "unrecognized" not in err


@pytest.mark.slow
def test_sample_names_a_missing_folder_and_escapes_control_bytes(capsys, tmp_path):
    from islands_kit.train.sampling import printable

    assert main(["sample", str(tmp_path / "nope")]) == 2
    assert f"the folder {tmp_path / 'nope'} does not exist" in capsys.readouterr().err
    assert printable(b"ROMEO:\n\tto be\x1b[2J\x07\xff\xc3\xa9") == "ROMEO:\n\tto be\\x1b[2J\\x07\\xffé"
    assert main(["run", "two_site", "--set", "steps=2", "--set", "threads=1", "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert main(["sample", str(tmp_path / "r"), "--max-bytes", "200"]) == 0
    out = capsys.readouterr().out
    assert all(ch in "\n\t" or ch.isprintable() for ch in out)


def test_help_has_no_rst_backticks_and_shows_defaults():
    subs = build_parser()._subparsers._group_actions[0].choices
    texts = {name: p.format_help() for name, p in subs.items()}
    texts["islands-kit"] = build_parser().format_help()
    assert not any("``" in t for t in texts.values())
    sample = " ".join(texts["sample"].split())
    assert "bytes to generate (default: 256)" in sample and "(default: 1.0)" in sample and "(default: 0)" in sample
    assert "output format (default: table)" in " ".join(texts["compare"].split())


def test_env_reports_versions_threads_device_cache_and_corpora(capsys, monkeypatch, tmp_path):
    from islands_kit.commands.envinfo import environment

    monkeypatch.setenv("ISLANDS_KIT_CACHE", str(tmp_path / "cache"))
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    for field in ("python", "islands_kit", "torch", "device", "packages:", "threads:", "cache:", "corpora:"):
        assert field in out
    assert str(tmp_path / "cache") in out and "shakespeare not cached" in out
    env = environment()
    assert env["threads"]["OMP_NUM_THREADS"] == "1" and set(env["corpora"]) == {"shakespeare", "enwiki"}
    assert not any(s.startswith("cached") for s in env["corpora"].values())  # the empty cache holds none
    assert main(["env", "--short"]) == 0
    short = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in short] == ["python", "islands_kit", "torch", "device", "triton"]


def test_a_preset_is_a_name_from_the_table_never_a_path(tmp_path, capsys, monkeypatch):
    """--set preset=../../../escaped named the default folder runs/two_site-../../../escaped-s0: a run wrote outside
    runs/. The preset is a name from the preset table, checked with every other field."""
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    assert main(["run", "two_site", "--set", "preset=../../../escaped", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "preset: must be one of smoke|demo|demo-long|gpu-small|gpu (got '../../../escaped')" in err
    assert not (tmp_path / "escaped-s0").exists() and not (work / "runs").exists()
