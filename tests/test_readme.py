"""The README stays true: its quickstart output is what the command prints, its links lead somewhere, its commands
exist, and the reference it points to lives in docs/."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from islands_kit import cli
from islands_kit.protocol import readme

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def block(marker: str) -> str:
    """The fenced block between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    m = re.search(rf"<!-- {marker} -->\n```\n(.*?)```\n<!-- /{marker} -->", README, re.S)
    assert m, f"README: no {marker} block"
    return m.group(1)


@pytest.mark.slow
def test_quickstart_output_is_what_the_smoke_run_prints(tmp_path, monkeypatch, capsys):
    cmd = re.search(r"^islands-kit (run two_site --preset smoke)\s", README, re.M)
    assert cmd, "README: the quickstart command moved"
    monkeypatch.chdir(tmp_path)
    # the command exactly as the README shows it, in a process whose torch would use two threads: the promised
    # numbers are the one-thread numbers, so the run itself must choose one thread
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert cli.main(shlex.split(cmd.group(1))) == 0
    finally:
        torch.set_num_threads(before)
    assert capsys.readouterr().out == block("quickstart-output")
    assert json.loads((tmp_path / "runs/two_site-smoke-s0/result.json").read_text())["versions"]["torch_threads"] == 1


@pytest.mark.slow
def test_smoke_sample_is_what_sample_prints(tmp_path, monkeypatch, capsys):
    cmd = re.search(r"`islands-kit (sample runs/two_site-smoke-s0 [^`]*)`", README)
    assert cmd, "README: the smoke sample command moved"
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "two_site", "--preset", "smoke", "--set", "threads=1"]) == 0
    capsys.readouterr()
    assert cli.main(shlex.split(cmd.group(1))) == 0
    assert capsys.readouterr().out == block("smoke-sample")


@pytest.mark.parametrize("target", sorted(set(re.findall(r"\]\(([^)#]+)\)", README))))
def test_links_lead_to_files(target):
    assert (ROOT / target).exists(), target


def test_make_test_ends_with_pytests_summary_line():
    """pyproject's addopts already pass -q; one more (-qq) silences "N passed in Xs", the line a user waits for."""
    addopts = re.search(r'^addopts\s*=\s*"([^"]*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    calls = [line for line in (ROOT / "Makefile").read_text().splitlines() if "-m pytest" in line]
    assert calls
    for line in calls:
        quiet = shlex.split(addopts).count("-q") + shlex.split(line.split("-m pytest", 1)[1]).count("-q")
        assert quiet <= 1, f"{line.strip()}: -q {quiet} times with addopts {addopts!r}"


def test_make_targets_named_in_the_readme_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in sorted(set(re.findall(r"^make (\w+)", README, re.M))):
        assert re.search(rf"^{target}:", makefile, re.M), f"Makefile has no {target} target"


def test_reference_lives_in_docs_and_the_readme_says_what_smoke_is():
    assert "plumbing check" in README and "Bits per byte" in README and "notebooks/tour.ipynb" in README
    assert "turns wandb off" in README
    threat = (ROOT / "docs" / "threat-model.md").read_text()
    assert "Not defended: the rendezvous" in threat and "Threat model" not in README.split("## Documentation")[0]


def test_the_result_tables_are_rendered_from_their_json():
    """The headline and the demo's own numbers are the rendering of the JSON they quote (re-made by
    ``python -m islands_kit.protocol.readme``), never edited by hand."""
    for name, text in readme.blocks(ROOT).items():
        m = re.search(rf"<!-- {name}:begin -->\n(.*?)\n<!-- {name}:end -->", README, re.S)
        assert m, f"README: no {name} block"
        assert m.group(1) == text, f"README's {name} block is not the rendering of its JSON"
    assert "1.0272 [1.0211, 1.0334], behind" in README  # the demo's two_site, 3 paired seeds


def test_the_headline_quotes_one_machine_and_every_ratio_with_its_interval():
    doc = json.loads((ROOT / readme.HEADLINE).read_text())
    table = readme.headline_table(doc)
    chosen = readme.headline_machine(doc)
    quoted = [m["machine"] for m in doc["machines"] if m["fingerprint"] in table]
    assert quoted == [chosen]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| arm")]
    done = [e for e in doc["entries"] if e.get("kind") == "arm" and e["machine"] == chosen and e["status"] == "done"]
    assert len(rows) == len(done)  # one row per finished arm
    ratios = [r for r in rows if "(reference)" not in r]
    assert ratios and all(len(re.findall(r"\d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\], ", r)) == 2 for r in ratios), rows
    # the machine with the most finished arms is the one quoted
    other = dict(doc, entries=[e for e in doc["entries"] if e.get("machine") != chosen or e.get("arm") == "baseline"])
    assert readme.headline_machine(other) != chosen
    with pytest.raises(ValueError, match="no arm has finished"):
        readme.headline_table(dict(doc, entries=[dict(e, status="0/5 seeds") for e in doc["entries"]]))


def test_commands_work_as_printed_after_the_one_activation():
    """The README says once, before its first bare command, how to put the kit on PATH; every command after it
    (and every hint the kit prints: ``islands-kit ...``, ``wandb sync ...``) is bare."""
    activate = README.index("source .venv/bin/activate")
    first_bare = re.search(r"^islands-kit |`islands-kit ", README, re.M)
    assert first_bare and activate < first_bare.start()
    assert README.count("source .venv/bin/activate") == 1
    assert ".venv/bin/islands-kit run" not in README.split("## Two commands")[1]
    # the kit's own hints are bare too, and make install's closing hint activates before its first bare command
    assert not [f for f in (ROOT / "islands_kit").rglob("*.py") if ".venv/bin/" in f.read_text()]
    hint = (ROOT / "scripts" / "setup.sh").read_text().split("next:", 1)[1]
    assert hint.index("source $BIN/activate") < hint.index("islands-kit run")


def test_the_demo_table_pairs_every_arm_with_the_same_baseline_runs():
    points = readme.default_points(ROOT)
    assert [p["experiment"] for p in points] == ["two_site", "eight_cell"]
    moved = [points[0], dict(points[1], baseline=dict(points[1]["baseline"], bpb=[2.0, 2.0, 2.0]))]
    with pytest.raises(ValueError, match="other baseline runs"):
        readme.demo_table(moved)
