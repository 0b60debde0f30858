"""Sentences about a config are read from it, or checked against it, so that they cannot drift from what runs: the
run summary's outer step ("Nesterov True, momentum 0.0" said nothing true), the tour's words on the demo's merge (it
said "plainly averages" of a radial-directional demo), and the step counts docs/outputs.md quotes (300 steps, two
demos ago)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from islands_kit.config.experiment_table import EXPERIMENT_TABLE
from islands_kit.config.presets import DEMO_PRESETS, get_preset
from islands_kit.notebooks import config_summary, tour
from islands_kit.sync.diloco_spec import DiLoCoConfig

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("fields, words", [
    ({"outer_lr": 1.0, "outer_momentum": 0.0}, "outer SGD lr 1, no momentum"),
    ({"outer_lr": 0.7, "outer_momentum": 0.9}, "outer SGD lr 0.7, Nesterov momentum 0.9"),
    ({"outer_lr": 0.7, "outer_momentum": 0.9, "nesterov": False}, "outer SGD lr 0.7, heavy-ball momentum 0.9"),
    ({"outer_lr": 0.5, "outer_momentum": 0.5, "outer_momentum_warmup": 10},
     "outer SGD lr 0.5, Nesterov momentum 0.5 (ramped in over 10 outer steps)"),
])
def test_the_outer_step_in_words(fields, words):
    assert DiLoCoConfig(**fields).outer_step == words


@pytest.mark.parametrize("experiment", list(EXPERIMENT_TABLE))
@pytest.mark.parametrize("preset", ["smoke", *DEMO_PRESETS])
def test_the_run_summary_says_the_outer_step_and_merge_the_config_holds(experiment, preset):
    cfg = get_preset(experiment, preset)
    (sync,) = [line for line in config_summary(cfg).splitlines() if line.startswith("sync: ")]
    assert not re.search(r"Nesterov (True|False)|momentum 0\.0\b", sync)  # no field dumped as it is stored
    if cfg.sync.strategy != "diloco":
        return
    d = cfg.sync.diloco
    assert d.outer_step in sync and d.merge_words in sync
    assert ("no momentum" in sync) == (d.outer_momentum == 0) and ("Nesterov" in sync) == (d.outer_momentum > 0 and d.nesterov)
    assert ("radial-directional" in sync) == (d.average == "radial_directional")


def test_the_tour_prints_the_demos_merge_from_its_config():
    demo = get_preset("two_site", "demo").sync.diloco
    sentence = tour.outer_step_sentence(0.7, 0.9)
    assert f"merged by {demo.merge_words}, then {demo.outer_step}" in sentence
    assert "Nesterov momentum 0.9" in sentence.split(";")[0]
    source = (ROOT / "notebooks" / "tour.py").read_text()
    assert "tour.outer_step_sentence(outer_lr, outer_momentum)" in source
    markdown = "\n".join(line for line in source.splitlines() if line.startswith("#"))
    # the words about the demo's own merge and outer step come from its config, not from the prose
    assert not re.search(r"demo\W+(?:\w+\W+){0,3}(?:plainly |radial|averag|mean\b)", markdown), \
        re.search(r"demo\W+(?:\w+\W+){0,3}(?:plainly |radial|averag|mean\b)", markdown)


def test_outputs_doc_quotes_only_step_counts_the_presets_train():
    """docs/outputs.md walks through a demo run: every step count it names is one a preset trains (the demo's, or
    demo-long's twice that), and its opening command is the demo's."""
    text = " ".join((ROOT / "docs" / "outputs.md").read_text().split())
    steps = {get_preset(e, p).steps for e in EXPERIMENT_TABLE for p in ("smoke", *DEMO_PRESETS)}
    quoted = [int(n.replace(",", "")) for n in re.findall(r"\b(\d[\d,]*)(?:[ -]inner)?[ -]steps?\b", text)]
    assert quoted and all(n in steps for n in quoted), (quoted, sorted(steps))
    opening = re.search(r"`islands-kit run two_site --preset demo[^`]*` trains two replicas for (\d+) inner steps", text)
    assert opening and int(opening.group(1)) == get_preset("two_site", "demo").steps
