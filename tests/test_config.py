"""Configs: presets build, overrides coerce types, and every bad value fails eagerly naming the field and the rule."""
from __future__ import annotations

import re

import pytest

from islands_kit.config import MOVED_KEYS, ConfigError, ExperimentConfig, IslandConfig, apply_overrides, parse_set
from islands_kit.config.presets import PRESETS, get_preset


@pytest.mark.parametrize("experiment", ["baseline", "two_site", "eight_cell"])
@pytest.mark.parametrize("preset", PRESETS)
def test_presets_build_and_round_trip(experiment, preset):
    cfg = get_preset(experiment, preset)
    assert cfg.experiment == experiment and cfg.preset == preset
    assert ExperimentConfig.from_dict(cfg.to_dict()) == cfg


def test_presets_have_equal_global_batch_across_experiments():
    for preset in PRESETS:
        sizes = {e: sum(i.batch_size for i in get_preset(e, preset).islands) for e in ("baseline", "two_site", "eight_cell")}
        assert len(set(sizes.values())) == 1, (preset, sizes)
        steps = {get_preset(e, preset).steps for e in ("baseline", "two_site", "eight_cell")}
        assert len(steps) == 1


def test_overrides_coerce_types():
    cfg = apply_overrides(get_preset("two_site", "smoke"),
                          parse_set(["sync.H=6", "sync.diloco.merge=alpha", "sync.diloco.alpha=0.25",
                                     "sync.routing_sync=false", "islands.1.batch_size=8", "optim.lr=1e-3"]))
    assert cfg.sync.H == 6 and cfg.sync.diloco.alpha == 0.25 and cfg.sync.routing_sync is False
    assert cfg.islands[1].batch_size == 8 and cfg.optim.lr == 1e-3


BAD = [
    # (overrides, field named in the error, a word of the rule)
    ({"model.top_k": "9"}, "model.top_k", "n_experts"),
    ({"model.d_model": "33"}, "model.d_model", "divisible"),
    ({"model.n_heads": "0"}, "model.n_heads", ">= 1"),
    ({"model.vocab_size": "512"}, "model.vocab_size", "256"),
    ({"model.dispatch": "fast"}, "model.dispatch", "grouped|loop"),
    ({"model.kernels": "cuda"}, "model.kernels", "auto|torch|triton"),
    ({"model.aux_loss_coef": "-1"}, "model.aux_loss_coef", ">= 0"),
    ({"optim.lr": "0"}, "optim.lr", "> 0"),
    ({"optim.lr": "-1e-3"}, "optim.lr", "> 0"),
    ({"optim.lr": "fast"}, "optim.lr", "number"),
    ({"optim.name": "lion"}, "optim.name", "adamw"),
    ({"optim.grafting": "lamb"}, "optim.grafting", "adam"),
    ({"optim.precondition_frequency": "0"}, "optim.precondition_frequency", ">= 1"),
    ({"optim.shampoo_epsilon": "0"}, "optim.shampoo_epsilon", "> 0"),
    ({"optim.max_preconditioner_dim": "0"}, "optim.max_preconditioner_dim", ">= 1"),
    ({"optim.beta1": "1.0"}, "optim.beta1", "[0, 1)"),
    ({"sync.H": "1", "sync.n_fragments": "2"}, "sync.H", "n_fragments"),
    ({"sync.tau": "50"}, "sync.tau", "tau < sync.H"),
    ({"sync.diloco.alpha": "1.5"}, "sync.diloco.alpha", "[0, 1]"),
    ({"sync.codec": "int3"}, "sync.codec", "one of"),
    ({"sync.diloco.outer_lr": "0"}, "sync.diloco.outer_lr", "> 0"),
    ({"sync.diloco.alpha": "0.5"}, "sync.diloco.alpha", "sync.diloco.merge=keep_local"),  # two_site: keep_local
    ({"sync.tau": "0", "sync.diloco.eager": "true"}, "sync.diloco.eager", "sync.tau >= 1"),
    ({"sync.butterfly.merge": "blend"}, "sync.butterfly.merge", "mean|delay_aware"),
    ({"sync.butterfly.exchanges_per_window": "0"}, "sync.butterfly.exchanges_per_window", ">= 1"),
    ({"sync.tau": "-1"}, "sync.tau", "0 <= tau"),
    ({"sync.strategy": "gossip"}, "sync.strategy", "ddp|diloco|butterfly"),
    ({"islands.0.batch_size": "0"}, "islands[0].batch_size", ">= 1"),
    ({"islands.0.batch_size": "25"}, "islands[0].batch_size", "split into"),
    ({"islands.0.batch_size": "2.5"}, "islands[0].batch_size", "integer"),
    ({"link.bandwidth_bps": "0"}, "link.bandwidth_bps", "must be in [1, 1e+18]"),
    ({"link.bandwidth_bps": "-5"}, "link.bandwidth_bps", "must be in [1, 1e+18]"),
    ({"link.loss_prob": "1.0"}, "link.loss_prob", "[0, 1)"),
    ({"link.chunk_bytes": "0"}, "link.chunk_bytes", "must be in [1, 2^40]"),
    ({"link.method": "udp"}, "link.method", "chunked|naive"),
    ({"data.val_fraction": "0.01"}, "data.val_fraction", "0.05"),
    ({"seed": "-1"}, "seed", ">= 0"),
    ({"steps": "0"}, "steps", ">= 1"),
    ({"wandb_mode": "cloud"}, "wandb_mode", "offline"),
    ({"log_every": "0"}, "log_every", ">= 1"),
    ({"sync.nonsense": "1"}, "sync.nonsense", "unknown key"),
    ({"islands.5.batch_size": "4"}, "islands.5", "existing list item"),
    ({"model.bias_balancing": "maybe"}, "model.bias_balancing", "boolean"),
]


@pytest.mark.parametrize("overrides,field,rule", BAD, ids=[next(iter(b[0])) for b in BAD])
def test_bad_values_name_field_and_rule(overrides, field, rule):
    base = get_preset("two_site", "smoke")
    with pytest.raises(ConfigError) as e:
        apply_overrides(base, overrides)
    msg = str(e.value)
    assert field in msg and rule in msg, msg


@pytest.mark.parametrize("old,new", sorted(MOVED_KEYS.items()))
def test_a_moved_sync_key_names_its_new_place(old, new):
    """The flat SyncConfig's keys moved to sync.diloco.* / sync.butterfly.* (butterfly's delay is sync.tau): the old
    key fails before any work, naming itself and the new key, both as a --set and inside a config mapping; the new key
    is accepted."""
    base = get_preset("eight_cell" if "butterfly" in new else "two_site", "smoke")
    value = getattr(base.sync, new.split(".")[-1]) if new == "sync.tau" else \
        getattr(getattr(base.sync, new.split(".")[1]), new.split(".")[2])
    with pytest.raises(ConfigError, match=rf"^{re.escape(old)}: unknown key \(did you mean {re.escape(new)}\?"):
        apply_overrides(base, {old: str(value)})
    if old.count(".") == 1:  # a flat key (a nested one inside a record is read across: the next test)
        d = base.to_dict()
        d["sync"][old.split(".")[1]] = value
        with pytest.raises(ConfigError, match=rf"^{re.escape(old)}: unknown key \(did you mean {re.escape(new)}\?"):
            ExperimentConfig.from_dict(d)
    assert apply_overrides(base, {new: str(value)}).to_dict() == base.to_dict()


def test_butterfly_needs_power_of_two_cells():
    d = get_preset("eight_cell", "smoke").to_dict()
    d["islands"] = d["islands"][:6]
    with pytest.raises(ConfigError, match="islands: butterfly mixing needs a power-of-two"):
        ExperimentConfig.from_dict(d)


def test_unknown_preset_and_experiment():
    with pytest.raises(ConfigError, match="preset: unknown preset"):
        get_preset("two_site", "huge")
    with pytest.raises(ConfigError, match="experiment: must be one of"):
        get_preset("three_site", "smoke")


def test_parse_set_requires_key_value():
    with pytest.raises(ConfigError, match="key=value"):
        parse_set(["sync.H"])


def test_a_list_key_takes_a_json_list_on_the_command_line():
    """``--set 'islands=[...]'`` replaces the list as a config file's ``islands:`` does (left-out fields: defaults)."""
    cfg = apply_overrides(get_preset("two_site", "smoke"), parse_set(['islands=[{"batch_size": 40, "micro_batch_size": 20}]']))
    assert [(i.batch_size, i.micro_batch_size, i.hardware) for i in cfg.islands] == [(40, 20, IslandConfig().hardware)]
    with pytest.raises(ConfigError, match="islands: must be a list"):
        apply_overrides(get_preset("two_site", "smoke"), {"islands": "site-a"})
    with pytest.raises(ConfigError, match="islands: must be a list"):
        apply_overrides(get_preset("two_site", "smoke"), {"islands": '{"batch_size": 40}'})


@pytest.mark.parametrize("old, lockstep, want", [("mean", "mean", "mean"), ("radial_directional", "mean", "radial_directional"),
                                                 ("mean", "radial_directional", "radial_directional")])
def test_a_record_with_the_decoupled_averaging_key_reads_as_one_rule(old, lockstep, want):
    """result.json / checkpoints that hold sync.decoupled.average (before both modes shared sync.diloco.average)
    still load: a non-default value moves to sync.diloco.average, the default one goes."""
    d = get_preset("two_site", "smoke").to_dict()
    d["sync"]["decoupled"]["average"] = old
    d["sync"]["diloco"]["average"] = lockstep
    cfg = ExperimentConfig.from_dict(d)
    assert cfg.sync.diloco.average == want and "average" not in cfg.to_dict()["sync"]["decoupled"]


@pytest.mark.parametrize("experiment", ["baseline", "two_site", "eight_cell"])
def test_demo_long_is_the_demo_at_twice_the_length(experiment):
    """demo-long differs from demo in length (steps, warm-up and evaluation cadence doubled: the scaling study's
    2400-step length point) and, for two_site only, in the merge its tuning split picked at that length (the plain
    mean); every other per-experiment demo setting (lr, E) is kept."""
    demo, long = get_preset(experiment, "demo").to_dict(), get_preset(experiment, "demo-long").to_dict()
    assert (long["steps"], long["optim"]["warmup_steps"], long["eval_every"]) == (
        2 * demo["steps"], 2 * demo["optim"]["warmup_steps"], 2 * demo["eval_every"])
    if experiment == "two_site":
        assert (demo["sync"]["diloco"]["average"], long["sync"]["diloco"]["average"]) == ("radial_directional", "mean")
        long["sync"]["diloco"]["average"] = demo["sync"]["diloco"]["average"]
    for d in (demo, long):
        del d["steps"], d["optim"]["warmup_steps"], d["eval_every"], d["preset"]
    assert long == demo
