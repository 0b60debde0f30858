"""The notebooks, executed for real through papermill with smoke parameters, and the helpers they call.

Cost: the compare notebook runs the three experiment notebooks once (each result is checked from there, not re-run);
the tour runs through the CLI with reduced sizes; two bad-parameter runs stop in their first cells.
"""
from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from islands_kit import cli
from islands_kit.config import ConfigError
from islands_kit.config.presets import get_preset
from islands_kit.notebooks import (
    NOTEBOOK_DIR,
    NotebookError,
    check_parameters,
    comparison_report,
    comparison_setup,
    decoupled_pair,
    decoupled_table,
    format_rows,
    load_run,
    notebook_config,
    parse_cli_parameters,
    poisoned_island_setup,
    poisoned_island_table,
    resolve_out_dir,
    run_notebook,
    tour,
)
from islands_kit.protocol.tables import render
from islands_kit.records.tracking import RESULT_KEYS
from islands_kit.train.golden import measured_rtol, same_number

GOLDEN = Path(__file__).parent / "golden"

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("baseline", "two_site", "eight_cell", "hierarchical", "orbital", "compare", "tour")
EXPERIMENT_PNGS = ("bpb_vs_tokens.png", "bpb_vs_sim_time.png", "link_bytes.png", "routing_load.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    # kernels inherit the environment: no wandb; one intra-op thread, because on the shared 2-core machine
    # oversubscribed OpenMP threads make the smoke runs many times slower
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("ISLANDS_KIT_QUIET", raising=False)  # a test below asks for progress lines


def assert_png(p: Path) -> None:
    assert p.is_file(), f"missing figure {p}"
    data = p.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000, f"{p} is not a real PNG"


# ---------------------------------------------------------------------------------------------------------------
# The committed notebooks


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_shape(name):
    """No outputs, python3 kernelspec, a first code cell tagged parameters holding literal assignments only, every one
    of which papermill can see."""
    import papermill as pm

    nb = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), "commit notebooks without outputs"
    params = code[0]
    assert params.metadata.get("tags") == ["parameters"]
    names = []
    for node in ast.parse(params.source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, ast.dump(node)
        ast.literal_eval(node.value)  # raises unless a literal
        names.append(node.targets[0].id)
    assert list(pm.inspect_notebook(str(NOTEBOOK_DIR / f"{name}.ipynb"))) == names
    assert sum("parameters" in c.metadata.get("tags", []) for c in nb.cells) == 1


@pytest.mark.slow
def test_notebooks_match_their_generator():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_notebooks.py"), "--check"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
def test_experiment_notebooks_declare_their_knobs():
    import papermill as pm

    common = {"preset", "seed", "steps", "corpus", "out_dir", "wandb_mode", "wandb_project", "wandb_group", "link",
              "overrides"}
    knobs = {"baseline": set(),
             "two_site": {"H", "n_fragments", "tau", "alpha", "codec", "outer_lr", "routing_sync", "frontier_file",
                          "decoupled_windows", "straggler_factor", "decoupled_link", "utilisation_case"},
             "eight_cell": {"H", "exchanges_per_window", "delay", "codec", "frontier_file"},
             "hierarchical": {"H", "site_every", "site_mode", "site_link", "codec"}}
    for name, own in knobs.items():
        assert set(pm.inspect_notebook(str(NOTEBOOK_DIR / f"{name}.ipynb"))) == common | own
    # the orbital experiment flies its own link (leo-orbit, link.orbit.*): no link parameter, its orbit's knobs
    assert set(pm.inspect_notebook(str(NOTEBOOK_DIR / "orbital.ipynb"))) == common - {"link"} | {
        "baseline_dir", "study_file", "isl", "time_compression", "eclipse_throttle", "H", "grace_s", "corrupt_prob"}


# ---------------------------------------------------------------------------------------------------------------
# Helpers the notebooks call


def test_notebook_config_overrides_and_preset_defaults():
    cfg = notebook_config("two_site", "smoke", 3, 0, {"sync.H": None, "sync.codec": "int8", "link.preset": "intra-dc"})
    ref = get_preset("two_site", "smoke")
    assert cfg.seed == 3 and cfg.steps == ref.steps  # steps 0 = the preset's
    assert cfg.sync.H == ref.sync.H  # None = the preset's
    assert cfg.sync.codec == "int8"
    assert cfg.link.preset == "intra-dc" and cfg.link.rtt_s == 50e-6
    assert notebook_config("baseline", "smoke", 0, 7, {}).steps == 7


def test_notebook_overrides_parameter_sets_any_field_and_refuses_a_double_setting():
    cfg = notebook_config("two_site", "smoke", 0, 0, {"sync.H": None}, {"optim.lr": 0.003, "threads": 1,
                                                                          "sync.H": 4})
    assert cfg.optim.lr == 0.003 and cfg.threads == 1 and cfg.sync.H == 4
    with pytest.raises(ConfigError, match=r"^overrides: 'sync.H' is also set by a named parameter"):
        notebook_config("two_site", "smoke", 0, 0, {"sync.H": 6}, {"sync.H": 4})
    with pytest.raises(ConfigError, match=r"^overrides: 'seed' is also set"):
        notebook_config("two_site", "smoke", 0, 0, {}, {"seed": 4})
    with pytest.raises(ConfigError, match=r"^overrides: must be a mapping"):
        notebook_config("two_site", "smoke", 0, 0, {}, ["optim.lr", 0.1])
    with pytest.raises(ConfigError, match=r"^optim\.lrr: unknown key"):
        notebook_config("two_site", "smoke", 0, 0, {}, {"optim.lrr": 0.1})


@pytest.mark.parametrize("params,match", [
    ({"out_dir": 5}, r"^out_dir: must be a string \(notebook two_site, default ''\) \(got 5\)$"),
    ({"steps": "ten"}, r"^steps: must be an integer"),
    ({"steps": True}, r"^steps: must be an integer"),
    ({"overrides": [1]}, r"^overrides: must be a mapping"),
    ({"routing_sync": 1}, None),  # default None: any literal passes here, the validation cell judges it
    ({"seed": 1.5}, r"^seed: must be an integer"),
])
def test_notebook_parameters_are_type_checked_before_any_kernel(params, match):
    if match is None:
        check_parameters("two_site", params)
    else:
        with pytest.raises(ConfigError, match=match):
            check_parameters("two_site", params)


def test_cli_parameters_keep_text_for_string_parameters():
    params = parse_cli_parameters("two_site", [("out_dir", "5"), ("steps", "7"), ("codec", "int8"), ("H", "4"),
                                               ("overrides", '{"optim.lr": 0.003}')])
    assert params == {"out_dir": "5", "steps": 7, "codec": "int8", "H": 4, "overrides": {"optim.lr": 0.003}}
    check_parameters("two_site", params)


def test_cli_notebook_bad_type_is_one_line(tmp_path, capsys):
    assert cli.main(["notebook", "two_site", "-p", "steps", "ten", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("islands-kit: error: steps: must be an integer")
    assert not (tmp_path / "two_site.ipynb").exists()  # refused before any kernel started


def test_a_mapping_parameter_that_is_not_json_says_it_must_be_json_and_shows_the_fix(tmp_path, capsys):
    """Python's quotes ({'optim.lr': 0.01}) are no JSON: the error said only "must be a mapping"."""
    assert cli.main(["notebook", "two_site", "-p", "overrides", "{'optim.lr': 0.01}", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("islands-kit: error: -p overrides: must be JSON")
    assert err.endswith("""e.g. -p overrides '{"optim.lr": 0.01}'""")
    assert not (tmp_path / "two_site.ipynb").exists()


def test_format_rows_and_poisoned_island_helpers(tmp_path):
    text = format_rows([{"a": 1, "b": 0.5}, {"a": 22, "c": None}])
    assert text.splitlines() == ["a   b       c", "1   0.5000", "22"]
    setup = poisoned_island_setup("smoke", 0, 0, "scale", 1, -1, 100.0, 1.0, "auto", "disabled", tmp_path,
                                  {"sync.H": 4})
    clean, attacked, defended = (setup["runs"][k] for k in ("clean", "attacked", "defended"))
    assert setup["start"] == int(0.4 * clean.steps) and clean.sync.H == attacked.sync.H == 4
    assert clean.faults.attack == "none" and attacked.faults.defense == "none" and defended.faults.defense == "auto"
    assert attacked.faults.attack_start == setup["start"] == defended.faults.attack_start
    assert setup["start_tokens"] == setup["start"] * clean.model.seq_len * sum(i.batch_size for i in clean.islands)
    with pytest.raises(ConfigError, match="^faults.attack:"):
        poisoned_island_setup("smoke", 0, 0, "bribe", 1, -1, 100.0, 1.0, "auto", "disabled", tmp_path)
    with pytest.raises(ConfigError, match="^attack_start:"):
        poisoned_island_setup("smoke", 0, 0, "scale", 1, -2, 100.0, 1.0, "auto", "disabled", tmp_path)
    results = {"clean": {"final_val_bpb": 2.0, "faults_report": []},
               "attacked": {"final_val_bpb": 3.0, "faults_report": []},
               "defended": {"final_val_bpb": None, "diverged_at_step": 7, "faults_report": [{}, {}]}}
    lines = poisoned_island_table(results, {k: k for k in results}).splitlines()
    assert lines[0].split() == ["run", "final", "bpb", "vs", "clean", "flags"]
    assert lines[1].split() == ["clean", "2.0000", "+0.00%", "0"]
    assert lines[2].split() == ["attacked", "3.0000", "+50.00%", "0"]
    assert lines[3].split() == ["defended", "diverged", "at", "step", "7", "2"]


def test_decoupled_pair_is_lockstep_and_decoupled_with_a_slow_site_b():
    cfg = notebook_config("two_site", "smoke", 0, 0, {"link.preset": "transpacific-25g"})
    pair = decoupled_pair(cfg, 3, 2.5, "intra-dc")
    lock, dec = pair["lockstep"], pair["decoupled"]
    assert (lock.sync.mode, dec.sync.mode) == ("lockstep", "decoupled")
    assert lock.steps == lock.eval_every == 3 * cfg.sync.H and dec.steps == dec.eval_every == 60  # round(24 x 2.5)
    for c in (lock, dec):
        assert (c.faults.straggler_island, c.faults.straggler_factor) == (1, 2.5)
        assert c.link.preset == "intra-dc" and c.seed == cfg.seed and c.sync.H == cfg.sync.H
    assert decoupled_pair(cfg, 1, 1, "")["decoupled"].link.preset == "transpacific-25g"  # empty: the notebook's link
    # side runs: their own wandb group, so a comparison's group holds only the comparison's runs
    in_compare = notebook_config("two_site", "smoke", 0, 0, {"wandb_group": "compare-demo-20261202"})
    assert {c.wandb_group for c in decoupled_pair(in_compare, 1, 2.0).values()} == {"compare-demo-20261202-side-runs"}
    for args, match in (((0, 2.0, ""), r"^decoupled_windows: must be an integer >= 1"),
                        ((True, 2.0, ""), r"^decoupled_windows: must be an integer"),
                        ((2, 0.5, ""), r"^straggler_factor: must be a number >= 1"),
                        ((2, 2.0, "moon"), r"^decoupled_link: must be empty \(the notebook's link\) or one of")):
        with pytest.raises(ConfigError, match=match):
            decoupled_pair(cfg, *args)


def test_no_cell_ends_in_a_bare_call_that_returns_a_value():
    """A cell's last bare expression is echoed as its output (``True`` under the frontier figure): helpers that return
    a value are assigned."""
    returning = {"show_frontier"}
    for src in sorted((ROOT / "notebooks").glob("*.py")):
        for cell in src.read_text().split("\n# %%")[1:]:
            marker, _, code = cell.partition("\n")
            if "[markdown]" in marker:
                continue
            body = ast.parse(code).body
            last = body[-1] if body else None
            if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
                name = getattr(last.value.func, "id", getattr(last.value.func, "attr", ""))
                assert name not in returning, f"{src.name}: a cell ends in a bare {name}(...) call"


def test_show_frontier_draws_the_measured_points_or_says_how_to_measure_them(tmp_path, capsys, monkeypatch):
    from islands_kit.notebooks import show_frontier

    pts = [{"label": "tuned", "fewer": 13.0, "ratio": 1.17, "default": True, "preset": "demo"}]
    (tmp_path / "f.json").write_text(json.dumps(pts))
    assert show_frontier(tmp_path / "f.json", tmp_path / "out", "eight_cell", "demo") is True
    assert (tmp_path / "out" / "frontier.png").stat().st_size > 0
    assert capsys.readouterr().out == ""  # the demo's own notebook: the points are its preset's
    # inside a smoke run the figure is still the demo's measured points, and says so in words and in its title
    shown = []
    monkeypatch.setattr("islands_kit.plots.show", lambda fig, path: shown.append(fig))
    assert show_frontier(tmp_path / "f.json", tmp_path / "out", "eight_cell", "smoke") is True
    assert "the demo preset's measured points (f.json, benchmarks/RESULTS.md), not this smoke run's" in capsys.readouterr().out
    assert "the demo preset's measured points" in shown[0].axes[0].get_title() and "not this run" in shown[0].axes[0].get_title()
    assert show_frontier(tmp_path / "missing.json", tmp_path / "out2") is False
    assert "missing.json not found: the frontier files ship in a checkout's benchmarks/" in capsys.readouterr().out
    assert not (tmp_path / "out2" / "frontier.png").exists()


def test_decoupled_table_one_line_per_run():
    islands = {"islands": [{"name": "site-a"}, {"name": "site-b"}], "faults": {"straggler_factor": 2.0}}
    results = {"lockstep": {"config": islands, "inner_steps": {"0": 16, "1": 16}, "tokens": 20480,
                            "sim_wall_clock_s": 0.0678, "goodput": 0.5, "final_val_bpb": 6.5},
               "decoupled": {"config": islands, "inner_steps": {0: 32, 1: 16}, "tokens": 32768,
                             "sim_wall_clock_s": 0.0679, "goodput": 0.8, "final_val_bpb": 5.6}}
    title, *lines = decoupled_table(results).splitlines()
    # relayed into a comparison's output, the table says what it is before any number
    assert title == "two_site side runs, lock-step vs decoupled with site B 2x slower (not rows of any comparison):"
    assert lines[0].split() == ["run", "inner", "steps", "tokens", "simulated", "s", "goodput", "final", "bpb"]
    assert lines[1].split() == ["lockstep", "site-a", "16,", "site-b", "16", "20,480", "0.0678", "0.5000", "6.5000"]
    assert lines[2].split() == ["decoupled", "site-a", "32,", "site-b", "16", "32,768", "0.0679", "0.8000", "5.6000"]


@pytest.mark.parametrize("experiment,steps,overrides,field", [
    ("two_site", 0, {"sync.H": 0}, "sync.H"),
    ("eight_cell", 0, {"sync.codec": "int3"}, "sync.codec"),
    ("two_site", 0, {"sync.tau": 8}, "sync.tau"),  # tau must be < H (smoke H = 8)
    ("eight_cell", 0, {"sync.tau": 8}, "sync.tau"),  # the butterfly's merge delay is tau too
    ("two_site", 0, {"sync.diloco.outer_lr": 0}, "sync.diloco.outer_lr"),
    ("eight_cell", 0, {"sync.butterfly.exchanges_per_window": 0}, "sync.butterfly.exchanges_per_window"),
    ("baseline", 0, {"link.preset": "moon"}, "link.preset"),
    ("baseline", -1, {}, "steps"),
    ("baseline", 0, {"data.corpus": "/no/such/corpus.txt"}, "data.corpus"),
    ("baseline", 0, {"wandb_mode": "loud"}, "wandb_mode"),
])
def test_notebook_config_names_the_bad_field(experiment, steps, overrides, field):
    with pytest.raises(ConfigError, match=rf"^{field}:"):
        notebook_config(experiment, "smoke", 0, steps, overrides)


@pytest.mark.slow
def test_bad_preset_and_unknown_notebook_parameter(tmp_path):
    with pytest.raises(ConfigError, match="preset"):
        notebook_config("baseline", "huge", 0, 0, {})
    with pytest.raises(ConfigError, match="unknown parameter 'H'"):  # the baseline has no H: refused before any kernel
        run_notebook("baseline", {"H": 50}, tmp_path)
    with pytest.raises(ConfigError, match="unknown notebook"):
        run_notebook("nope", {}, tmp_path)
    assert not (tmp_path / "baseline.ipynb").exists()


def test_comparison_setup_validates_every_experiment_and_shares_a_group(tmp_path, monkeypatch):
    shared, out = comparison_setup(["baseline", "two_site"], "smoke", 1, 0, "shakespeare", "transpacific-25g",
                                   "disabled", "p", "", tmp_path / "c")
    # one wandb group per comparison run (one `make demo`), named by preset and start time
    assert re.fullmatch(r"compare-smoke-\d{8}-\d{6}", shared["wandb_group"]), shared["wandb_group"]
    assert out == (tmp_path / "c").resolve() and out.is_dir()
    monkeypatch.chdir(tmp_path)
    shared, out = comparison_setup(["baseline"], "smoke", 0, 0, "shakespeare", "transpacific-25g", "disabled", "p",
                                   "mine", "", seeds=[2, 0])
    assert shared["wandb_group"] == "mine" and shared["seed"] == 2
    assert out == tmp_path.resolve() / "runs" / "compare-smoke-seeds-2-0"
    for bad in ([1, 1], [0, -1], [0.5]):
        with pytest.raises(ConfigError, match="seeds"):
            comparison_setup(["baseline"], "smoke", 0, 0, "shakespeare", "transpacific-25g", "disabled", "p", "",
                             tmp_path, seeds=bad)
    with pytest.raises(ConfigError, match="experiments"):
        comparison_setup(["baseline", "ten_cell"], "smoke", 0, 0, "shakespeare", "transpacific-25g", "disabled",
                         "p", "", tmp_path)
    with pytest.raises(ConfigError, match="link.preset"):
        comparison_setup(["baseline"], "smoke", 0, 0, "shakespeare", "dialup", "disabled", "p", "", tmp_path)
    monkeypatch.chdir(tmp_path)
    assert resolve_out_dir("", get_preset("eight_cell", "smoke")) == tmp_path.resolve() / "runs" / "eight_cell-smoke-s0"


def test_make_lab_puts_the_notebooks_runs_in_the_checkouts_runs_folder(tmp_path, monkeypatch):
    """A Jupyter kernel runs in the notebook's folder: without ``make lab``'s base folder a notebook's runs landed in
    notebooks/runs/, where ``islands-kit compare runs/...`` from the checkout does not look."""
    printed = subprocess.run(["make", "-n", "lab", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    base = re.search(r'ISLANDS_KIT_BASE_DIR="([^"]+)"\s+\S+/jupyter lab', printed)
    root = re.search(r'--ServerApp.root_dir="([^"]+)"', printed)
    assert base and root and Path(base.group(1)) == Path(root.group(1)) == ROOT  # the checkout, runs/ in view
    # a kernel as make lab starts it (here a stand-in checkout): in notebooks/, with the base folder in its env
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    monkeypatch.setenv("ISLANDS_KIT_BASE_DIR", str(tmp_path))
    assert resolve_out_dir("", get_preset("two_site", "smoke")) == tmp_path.resolve() / "runs" / "two_site-smoke-s0"
    assert resolve_out_dir("runs/mine", "unused") == tmp_path.resolve() / "runs" / "mine"
    assert resolve_out_dir(tmp_path / "elsewhere", "unused") == tmp_path.resolve() / "elsewhere"  # absolute: as given
    assert not (tmp_path / "notebooks" / "runs").exists()


def test_comparison_report_refuses_unequal_tokens(tmp_path):
    base = {"experiment": "baseline", "seed": 0, "preset": "smoke", "tokens": 100, "final_val_bpb": 4.0,
            "cross_site_bytes": 1000, "ddp_equivalent_bytes": 1000, "sim_wall_clock_s": 1.0, "compute_utilization": 0.5}
    other = dict(base, experiment="two_site", cross_site_bytes=10, final_val_bpb=4.4)
    rows, text = comparison_report([base, other], tmp_path)
    assert rows[1]["x_fewer_bytes"] == 100 and abs(rows[1]["bpb_vs_ref"] - 1.1) < 1e-12
    assert json.loads((tmp_path / "compare.json").read_text()) == rows
    # the printed table fits 100 columns; the file holds every column (the same as `compare --wide`)
    assert max(map(len, text.splitlines())) <= 100
    from islands_kit.compare import report

    assert (tmp_path / "compare.txt").read_text().strip() == report([base, other], wide=True)[2]
    md = (tmp_path / "compare.md").read_text()
    assert md.startswith("smoke: a plumbing check, not a result") and "\n| run | experiment |" in md
    assert (tmp_path / "compare.csv").read_text().startswith("run,experiment,")
    with pytest.raises(ValueError, match="token budget: the runs differ"):
        comparison_report([base, dict(other, tokens=200)], tmp_path)


def test_make_lab_lists_each_notebook_once(tmp_path):
    """JupyterLab listed every notebook twice (NAME.ipynb and its jupytext NAME.py): make lab's server config hides a
    .py beside an .ipynb of the same name, and nothing else. Read here as Jupyter reads it (a config file run with
    ``get_config``), over a stand-in for the server's contents manager."""
    import asyncio
    import types

    printed = subprocess.run(["make", "-n", "lab", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    config_file = re.search(r'--config="([^"]+)"', printed)
    assert config_file and Path(config_file.group(1)) == ROOT / "scripts" / "jupyter_server_config.py"

    class Listing:  # the server's AsyncLargeFileManager: a folder's model lists its entries
        def __init__(self, names: list[str]) -> None:
            self.names = names

        async def get(self, path, content=True, type=None, format=None, require_hash=False):
            if path.endswith(".py"):
                return {"type": "file", "name": path, "content": "x = 1"}
            return {"type": "directory", "content": [{"name": n, "type": "file"} for n in self.names]}

    module = types.ModuleType("jupyter_server.services.contents.largefilemanager")
    module.AsyncLargeFileManager = Listing  # type: ignore[attr-defined]
    config = types.SimpleNamespace(ServerApp=types.SimpleNamespace())
    saved = {k: sys.modules.get(k) for k in ("jupyter_server", "jupyter_server.services",
                                             "jupyter_server.services.contents", module.__name__)}
    try:
        for name in saved:
            sys.modules[name] = module if name == module.__name__ else types.ModuleType(name)
        namespace = {"get_config": lambda: config}
        exec(compile(Path(config_file.group(1)).read_text(), "jupyter_server_config.py", "exec"), namespace)
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
    manager_class = config.ServerApp.contents_manager_class
    names = sorted(q.name for q in NOTEBOOK_DIR.iterdir())
    listed = asyncio.run(manager_class(names).get("notebooks"))["content"]
    shown = [m["name"] for m in listed]
    for nb in NOTEBOOK_DIR.glob("*.ipynb"):
        assert nb.name in shown and f"{nb.stem}.py" not in shown  # each notebook once
    assert set(names) - set(shown) == {f"{q.stem}.py" for q in NOTEBOOK_DIR.glob("*.ipynb")}  # nothing else hidden
    alone = asyncio.run(manager_class(["compare.py", "tour.ipynb", "tour.py", "README.md"]).get("islands_kit"))
    assert [m["name"] for m in alone["content"]] == ["compare.py", "tour.ipynb", "README.md"]
    assert asyncio.run(manager_class([]).get("notebooks/tour.py"))["content"] == "x = 1"  # still opens by path


def test_path_parameters_are_read_from_the_callers_folder(tmp_path, monkeypatch):
    """The kernel runs in the output folder: ``-p baseline_dir runs/...`` (the orbital notebook's own command) must
    mean the caller's runs/..., for every parameter that names a path, before any kernel starts."""
    from islands_kit.notebooks import notebook_parameters, path_kind, resolve_path_parameters

    kinds = {name: {k: path_kind(k) for k in notebook_parameters(name) if path_kind(k)}
             for name in sorted(q.stem for q in NOTEBOOK_DIR.glob("*.ipynb"))}
    assert kinds["orbital"] == {"out_dir": "out", "corpus": "corpus", "baseline_dir": "dir", "study_file": "file"}
    assert kinds["two_site"] == {"out_dir": "out", "corpus": "corpus", "frontier_file": "file"}
    assert kinds["scaling"] == {"out_dir": "out"} and all("out_dir" in k for k in kinds.values())
    (tmp_path / "runs" / "base").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("text")
    (tmp_path / "points.json").write_text("[]")
    got = resolve_path_parameters("orbital", {"baseline_dir": "runs/base", "out_dir": "out", "corpus": "data/*.txt",
                                              "preset": "runs/base"}, tmp_path)
    assert got == {"baseline_dir": str(tmp_path.resolve() / "runs" / "base"), "out_dir": str(tmp_path.resolve() / "out"),
                   "corpus": str(tmp_path.resolve() / "data" / "*.txt"), "preset": "runs/base"}  # preset: no path
    kept = {"corpus": "shakespeare", "frontier_file": "benchmarks/frontier-demo.json"}  # a registered name, a resource
    assert resolve_path_parameters("two_site", kept, tmp_path) == kept
    assert resolve_path_parameters("two_site", {"frontier_file": "points.json"}, tmp_path) == {
        "frontier_file": str(tmp_path.resolve() / "points.json")}
    with pytest.raises(ConfigError, match=r"^baseline_dir: .*runs/nope is no folder \(notebook orbital; a relative path"):
        resolve_path_parameters("orbital", {"baseline_dir": "runs/nope"}, tmp_path)
    # run_notebook resolves them before the kernel starts (in the output folder)
    seen = {}
    monkeypatch.setattr("islands_kit.notebooks.runner._execute",
                        lambda name, src, dst, params, cwd, kernel, stream: seen.update(params=params, cwd=cwd))
    monkeypatch.chdir(tmp_path)
    run_notebook("orbital", {"preset": "smoke", "baseline_dir": "runs/base"}, "nb-out")
    assert seen["cwd"] == tmp_path.resolve() / "nb-out"
    assert seen["params"]["baseline_dir"] == str(tmp_path.resolve() / "runs" / "base")
    assert seen["params"]["out_dir"] == str(tmp_path.resolve() / "nb-out")


def test_notebooks_follow_the_presets_wandb_mode_as_the_cli_does(tmp_path):
    """docs/cli.md: the smoke preset turns wandb off, every other preset logs offline. The notebooks' wandb_mode
    defaults to the preset's (None), so a smoke notebook leaves no wandb run either; a value given still wins."""
    from islands_kit.notebooks import notebook_parameters

    declared = {n: notebook_parameters(n).get("wandb_mode", "-") for n in ("baseline", "two_site", "eight_cell",
                                                                             "orbital", "compare")}
    assert declared == dict.fromkeys(declared, None)
    for exp in ("baseline", "two_site", "orbital"):
        assert notebook_config(exp, "smoke", 0, 0, {"wandb_mode": None}).wandb_mode == "disabled"
        assert notebook_config(exp, "demo", 0, 0, {"wandb_mode": None}).wandb_mode == "offline"
        assert notebook_config(exp, "smoke", 0, 0, {"wandb_mode": "offline"}).wandb_mode == "offline"
    shared, _ = comparison_setup(["baseline", "two_site"], "smoke", 0, 0, "shakespeare", "transpacific-25g", None,
                                 "p", "", tmp_path / "c")
    assert shared["wandb_mode"] == "disabled"  # the comparison's own wandb run follows the same rule


def test_a_notebook_dry_run_refuses_a_missing_folder_before_any_kernel(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["notebook", "orbital", "-p", "preset", "smoke", "-p", "baseline_dir", "runs/none",
                     "--dry-run"]) == 2
    assert "baseline_dir: " in capsys.readouterr().err and not (tmp_path / "runs").exists()


@pytest.mark.slow  # starts a kernel
def test_a_notebook_dry_run_validates_through_its_own_cell_and_trains_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["notebook", "two_site", "-p", "preset", "smoke", "--out", "runs/nb", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "experiment two_site | preset smoke" in out and "sync: streaming DiLoCo" in out
    assert f"dry run: valid; notebook two_site would write {tmp_path.resolve() / 'runs/nb/two_site.ipynb'}" in out
    assert not (tmp_path / "runs").exists()  # nothing trained, no folder left behind
    assert cli.main(["notebook", "two_site", "-p", "preset", "smoke", "-p", "H", "0", "--dry-run"]) == 2
    assert "sync.H: must be >= 1 (got 0)" in capsys.readouterr().err  # the validation cell's own refusal


# ---- tour helpers ----------------------------------------------------------------------------------------------


def test_the_tours_plain_pytorch_diloco_equals_the_kits(tmp_path):
    """The tour's section 5 (a two-replica DiLoCo in plain PyTorch: outer gradients, int4 with stochastic rounding and
    error feedback, the Nesterov outer step) and the kit's sync/diloco.py on the same replicas: the same global
    parameters and residuals, bit for bit, every round (the notebook's own cells, run here in-process)."""
    cells = [c.partition("\n") for c in (ROOT / "notebooks" / "tour.py").read_text().split("\n# %%")[1:]]
    code = [body for marker, _, body in cells if "[markdown]" not in marker]
    section = [body for body in code if "int4_stochastic" in body or "tour.kit_diloco" in body]
    assert len(section) == 2, "the tour's DiLoCo section moved"
    ns: dict = {"tour": tour}  # what the set-up cell imports for this section
    exec(code[0], ns)  # the parameters cell
    ns.update(out_dir=str(tmp_path), diloco_rounds=2)
    for body in section:
        exec(body, ns)
    assert ns["same"] == [True, True]
    assert ns["residual"][0].abs().max() > 0  # 4 bits lost something, and error feedback carries it


def ngram_reference(train: bytes, val: bytes, order: int, alpha: float) -> float:
    """Plain dictionaries, one byte at a time."""
    pair, ctx = {}, {}
    for i in range(order, len(train)):
        c = train[i - order:i]
        pair[(c, train[i])] = pair.get((c, train[i]), 0) + 1
        ctx[c] = ctx.get(c, 0) + 1
    bits = [-math.log2((pair.get((val[i - order:i], val[i]), 0) + alpha) / (ctx.get(val[i - order:i], 0) + 256 * alpha))
            for i in range(order, len(val))]
    return sum(bits) / len(bits)


@pytest.mark.parametrize("order", [0, 1, 2])
def test_ngram_bpb_matches_plain_counting(order):
    rng = np.random.default_rng(order)
    train = bytes(rng.choice(np.frombuffer(b"abcde \n", np.uint8), 3000).tolist())
    val = bytes(rng.choice(np.frombuffer(b"abcdef \n", np.uint8), 500).tolist())  # 'f' never seen in training
    assert tour.ngram_bpb(train, val, order) == pytest.approx(ngram_reference(train, val, order, 0.5), rel=1e-12)
    with pytest.raises(ConfigError, match="order"):
        tour.ngram_bpb(train, val, 7)


def test_routing_example_balance_score_improves_while_real_load_worsens():
    states = tour.routing_example(n_tokens=4096, n_experts=4, seed=0)
    conf, hes = states["confident router"], states["hesitant router"]
    assert hes["balance_loss"] < conf["balance_loss"]
    assert hes["max_over_mean"] > 1.5 * conf["max_over_mean"]
    for s in states.values():  # the score is E * sum f_e P_e, and max/mean is read off the load fractions
        f, P = s["load_fraction"], s["mean_prob"]
        assert s["balance_loss"] == pytest.approx(4 * float((f * P).sum()), rel=1e-5)
        assert s["max_over_mean"] == pytest.approx(float(f.max() * 4), rel=1e-5)


def test_butterfly_mixing_reaches_uniform_after_log2_rounds():
    mats = tour.butterfly_mixing(8)
    assert len(mats) == 3
    *partial, last = mats.values()
    np.testing.assert_allclose(last.numpy(), np.full((8, 8), 1 / 8), atol=1e-15)
    assert all((m.numpy() == 0).any() for m in partial)  # not every cell reached before the last round


def test_link_durations_no_noise_equals_the_closed_form():
    d, ideal = tour.link_durations("transpacific-25g", 8 << 20, 5, jitter_sigma=0.0, tail_prob=0.0, loss_prob=0.0)
    for method in ("naive", "chunked"):
        np.testing.assert_allclose(d[method], ideal, rtol=1e-9)


# ---------------------------------------------------------------------------------------------------------------
# Executed for real


def stream_text(path: Path, name: str = "stdout") -> list[str]:
    """The ``name`` stream outputs of an executed notebook, one string per code cell."""
    nb = nbformat.read(path, as_version=4)
    return ["".join(o.text for o in c.outputs if o.output_type == "stream" and o.name == name)
            for c in nb.cells if c.cell_type == "code"]


PROGRESS_LINE = re.compile(r"\[(\w+) s0\] step (\d+)/24 \(\d+%\) \| [\d.]+k? tokens \| [\d,]+ tok/s \| ETA [\dms.]+ \| "
                           r"train [\d.]+ bpb \([\d.]+ nats\)( \| val (\d\.\d{3}) bpb @(\d+))?$")


@pytest.mark.slow
def test_hierarchical_notebook_runs_at_smoke_and_draws_the_two_level_schedule(tmp_path):
    """Not in the compare notebook (its row is out of the default comparison): run on its own, with its H1 knob."""
    out = tmp_path / "hier"
    executed = run_notebook("hierarchical", {"preset": "smoke", "seed": 0, "wandb_mode": "disabled", "site_every": 4},
                            out)
    res = load_run(out)["result"]
    h = res["hierarchical"]
    assert res["experiment"] == "hierarchical" and (h["site_every"], h["site_syncs"]) == (4, 24 // 4)
    assert h["site_bytes"] == res["ledger"]["channels"]["site"]["bytes"] > h["wan_bytes"] > 0
    for png in EXPERIMENT_PNGS + ("hierarchical_schedule.png",):
        assert_png(out / png)
    text = "".join(stream_text(executed))
    assert f"site link: 6 H1 syncs, {h['site_bytes']:,} bytes" in text and f"WAN:       {h['wan_syncs']} fragment syncs" in text
    assert f"site links {h['site_link_bytes']:,}, WAN {h['wan_link_bytes']:,}" in text
    # the recorded H1 sweep, rendered from its JSON (the table RESULTS.md holds)
    sweep = json.loads((ROOT / "benchmarks" / "hierarchical-h1.json").read_text())
    assert render(sweep) in text and "| hierarchical H1=1 |" in text
    assert not any(stream_text(executed, "stderr")), stream_text(executed, "stderr")


@pytest.mark.slow
def test_compare_notebook_runs_the_three_experiments(tmp_path):
    out = tmp_path / "demo"
    executed = run_notebook("compare", {"preset": "smoke", "seed": 0, "wandb_mode": "disabled",
                                        "overrides": {"progress": True}}, out)
    assert executed == out / "compare.ipynb" and executed.is_file()
    # progress: each experiment notebook's training cell holds its live lines (step, tokens, tok/s, ETA, latest
    # eval bpb) and the compare notebook, which streams them, holds them too, between a start and an end line per run
    compare_out = "".join(stream_text(executed))
    for i, exp in enumerate(("baseline", "two_site", "eight_cell")):
        train_cell = next(t for t in stream_text(out / exp / f"{exp}.ipynb") if f"[{exp} s0] start" in t)
        lines = [m for m in map(PROGRESS_LINE.match, train_cell.splitlines()) if m]
        assert len(lines) >= 5 and lines[-1].group(2) == "24", train_cell
        evals = [(int(m.group(5)), float(m.group(4))) for m in lines if m.group(3)]
        hist = [json.loads(x) for x in (out / exp / "history.jsonl").read_text().splitlines()]
        assert evals[-1] == (24, round(hist[-1]["val_bpb"], 3))  # the latest eval bpb, in bits per byte
        assert f"[{exp} s0] done in" in train_cell
        assert f"=== [{i + 1}/3] {exp}: notebooks/{exp}.ipynb" in compare_out and f"=== [{i + 1}/3] {exp} done in" in compare_out
        assert all(m.group(0) in compare_out for m in lines)
        # no kernel noise (its own log, warnings) in any output cell
        assert not any(stream_text(out / exp / f"{exp}.ipynb", "stderr")), stream_text(out / exp / f"{exp}.ipynb", "stderr")
    assert not any(stream_text(executed, "stderr")), stream_text(executed, "stderr")
    assert "wandb: disabled" in compare_out
    results = {}
    for exp in ("baseline", "two_site", "eight_cell"):
        d = out / exp
        assert (d / f"{exp}.ipynb").is_file()  # the executed experiment notebook is kept beside its result
        run = load_run(d)
        res = results[exp] = run["result"]
        assert set(RESULT_KEYS) <= set(res)
        assert res["experiment"] == exp and res["preset"] == "smoke" and res["seed"] == 0
        # the notebook reports exactly what run_experiment does for the same config: the golden smoke figure (one
        # thread both ways), which is well below a uniform predictor's 8 bpb
        fixture = json.loads((GOLDEN / f"{exp}.smoke.json").read_text())
        assert same_number(fixture, fixture["final_val_bpb"], res["final_val_bpb"], measured_rtol(GOLDEN)) and res["final_val_bpb"] < 7.0
        assert re.fullmatch(r"compare-smoke-\d{8}-\d{6}", res["config"]["wandb_group"])
        assert len(run["history"]) >= 1 and run["history"][-1]["final"] is True
        for png in EXPERIMENT_PNGS:
            assert_png(d / png)
    assert_png(out / "two_site" / "fragment_timeline.png")
    # the two_site notebook's decoupled section: site B a 2x straggler for 2 windows of H=8, lock-step vs decoupled
    assert_png(out / "two_site" / "decoupled_clocks.png")
    lock, dec = (load_run(out / "two_site" / "decoupled" / m)["result"] for m in ("lockstep", "decoupled"))
    assert (lock["sync_mode"], dec["sync_mode"]) == ("lockstep", "decoupled") and "decoupled" not in lock
    assert lock["inner_steps"] == {"0": 16, "1": 16} and dec["inner_steps"] == {"0": 32, "1": 16}
    assert dec["tokens"] > lock["tokens"] and dec["goodput"] > lock["goodput"]
    assert len(dec["decoupled"]["merges"]) >= 8  # one per fragment turn over 32 ticks (P=2, H=8), then the flush
    section = next(t for t in stream_text(out / "two_site" / "two_site.ipynb")  # the decoupled section's cell
                   if "two_site side runs" in t).splitlines()
    head = next(i for i, line in enumerate(section) if line.split()[:3] == ["run", "inner", "steps"])
    assert section[head + 1].split()[:6] == ["lockstep", "site-a", "16,", "site-b", "16", f"{lock['tokens']:,}"]
    assert section[head + 2].split()[:6] == ["decoupled", "site-a", "32,", "site-b", "16", f"{dec['tokens']:,}"]
    assert_png(out / "two_site" / "utilisation_vs_bandwidth.png")  # the published tables' section, no training
    assert_png(out / "eight_cell" / "butterfly_timeline.png")
    assert len({r["tokens"] for r in results.values()}) == 1  # equal total training tokens
    assert len({r["config"]["wandb_group"] for r in results.values()}) == 1  # one group for the comparison
    assert results["two_site"]["cross_site_bytes"] < results["baseline"]["cross_site_bytes"]
    for png in ("compare.png", "compare_bpb_vs_sim_time.png", "compare_link_bytes.png", "compare_summary.png"):
        assert_png(out / png)
    rows = json.loads((out / "compare.json").read_text())
    assert [r["experiment"] for r in rows] == ["baseline", "two_site", "eight_cell"]
    assert rows[1]["final_val_bpb"] == results["two_site"]["final_val_bpb"]
    # the README's second command reads the same folders
    assert cli.main(["compare", str(out / "baseline"), str(out / "two_site"), str(out / "eight_cell")]) == 0


def first_error_cell(path: Path) -> int:
    """Index, among the code cells of an executed notebook, of the first one that raised."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, c in enumerate(code):
        if any(o.get("output_type") == "error" for o in c.get("outputs", [])):
            assert all(d.execution_count is None for d in code[i + 1:])  # nothing ran after it
            return i
    raise AssertionError("no cell failed")


@pytest.mark.slow
def test_bad_parameter_stops_in_the_validation_cell(tmp_path):
    with pytest.raises(ConfigError, match=r"sync\.codec: must be one of .*\(got 'int3'\)"):
        run_notebook("eight_cell", {"preset": "smoke", "codec": "int3"}, tmp_path)
    # code cells: parameters, injected parameters, validation
    assert first_error_cell(tmp_path / "eight_cell.ipynb") == 2
    assert not (tmp_path / "result.json").exists()
    # the notebook's `delay` parameter is the butterfly's merge delay, sync.tau
    with pytest.raises(ConfigError, match=r"^sync\.tau: must satisfy 0 <= tau < sync\.H=8 \(got 8\)"):
        run_notebook("eight_cell", {"preset": "smoke", "delay": 8}, tmp_path)


@pytest.mark.slow  # starts a papermill kernel
def test_cli_notebook_reports_a_bad_parameter(tmp_path, capsys):
    assert cli.main(["notebook", "two_site", "-p", "preset", "smoke", "-p", "H", "0", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "sync.H: must be >= 1 (got 0)" in err and "two_site" in err
    assert first_error_cell(tmp_path / "two_site.ipynb") == 2


@pytest.mark.slow  # starts a papermill kernel
def test_cli_notebook_runs_the_tour_and_keeps_the_executed_copy(tmp_path, capsys):
    argv = ["notebook", "tour", "-p", "tiny_steps", "10", "-p", "race_steps", "30", "-p", "n_transfers", "40",
            "-p", "sample_steps", "4",
            "-p", "links", '["intra-dc", "leo-satellite"]', "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    assert "executed notebook" in capsys.readouterr().out
    nb = nbformat.read(tmp_path / "tour.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    injected = next(c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert 'links = ["intra-dc", "leo-satellite"]' in injected.source and "tiny_steps = 10" in injected.source
    # the sampling section printed the model it loaded and its samples
    sampled = "".join(o.get("text", "") for o in code[-1]["outputs"] if o.get("output_type") == "stream")
    assert "deployed model of two_site after step 4" in sampled and "--- greedy\nROMEO:" in sampled
    # the plain-PyTorch DiLoCo section ran under papermill and agreed with the kit's
    printed = "".join(o.get("text", "") for c in code for o in c["outputs"] if o.get("output_type") == "stream")
    assert "global parameters and residuals equal bit for bit in 3 of 3 rounds" in printed
    assert (tmp_path / "sample_run" / "model.pt").is_file()
    for png in ("tour_bpb_ladder.png", "tour_routing_states.png", "tour_balance_vs_load.png",
                "tour_shampoo_vs_adam.png", "tour_fragment_timeline.png", "tour_butterfly_timeline.png",
                "tour_mixing_matrices.png", "tour_link_tails_intra-dc.png", "tour_link_tails_leo-satellite.png"):
        assert_png(tmp_path / png)


@pytest.mark.slow  # starts a papermill kernel and trains for seconds
def test_cli_notebook_runs_orbital_at_smoke_against_a_baseline(tmp_path, capsys, monkeypatch):
    """The notebook's own documented command, relative paths and all, from the folder the user is in (the kernel runs
    in the output folder: the baseline was not found there)."""
    from islands_kit.run import run_experiment

    monkeypatch.chdir(tmp_path)
    run_experiment(get_preset("baseline", "smoke"), "runs/baseline-smoke-s0")
    # a study report of the shape `islands-kit study report` writes (made up here: two rows, one of them resolved)
    units = {"seeds": [0, 1, 2], "orbital_days": [8.1, 8.2, 8.0], "tokens": [48000] * 3,
             "ground_link_bytes": [10**6] * 3, "isl_bytes": [0] * 3, "ground_baseline_days": [7e-4] * 3,
             "days_to_baseline_quality": {"text": "not reached in 8 days"}}
    rows = [{"kind": "row", "row": "(i) ground", "control": "baseline", "machine": "m", "tokens": [48000] * 3,
             "vs_control": {"ratio_mean": 1.02, "ratio_ci95": [1.01, 1.03], "ratio_n": 3}, "vs_ref": None},
            {"kind": "row", "row": "(iii) ground passes only", "control": "(i) ground", "machine": "m",
             "vs_control": {"ratio_mean": 1.01, "ratio_ci95": [0.99, 1.03], "ratio_n": 3},
             "vs_ref": {"ratio_mean": 1.03, "ratio_ci95": [1.01, 1.05], "ratio_n": 3}, "orbit_units": units}]
    (tmp_path / "study.json").write_text(json.dumps({"entries": rows}))
    assert cli.main(["notebook", "orbital", "-p", "preset", "smoke", "-p", "isl", "True", "-p", "baseline_dir",
                     "runs/baseline-smoke-s0", "-p", "study_file", "study.json", "--out", "runs/orbital"]) == 0
    assert "executed notebook" in capsys.readouterr().out
    out = tmp_path / "runs" / "orbital"
    res = json.loads((out / "result.json").read_text())
    assert res["experiment"] == "orbital" and res["orbit"]["isl"] is True and res["orbit"]["windows_used"] > 0
    for png in ("contact_windows.png", "bpb_vs_tokens.png", "decoupled_clocks.png", "compare.png",
                "orbital_effects.png"):
        assert_png(out / png)
    printed = "".join(stream_text(out / "orbital.ipynb"))
    assert "transfers waited" in printed and "bpb / baseline: over the baseline run with the same seed" in printed
    assert "(i) ground: vs baseline 1.0200x [1.0100, 1.0300], n=3: worse; vs the baseline no paired seeds" in printed
    assert "(iii) ground passes only: vs (i) ground 1.0100x [0.9900, 1.0300], n=3: not resolved" in printed
    assert "8.1 days of orbit for 48,000 tokens" in printed and "not reached in 8 days" in printed
    assert "window wait s" in (out / "compare.txt").read_text()  # every column in the file


@pytest.mark.slow
def test_other_errors_in_a_notebook_are_one_line(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(NotebookError, match=r"^FileExistsError: .*\[notebook compare, cell \d+; executed copy: "):
        run_notebook("compare", {"preset": "smoke", "out_dir": str(blocker)}, tmp_path / "x")
    assert cli.main(["notebook", "compare", "-p", "preset", "smoke", "-p", "out_dir", str(blocker),
                     "--out", str(tmp_path / "y")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "FileExistsError" in err and "compare.ipynb" in err


def test_comparison_jobs_rule():
    from islands_kit.notebooks.comparison import comparison_jobs

    assert comparison_jobs(1, 3) == 1 and comparison_jobs(5, 3) == 3 and comparison_jobs(2, 9) == 2
    assert 1 <= comparison_jobs(0, 9) <= 9 and comparison_jobs(0, 1) == 1
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="jobs: must be an integer >= 0"):
            comparison_jobs(bad, 3)


@pytest.mark.slow
def test_side_by_side_runs_equal_runs_in_turn(tmp_path):
    """jobs > 1 runs each notebook in its own process with one torch thread: the same numbers as one-thread runs one
    after another, and a run that fails names itself in one line."""
    from islands_kit.notebooks.comparison import comparison_setup, run_comparison

    exps = ["baseline", "two_site"]
    shared, _ = comparison_setup(exps, "smoke", 0, 0, "shakespeare", "transpacific-25g", "disabled", "p", "g",
                                 tmp_path, {"threads": 1})
    apart = run_comparison(exps, shared, tmp_path / "apart", jobs=2)
    turn = run_comparison(exps, shared, tmp_path / "turn", jobs=1)
    for exp in exps:
        a, b = (load_run(d[exp])["result"] for d in (apart, turn))
        assert a["val_curve"] == b["val_curve"] and a["ledger"] == b["ledger"]  # bit for bit
    with pytest.raises(NotebookError, match=r"^baseline: notebooks/baseline.ipynb failed .*no-such-kernel"):
        run_comparison(exps, shared, tmp_path / "bad", kernel_name="no-such-kernel", jobs=2)


def test_scaling_notebook_runs_the_smoke_studies_and_draws_the_trend(tmp_path):
    """At smoke the notebook runs the two smoke scaling studies in-process, fits them and draws the panels beside
    the published grid; a second run reuses every finished run."""
    nb = run_notebook("scaling", {"preset": "smoke"}, tmp_path)
    assert_png(tmp_path / "scaling_trend.png")
    text = "".join(o.get("text", "") for c in nbformat.read(nb, as_version=4).cells for o in c.get("outputs", []))
    assert "scaling-size-smoke: 12 runs made" in text and "scaling-length-smoke: 12 runs made" in text
    assert "| M=2 | 19.088, -0.0978 | 18.768, -0.0969 |" in text  # this kit's fit to the published losses, theirs
    rows = [ln for ln in text.splitlines() if "| two_site |" in ln and ln.count("|") == 17]
    assert len(rows) == 6  # three sizes and three lengths, each with its paired ratio
    again = run_notebook("scaling", {"preset": "smoke"}, tmp_path)
    text = "".join(o.get("text", "") for c in nbformat.read(again, as_version=4).cells for o in c.get("outputs", []))
    assert "scaling-size-smoke: 0 runs made" in text


def test_run_comparison_says_its_runs_go_side_by_side_and_names_the_side_runs(monkeypatch, tmp_path, capsys):
    """With jobs > 1 the runs start together, so their === headers came together with no word why; and two_site's
    notebook also trains two side runs, which no line mentioned."""
    from islands_kit.notebooks import comparison

    monkeypatch.setattr(comparison, "_run_child", lambda *a, **k: None)
    monkeypatch.setattr(comparison, "load_result", lambda d: {"final_val_bpb": 2.0})
    comparison.run_comparison(["baseline", "two_site"], {"seed": 0, "overrides": {}}, tmp_path, jobs=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("=== 2 runs, 2 at a time side by side, one torch thread each; each starts with its === line, "
                        "and their progress lines interleave, each labelled")
    (two_site,) = [line for line in lines if line.startswith("=== [2/2] two_site: ")]
    assert two_site.endswith("(then two short side runs: lock-step vs decoupled islands beside a slow site B, in "
                             "two_site/decoupled/)")
    (baseline,) = [line for line in lines if line.startswith("=== [1/2] baseline: ")]
    assert "side runs" not in baseline
