"""The hierarchical experiment (sync/hierarchical.py): site syncs mix each site's cells as the settings say, a WAN
sync with a plain outer step lands every cell on the mean of all cells, the byte ledger's two channels hold exactly
what the two levels send (counted here from the schedule and the payload sizes), each link kind prices its own
transfers, one cell a site is two_site to the last bit, and the rules name their fields."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel, link_config
from islands_kit.comm.transport import LocalTransport
from islands_kit.config import ConfigError, apply_overrides, parse_set
from islands_kit.config.experiment_table import SCALING_EXPERIMENTS
from islands_kit.config.presets import get_preset
from islands_kit.model import build_model
from islands_kit.notebooks import EXPERIMENT_NOTEBOOKS, comparison_experiments
from islands_kit.protocol.study import load_study
from islands_kit.run import run_experiment
from islands_kit.sync.base import strided_fragments
from islands_kit.sync.hierarchical import Hierarchical, SiteLinks, site_links
from islands_kit.sync.registry import BuildArgs, link_model
from islands_kit.sync.schedule import fragment_offsets


def _cfg(*sets: str) -> Any:
    return apply_overrides(get_preset("hierarchical", "smoke"), parse_set(list(sets)))


def _strategy(cfg: Any, values: list[torch.Tensor]) -> tuple[Hierarchical, dict[int, nn.Module], LocalTransport]:
    """Eight cells whose replica is one Linear(5, 3) (18 parameters), cell i's parameters ``values[i]``."""
    models = {i: nn.Linear(5, 3) for i in range(8)}
    for i, m in models.items():
        with torch.no_grad():
            m.weight.copy_(values[i][:15].view(3, 5))
            m.bias.copy_(values[i][15:])
    transport = LocalTransport(8, site_links(cfg))
    frags = strided_fragments([["weight"], ["bias"]], {}, cfg.sync.n_fragments)
    return Hierarchical(BuildArgs(cfg, models, transport, frags, 1.0)), models, transport


def _flat(m: nn.Module) -> torch.Tensor:
    return torch.cat([m.weight.detach().reshape(-1), m.bias.detach()])


def _values() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn(18, generator=g) for _ in range(8)]


def test_a_mean_site_sync_gives_every_cell_its_site_mean_and_pairwise_one_partner() -> None:
    v = _values()
    s, models, transport = _strategy(_cfg("sync.hierarchical.site_every=1"), v)
    s.site_sync(1)
    for i in range(8):
        site = range(4 * (i // 4), 4 * (i // 4) + 4)
        assert torch.allclose(_flat(models[i]), torch.stack([v[j] for j in site]).mean(0), atol=1e-6)
        assert torch.equal(_flat(models[i]), _flat(models[4 * (i // 4)]))  # the same bits in every cell of a site
    # two butterfly rounds, each cell sending its whole replica in fp32 over the site link
    assert transport.ledger.bytes("site") == 8 * 2 * 18 * 4 and transport.ledger.bytes("fragments") == 0
    s, models, _ = _strategy(_cfg("sync.hierarchical.site_mode=pairwise"), v)
    s.site_sync(1)  # round 0: cell c with c XOR 1
    assert all(torch.allclose(_flat(models[i]), (v[i] + v[i ^ 1]) / 2, atol=1e-6) for i in range(8))
    s.site_sync(2)  # round 1: cell c with c XOR 2
    assert all(torch.allclose(_flat(models[i]), (v[i] + v[i ^ 1] + v[i ^ 2] + v[i ^ 3]) / 4, atol=1e-6) for i in range(8))


def test_a_wan_sync_with_a_plain_outer_step_puts_every_cell_on_the_mean_of_all_cells() -> None:
    """fp32 on the wire, outer SGD at lr 1 without momentum, α = 0: θ_g ← θ_g − mean(θ_g − θ_i) = mean θ_i. The
    ledger: the reduce-scatter and all-gather send (C − 1) shards of ⌈18 / 4⌉ = 5 values each way inside the sites,
    the WAN one shard per cell."""
    cfg = _cfg("sync.codec=fp32", "sync.tau=0", "sync.H=2", "sync.n_fragments=1", "sync.hierarchical.site_every=99",
               "sync.diloco.outer_lr=1", "sync.diloco.merge=alpha", "sync.diloco.final_codec=fp32")
    v = _values()
    s, models, transport = _strategy(cfg, v)
    s.after_inner_step(2, {i: 10 for i in range(8)})
    mean = torch.stack(v).mean(0)
    for i in range(8):
        assert torch.allclose(_flat(models[i]), mean, atol=1e-6)
        assert torch.equal(_flat(models[i]), _flat(models[0]))  # one Δ̄ for every cell, to the bit
    assert torch.allclose(s.global_params[0].detach(), mean, atol=1e-6) and s.n_outer == [1]
    assert transport.ledger.bytes("site") == 8 * 2 * 3 * 5 * 4
    assert transport.ledger.bytes("fragments") == 8 * 5 * 4
    assert sorted((src, dst) for _, _, _, src, dst, ch in transport.ledger.timeline if ch == "fragments") == \
        sorted((i, (i + 4) % 8) for i in range(8))  # cell c of one site with cell c of the other


@pytest.mark.slow  # one smoke run (seconds)
def test_the_ledger_holds_exactly_what_each_level_sends_and_each_link_times_its_own(tmp_path) -> None:
    cfg = _cfg("threads=1", "sync.hierarchical.site_every=5")
    res = run_experiment(cfg, tmp_path / "run")
    h = res["hierarchical"]
    S, C, T, H, H1 = 2, 4, cfg.steps, cfg.sync.H, 5
    model = build_model(cfg.model)
    params = dict(model.named_parameters())
    frags = strided_fragments(model.block_param_names(), model.extra_param_names(), cfg.sync.n_fragments)
    sizes = [sum(params[n].numel() for n in names) for names in frags]
    # site syncs: every H1 steps, log2 C rounds of the whole replica in fp32 from every cell
    site_syncs = T // H1
    site = site_syncs * S * C * 2 * 4 * sum(sizes)
    wan, wan_syncs = 0, 0
    for n, off in zip(sizes, fragment_offsets(H, cfg.sync.n_fragments)):
        shard = math.ceil(n / C)
        regular = sum(1 for t in range(1, T + 1) if t % H == off)
        flush = 1 if T % H != off else 0  # the final flush of the steps since the last sync (int8)
        wan_syncs += regular + flush
        site += (regular + flush) * S * C * 2 * (C - 1) * shard * 4  # reduce-scatter + all-gather, fp32
        wan += S * C * (regular * get_codec("int4").nbytes(shard) + flush * get_codec("int8").nbytes(shard))
    assert (h["site_syncs"], h["wan_syncs"]) == (site_syncs, wan_syncs)
    assert res["ledger"]["channels"]["site"]["bytes"] == h["site_bytes"] == site
    assert res["ledger"]["channels"]["fragments"]["bytes"] == h["wan_bytes"] == res["fragment_bytes"] == wan
    # each link kind's every byte: the routing statistics' ring all-reduce (cells 0..7 in order) puts an equal share
    # on each of its 8 directed links, 2 of which (3 -> 4, 7 -> 0) cross the WAN
    routing = res["ledger"]["channels"]["routing"]["bytes"]
    assert routing > 0 and routing % 8 == 0
    assert h["wan_link_bytes"] == wan + routing * 2 // 8 and h["site_link_bytes"] == site + routing * 6 // 8
    assert h["site_link_bytes"] + h["wan_link_bytes"] == res["cross_site_bytes"]
    assert res["outer_steps_per_fragment"] == [sum(1 for t in range(1, T + 1) if t % H == o) + (T % H != o)
                                               for o in fragment_offsets(H, cfg.sync.n_fragments)]
    # each link kind on its own model: a site transfer takes about the site link's half round trip, a WAN one at
    # least the WAN's
    ch = res["ledger"]["channels"]
    wan_rtt, site_rtt = cfg.link.rtt_s, link_config("intra-dc").rtt_s
    assert ch["fragments"]["messages"] == S * C * wan_syncs
    assert 0 < h["site_transfer_s"] / ch["site"]["messages"] < 10 * site_rtt < wan_rtt / 100
    assert h["wan_transfer_s"] / ch["fragments"]["messages"] >= wan_rtt / 2
    assert math.isfinite(res["final_val_bpb"]) and [row[0] for row in h["site_sync_times"]] == [5, 10, 15, 20]


@pytest.mark.slow  # two smoke runs (seconds)
def test_one_cell_a_site_is_two_site_to_the_last_bit(tmp_path) -> None:
    base = apply_overrides(get_preset("two_site", "smoke"), parse_set(["threads=1"]))
    two = run_experiment(base, tmp_path / "two")
    hier = run_experiment(apply_overrides(base, parse_set(["sync.strategy=hierarchical",
                                                           "sync.hierarchical.cells_per_site=1"])), tmp_path / "hier")
    assert hier["final_val_bpb"] == two["final_val_bpb"] and hier["val_curve"] == two["val_curve"]
    assert hier["ledger"] == two["ledger"] and hier["sim_wall_clock_s"] == two["sim_wall_clock_s"]
    assert hier["hierarchical"]["site_bytes"] == 0 and hier["hierarchical"]["wan_bytes"] == two["fragment_bytes"]


@pytest.mark.parametrize("sets,match", [
    (["sync.hierarchical.cells_per_site=3"],
     r"^sync\.hierarchical\.cells_per_site: must be a power of two >= 1 \(the site's butterfly rounds\) \(got 3\)"),
    (["sync.hierarchical.site_mode=ring"], r"^sync\.hierarchical\.site_mode: must be one of mean\|pairwise"),
    (["sync.hierarchical.site_every=0"], r"^sync\.hierarchical\.site_every: must be >= 1"),
    (["sync.hierarchical.site_link=lan"], r"^sync\.hierarchical\.site_link: must be one of transpacific-25g\|intra-dc"),
    (["sync.hierarchical.cells_per_site=16"], r"^sync\.hierarchical\.cells_per_site: must divide the 8 islands"),
    (["sync.diloco.average=radial_directional"], r"^sync\.diloco\.average: must be mean with sync\.hierarchical"),
    (["sync.diloco.warm_start_steps=2"], r"^sync\.diloco: eager updates and the warm start are not hierarchical"),
    (["islands.0.batch_size=6", "islands.0.micro_batch_size=6"], r"^islands\[\*\]\.batch_size: must be equal on every cell"),
])
def test_the_rules_name_the_field(sets: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _cfg(*sets).validate()


def test_two_sites_of_one_cell_keep_every_diloco_setting_and_four_sites_of_two_cells_run_rounds() -> None:
    two = apply_overrides(get_preset("two_site", "smoke"), parse_set(["sync.strategy=hierarchical",
                                                                       "sync.hierarchical.cells_per_site=1"]))
    two.validate()  # radial-directional averaging and unequal site batches: DiLoCo's own all-reduce
    cfg = _cfg("sync.hierarchical.cells_per_site=2", "sync.codec=fp32", "sync.tau=0", "sync.H=2", "sync.n_fragments=1",
               "sync.hierarchical.site_every=99", "sync.diloco.outer_lr=1", "sync.diloco.merge=alpha")
    v = _values()
    s, models, transport = _strategy(cfg, v)
    assert (s.S, s.C, len(s.inside), len(s.across)) == (4, 2, 1, 2)
    s.after_inner_step(2, {i: 10 for i in range(8)})
    # fp32 partial means re-encoded without loss: the mean of all eight cells
    assert all(torch.allclose(_flat(models[i]), torch.stack(v).mean(0), atol=1e-6) for i in range(8))
    # two WAN rounds of one ⌈18 / 2⌉ = 9-value shard from every cell
    assert transport.ledger.bytes("fragments") == 2 * 8 * 9 * 4


def test_the_h1_study_loads_and_sweeps_only_h1_at_a_fixed_h2() -> None:
    study = load_study(Path(__file__).parents[1] / "benchmarks" / "studies" / "hierarchical-h1.toml")
    assert study.preset == "demo" and set(study.arms) == {"baseline", "two_site", "hierarchical"}
    assert all(study.arms[a].ref == "baseline" for a in ("two_site", "hierarchical"))
    assert all(len(t) == 1 for t in (study.trials(a) for a in study.arms))  # every arm at its one headline pick
    picks = {a: study.trials(a)[0] for a in study.arms}
    trials = [picks["hierarchical"]] + [study.row_trial(row, picks) for row in study.rows]
    assert [t.experiment for t in trials] == ["hierarchical"] * 3
    assert sorted(int(t.overrides["sync.hierarchical.site_every"]) for t in trials) == [1, 10, 50]
    assert {t.overrides["sync.H"] for t in trials} == {"50"}
    rest = [{k: v for k, v in t.overrides.items() if k != "sync.hierarchical.site_every"} for t in trials]
    assert rest[0] == rest[1] == rest[2]  # nothing else varies
    assert all(row.arm == row.control == "hierarchical" for row in study.rows)


def test_the_spec_builds_the_two_link_kinds_and_other_strategies_keep_one_link() -> None:
    links = link_model(_cfg())
    assert isinstance(links, SiteLinks) and links.site.cfg == link_config("intra-dc")
    assert links.cfg == get_preset("hierarchical", "smoke").link
    assert type(link_model(get_preset("two_site", "smoke"))) is LinkModel
    # a transfer inside a site goes on the site link, one across on the WAN: each keeps its own directions
    inside, across = links.transfer(1 << 20, 0.0, 0, 3), links.transfer(1 << 20, 0.0, 0, 4)
    assert inside.end_s < link_config("intra-dc").rtt_s * 100 < across.end_s
    state = links.state_dict()
    again = SiteLinks(_cfg())
    again.load_state_dict(state)
    assert again.state_dict() == state and again.site.state_dict() == links.site.state_dict() != []


def test_the_row_stays_out_of_the_default_comparison_and_the_scaling_study() -> None:
    """``make demo`` (the compare notebook) keeps training baseline, two_site and eight_cell until hierarchical is
    tuned and scored like them; its own notebook runs it."""
    assert comparison_experiments([]) == ["baseline", "two_site", "eight_cell"]
    assert "hierarchical" in EXPERIMENT_NOTEBOOKS and "hierarchical" not in SCALING_EXPERIMENTS


@pytest.mark.parametrize("preset", ["smoke", "demo", "demo-long", "gpu-small", "gpu"])
def test_every_preset_syncs_the_sites_more_often_than_the_wan(preset) -> None:
    """H1 (site_every) below H2 (sync.H) at every size: the smoke preset had H1 10 over H2 8, the two levels upside
    down."""
    cfg = get_preset("hierarchical", preset)
    assert cfg.sync.hierarchical.site_every < cfg.sync.H
