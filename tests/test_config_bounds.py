"""Every config field is typed and bounded before any work: infinities, huge integers and values a run cannot survive
are refused with one line that names the field and the rule."""
from __future__ import annotations

import json
import re

import pytest

from islands_kit.config import ConfigError, ExperimentConfig, ModelConfig, OptimConfig, apply_overrides
from islands_kit.config.configfile import config_from_file, config_rows, load_config_file
from islands_kit.config.presets import get_preset


def _leaves(kind: type) -> list[str]:
    cfg = get_preset("two_site", "smoke")
    return [k for k, v, _, _ in config_rows(cfg) if type(v) is kind and k != "link.preset"]


def _named(key: str, msg: str) -> bool:
    """The message names the field (``islands.0.x`` is spelled ``islands[0].x`` by the island's own check)."""
    return msg.startswith(key + ":") or msg.startswith(re.sub(r"\.(\d+)\.", r"[\1].", key) + ":")


@pytest.mark.parametrize("key", _leaves(float))
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e999"])
def test_every_float_field_refuses_non_finite(key, value):
    with pytest.raises(ConfigError) as e:
        apply_overrides(get_preset("two_site", "smoke"), {key: value})
    assert _named(key, str(e.value)) and "finite" in str(e.value), str(e.value)


@pytest.mark.parametrize("key", _leaves(int))
def test_every_int_field_refuses_more_than_64_bits(key):
    with pytest.raises(ConfigError) as e:
        apply_overrides(get_preset("two_site", "smoke"), {key: str(10**400)})
    msg = str(e.value)
    assert _named(key, msg) and "64-bit" in msg and "\n" not in msg and len(msg) < 200, msg


@pytest.mark.parametrize("overrides, field, rule", [
    ({"optim.lr": "inf"}, "optim.lr", "finite"),
    ({"optim.lr": "50"}, "optim.lr", "<= 10"),
    ({"optim.lr": "5", "optim.weight_decay": "0.5"}, "optim.weight_decay", "lr x weight_decay must be < 1"),
    ({"threads": "1000000"}, "threads", "<= 1024"),
    ({"link.loss_prob": "0.9999"}, "link.loss_prob", "resent at most 10000 times"),
    ({"link.loss_prob": "0.5", "link.corrupt_prob": "0.495"}, "link.loss_prob", "<= 0.99"),
    ({"link.jitter_sigma": "300"}, "link.jitter_sigma", "<= 4"),
    ({"link.tail_alpha": "0.01"}, "link.tail_alpha", "infinite mean"),
    ({"link.n_connections": "1000000000"}, "link.n_connections", "<= 1024"),
    ({"model.rope_theta": "0"}, "model.rope_theta", "> 0"),
    ({"model.init_std": "-1"}, "model.init_std", "> 0"),
    ({"seed": str(2**40)}, "seed", "2^32 - 1"),
    ({"steps": str(10**12)}, "steps", "<= 1e+09"),
    ({"sync.diloco.outer_lr": "1e6"}, "sync.diloco.outer_lr", "<= 10"),
    ({"optim.max_preconditioner_dim": "100000"}, "optim.max_preconditioner_dim", "<= 8192"),
    # passed the dry run, trained 600 steps, then failed naming no field ("start_s: must be a finite time (got inf)")
    ({"faults.straggler_factor": "1.7e308"}, "faults.straggler_factor", "must be in [1, 1e+06]"),
])
def test_ranges_name_field_and_rule(overrides, field, rule):
    with pytest.raises(ConfigError) as e:
        apply_overrides(get_preset("two_site", "smoke"), overrides)
    msg = str(e.value)
    assert msg.startswith(field + ":") and rule in msg, msg


def test_python_construction_is_typed_too():
    with pytest.raises(ConfigError, match=r"model\.d_model: must be an integer \(got 128\.0\)"):
        ModelConfig(d_model=128.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"optim\.lr: must be a finite number"):
        OptimConfig(lr=float("inf"))
    with pytest.raises(ConfigError, match=r"optim\.name: must be a string"):
        OptimConfig(name=None)  # type: ignore[arg-type]


def test_a_config_file_with_1e999_and_huge_integers_is_refused(tmp_path):
    f = tmp_path / "c.json"
    f.write_text('{"experiment": "two_site", "optim": {"lr": 1e999}}')
    with pytest.raises(ConfigError, match=r"^optim\.lr: must be a finite number \(got inf\)$"):
        config_from_file(load_config_file(f), None, None)
    f.write_text(json.dumps({"experiment": "two_site", "sync": {"grace_s": 10**400}}))
    with pytest.raises(ConfigError, match=r"^sync\.grace_s: must be a finite number \(got an integer of 1329 bits\)$"):
        config_from_file(load_config_file(f), None, None)


def test_presets_stay_valid():
    from islands_kit.config.presets import PRESETS

    for exp in ("baseline", "two_site", "eight_cell"):
        for preset in PRESETS:
            ExperimentConfig.from_dict(get_preset(exp, preset).to_dict())


@pytest.mark.parametrize("overrides, field, rule", [
    ({"link.contact_period_s": "1e-300"}, "link.contact_period_s", "must be 0 (always in contact) or >= 1 ms"),
    ({"link.preset": "leo-satellite", "link.contact_fraction": "1e-12"}, "link.contact_period_s",
     "long enough to carry one chunk"),
    ({"sync.codec_block_size": str(10**12)}, "sync.codec_block_size", "must be in [1, 1048576]"),
    ({"sync.diloco.h_schedule": "qsr", "sync.diloco.qsr_alpha": "1e300"}, "sync.diloco.qsr_alpha", "must be <= 10"),
    # the link's physical ranges: 1e-310 bit/s crashed the dry run with a raw RuntimeError (no contact window at
    # t = inf); an rtt of 1e308 s passed it and made every simulated time inf
    ({"link.bandwidth_bps": "1e-310"}, "link.bandwidth_bps", "must be in [1, 1e+18] bits per second"),
    ({"link.bandwidth_bps": "1e19"}, "link.bandwidth_bps", "must be in [1, 1e+18] bits per second"),
    ({"link.rtt_s": "1e308"}, "link.rtt_s", "must be in [0, 3600] s"),
    ({"link.tail_scale_s": "1e308"}, "link.tail_scale_s", "must be in [0, 3600] s"),
    ({"link.pacing_bps": "1e-300"}, "link.pacing_bps", "must be 0 (no cap) or in [1, 1e+18]"),
    ({"link.idle_timeout_s": "1e300"}, "link.idle_timeout_s", "must be in [0, 86400] s"),
    ({"link.contact_period_s": "1e9"}, "link.contact_period_s", "must be in [0, 86400] s"),
    ({"link.chunk_bytes": str(2 ** 50)}, "link.chunk_bytes", "must be in [1, 2^40]"),
    ({"link.init_cwnd_bytes": str(2 ** 50)}, "link.init_cwnd_bytes", "must be in [1, 2^40]"),
])
def test_absurd_values_that_stalled_or_crashed_a_run_are_refused(overrides, field, rule):
    """contact_period_s = 1e-300 looped forever inside one transfer; codec_block_size = 10**12 asked for 4 TB;
    qsr_alpha = 1e300 raised OverflowError in the QSR schedule; link values outside a physical link's ranges made
    transfer times zero or infinite."""
    with pytest.raises(ConfigError) as e:
        apply_overrides(get_preset("two_site", "smoke"), overrides)
    assert str(e.value).startswith(field + ":") and rule in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert apply_overrides(get_preset("two_site", "smoke"), {"link.preset": "leo-satellite"}).link.contact_period_s == 60


def test_the_dry_run_names_the_link_field_instead_of_a_traceback(tmp_path, capsys):
    from islands_kit.cli import main

    for value, rule in (("link.bandwidth_bps=1e-310", "link.bandwidth_bps: must be in [1, 1e+18]"),
                        ("link.rtt_s=1e308", "link.rtt_s: must be in [0, 3600] s")):
        assert main(["run", "two_site", "--set", value, "--dry-run", "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert rule in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
