"""A compromised island and the defences (islands_kit/faults/): the robust rules against plain loops, the defence
'none' against the transport's all_reduce bit for bit, each attack exactly as specified, the checks on crafted
updates, and end-to-end smoke runs — every attack caught at the first sync of each fragment after it starts, for two
and for four islands, bpb with the defence within 1 % of the clean run, visible damage without it, no false positive
on a clean run — and the poisoned_island notebook through papermill."""
from __future__ import annotations

import functools
import json
import math
from typing import Any

import pytest
import torch

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.transport import LocalTransport, weighted_mean
from islands_kit.config import ConfigError, ExperimentConfig, FaultConfig, SyncConfig, apply_overrides
from islands_kit.config.codec_registry import DENSE_CODECS as CODECS
from islands_kit.config.presets import get_preset, preset_dict
from islands_kit.faults import (
    Adversary,
    Defense,
    attach,
    default_trim,
    detection_summary,
    trimmed_mean,
    trimmed_mean_reference,
    weighted_median,
    weighted_median_reference,
)
from islands_kit.faults.defense import REPLAY_DISTANCE
from islands_kit.run import Experiment, run_experiment
from islands_kit.sync.diloco import DiLoCo
from islands_kit.sync.diloco_spec import DiLoCoConfig
from islands_kit.sync.hooks import Hooks

# smoke two_site: H=8, two fragments syncing after steps 4, 12, 20 (fragment 0) and 8, 16, 24 (fragment 1), tau=1.
# Starting at step 9 leaves one honest sync of each fragment (history) and makes 12 and 16 the first attacked syncs;
# 17 steps see both land (the final sync at 17 is attacked too).
ATTACK_START = 9
STEPS = 17
ATTACKS = ("sign_flip", "scale", "noise", "nan", "replay")


def smoke_cfg(n_islands: int = 2, **overrides: object) -> ExperimentConfig:
    """two_site smoke; for n_islands != 2, n equal islands sharing the same global batch of 40 sequences."""
    d = preset_dict("two_site", "smoke")
    d["sync"]["diloco"]["average"] = "mean"  # the rule the defences replace: the defence is the one change
    if n_islands != 2:
        b = 40 // n_islands
        d["islands"] = [dict(name=f"site-{k}", batch_size=b, micro_batch_size=b, dp_ranks=1, hardware="cpu-2core",
                             n_accelerators=1) for k in range(n_islands)]
    return apply_overrides(ExperimentConfig.from_dict(d), {k.replace("__", "."): str(v) for k, v in overrides.items()})


def attack_cfg(n_islands: int, attack: str, defense: str) -> ExperimentConfig:
    # noise of 5x the update's RMS: the norm test sees ~5.1x (the default 1x stays under norm_ratio=3, see faults/defense.py)
    return smoke_cfg(n_islands, steps=STEPS, faults__attack=attack, faults__defense=defense,
                     faults__attack_start=ATTACK_START, faults__attack_noise_std=5.0)


@functools.cache
def smoke_run(n_islands: int, attack: str = "none", defense: str = "none") -> tuple[ExperimentConfig, dict]:
    cfg = attack_cfg(n_islands, attack, defense)
    return cfg, run_experiment(cfg)


def gathered(xs: list[torch.Tensor], ws: list[float] | None = None) -> list[tuple[int, float, torch.Tensor]]:
    ws = ws or [1.0] * len(xs)
    return [(i, float(w), x) for i, (w, x) in enumerate(zip(ws, xs))]


def honest(n: int, d: int = 2000, seed: int = 0) -> list[torch.Tensor]:
    """n updates sharing a common direction (pairwise cosine ~0.5), like islands training on different shards."""
    g = torch.Generator().manual_seed(seed)
    common = torch.randn(d, generator=g)
    return [common + torch.randn(d, generator=g) for _ in range(n)]


def reasons(dfn: Defense, island: int | None = None) -> set[str]:
    return {r["reason"] for r in dfn.report() if island is None or r["island"] == island}


# -- robust rules ---------------------------------------------------------------------------------------------------

def test_trimmed_mean_and_weighted_median_match_plain_loops():
    g = torch.Generator().manual_seed(0)
    for n in (2, 3, 4, 5, 8):
        xs = torch.randn(n, 23, generator=g)
        xs[:, :6] = xs[0, :6]  # ties across islands
        xs[1, 6:9] = xs[-1, 6:9]
        w = [float(v) for v in torch.randint(1, 50, (n,), generator=g)]
        for trim in range((n - 1) // 2 + 1):
            torch.testing.assert_close(trimmed_mean(xs, torch.tensor(w), trim), trimmed_mean_reference(xs, w, trim))
        torch.testing.assert_close(weighted_median(xs, torch.tensor(w)), weighted_median_reference(xs, w))
        torch.testing.assert_close(trimmed_mean(xs, torch.tensor(w), 0), weighted_mean(list(xs), w))
        s = xs.sort(0).values  # equal weights: the usual median (mean of the two middle values for even n)
        usual = s[(n - 1) // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
        torch.testing.assert_close(weighted_median(xs, torch.ones(n)), usual)
    with pytest.raises(ValueError, match="trim"):
        trimmed_mean(torch.zeros(4, 3), torch.ones(4), 2)
    assert [default_trim(n) for n in (3, 4, 5, 6, 8, 10, 11)] == [1, 1, 1, 2, 2, 2, 3]
    assert all(n - 2 * default_trim(n) >= 1 for n in range(3, 64))


@pytest.mark.parametrize("rule", ["trimmed_mean", "median"])
def test_robust_rules_return_the_honest_update_when_the_honest_agree(rule):
    h = torch.randn(500, generator=torch.Generator().manual_seed(1))
    bad = 1e3 * torch.randn(500, generator=torch.Generator().manual_seed(2))
    cfg = FaultConfig(defense=rule, norm_ratio=1e12, min_cosine=-1.0)  # detectors off: the rule alone does the work
    for n in (3, 4, 5, 8):
        xs, ws = [h.clone() for _ in range(n - 1)] + [bad], [float(10 + i) for i in range(n)]
        out = Defense(cfg, n).aggregate(4, 0, gathered(xs, ws))
        assert torch.equal(out, h)
        assert (weighted_mean(xs, ws) - h).abs().max() > 1.0  # what the plain mean would have applied


def test_defense_none_is_the_transports_all_reduce_bit_for_bit():
    codec = get_codec("int4", 128)
    for n in (2, 3, 8):
        g = torch.Generator().manual_seed(n)
        payloads = {i: codec.encode(torch.randn(1000, generator=g), stochastic=True, generator=g) for i in range(n)}
        weights = {i: float((24 if i % 2 == 0 else 16) * 32) for i in range(n)}
        tr = LocalTransport(n)
        reduced = tr.all_reduce("fragments", payloads, weights).wait(0)
        gathered_ = tr.all_gather("fragments", payloads, weights).wait(0)
        out = Defense(FaultConfig(defense="none"), n).aggregate(8, 0, gathered_)
        assert torch.equal(out, reduced)


# -- the attacker ---------------------------------------------------------------------------------------------------

def test_delta_attacks_are_exact_seeded_and_start_on_time():
    d = torch.randn(4000, generator=torch.Generator().manual_seed(0))

    def adv(attack: str, **kw: float) -> Adversary:
        return Adversary(FaultConfig(attack=attack, attack_island=1, attack_start=10, **kw), seed=3)

    assert adv("sign_flip").tamper(9, 1, 0, d) is d  # before the start
    assert adv("sign_flip").tamper(10, 0, 0, d) is d  # an honest island
    assert torch.equal(adv("sign_flip").tamper(10, 1, 0, d), -d)
    assert torch.equal(adv("scale", attack_scale=7.0).tamper(12, 1, 1, d), d * 7.0)
    a = adv("noise", attack_noise_std=2.0)
    noisy = a.tamper(12, 1, 1, d)
    assert abs(float((noisy - d).std() / d.pow(2).mean().sqrt()) - 2.0) < 0.1
    assert torch.equal(adv("noise", attack_noise_std=2.0).tamper(12, 1, 1, d), noisy)  # same seed, same noise
    assert not torch.equal(a.tamper(20, 1, 1, d), noisy)
    assert adv("nan").tamper(12, 1, 0, d) is d and adv("replay").tamper(12, 1, 0, d) is d  # those act on the wire
    with pytest.raises(ConfigError, match="faults.attack"):
        Adversary(FaultConfig(), seed=0)


@pytest.mark.parametrize("codec_name", CODECS)
def test_nan_attack_poisons_the_payload_of_every_codec(codec_name):
    codec = get_codec(codec_name, 64)
    p = codec.encode(torch.randn(1000, generator=torch.Generator().manual_seed(0)))
    a = Adversary(FaultConfig(attack="nan", attack_island=0, attack_start=5), seed=0)
    assert a.tamper_payload(4, 0, 0, p) is p
    q = a.tamper_payload(5, 0, 0, p)
    assert (q.codec, q.numel, q.nbytes) == (p.codec, p.numel, p.nbytes)  # same bytes on the wire
    assert torch.isfinite(codec.decode(p)).all()  # the honest payload is untouched
    bad = ~torch.isfinite(codec.decode(q))
    if codec_name in ("fp32", "bf16"):
        assert int(bad.sum()) == 10  # 1 % of the values
    else:
        blocks = bad.view(-1).nonzero().squeeze(1) // 64
        assert blocks.unique().numel() == 1  # one block scale of 16 (1 %, at least one)
        assert int(bad.sum()) == (64 if int(blocks[0]) < 15 else 1000 - 15 * 64)  # the whole block
    assert torch.equal(a.tamper_payload(5, 0, 0, p).data, q.data)  # seeded


def test_replay_resends_the_last_honest_payload_bit_for_bit():
    codec = get_codec("int4")
    enc = [codec.encode(torch.randn(300, generator=torch.Generator().manual_seed(s))) for s in range(4)]
    a = Adversary(FaultConfig(attack="replay", attack_island=1, attack_start=10), seed=0)
    assert a.tamper_payload(4, 1, 0, enc[0]) is enc[0]
    assert a.tamper_payload(8, 1, 0, enc[1]) is enc[1]
    assert a.tamper_payload(4, 0, 0, enc[2]) is enc[2]  # an honest island is never stored nor replaced
    assert a.tamper_payload(12, 1, 0, enc[2]) is enc[1]
    assert a.tamper_payload(20, 1, 0, enc[3]) is enc[1]
    assert a.tamper_payload(12, 1, 1, enc[3]) is enc[3]  # fragment 1 never synced before the start: nothing to replay


# -- the checks on crafted updates ----------------------------------------------------------------------------------

def test_no_flag_on_honest_updates():
    for n in (2, 3, 5, 8):
        dfn = Defense(FaultConfig(defense="auto"), n)
        for step in (4, 12, 20, 28):
            for p in (0, 1):
                dfn.aggregate(step, p, gathered(honest(n, seed=100 * step + p)))
        assert dfn.report() == [], n


@pytest.mark.parametrize("n", [3, 5, 8])
def test_majority_flags_each_attack_on_the_attacker_only(n):
    xs = honest(n, seed=n)
    ys = honest(n, seed=n + 50)
    g = torch.Generator().manual_seed(0)
    rms = ys[1].pow(2).mean().sqrt()
    cases = {"sign_flip": -ys[1], "scale": 100 * ys[1], "noise": ys[1] + 5 * rms * torch.randn(2000, generator=g),
             "nan": ys[1].clone().index_fill_(0, torch.tensor([3, 7]), math.nan), "replay": xs[1].clone()}
    expect = {"sign_flip": {"direction"}, "scale": {"norm_vs_others", "norm_vs_history"},
              "noise": {"norm_vs_others", "norm_vs_history"}, "nan": {"non_finite"}, "replay": {"replay"}}
    for attack, bad in cases.items():
        dfn = Defense(FaultConfig(defense="auto"), n, window=8)
        dfn.aggregate(4, 0, gathered(xs))
        out = dfn.aggregate(12, 0, gathered([ys[0], bad] + ys[2:]))
        assert {r["island"] for r in dfn.report()} == {1} and reasons(dfn) == expect[attack], attack
        assert torch.isfinite(out).all()
        keep = [ys[0]] + ys[2:]
        if len(keep) >= 3:
            ref = trimmed_mean(torch.stack(keep), torch.ones(len(keep)), default_trim(len(keep)))
            torch.testing.assert_close(out, ref)
        else:
            torch.testing.assert_close(out, weighted_mean(keep, [1.0] * len(keep)))


def test_two_sites_clip_then_quarantine():
    dfn = Defense(FaultConfig(defense="auto"), 2, window=8, observer=0, quarantine_windows=2)  # two islands: clip
    assert dfn.rule == "clip"
    w = [24.0, 16.0]
    xs = honest(2, seed=1)
    assert torch.equal(dfn.aggregate(4, 0, gathered(xs, w)), weighted_mean(xs, w)) and dfn.report() == []
    ys = honest(2, seed=2)
    out = dfn.aggregate(12, 0, gathered([ys[0], 50 * ys[1]], w))
    trusted = float(xs[1].double().norm())  # the median of its own accepted history of fragment 0
    clipped = 50 * ys[1] * (trusted / float((50 * ys[1]).double().norm()))
    torch.testing.assert_close(out, weighted_mean([ys[0], clipped], w))
    assert reasons(dfn) == {"norm_vs_history", "norm_vs_others"} and {r["action"] for r in dfn.report()} == {"clipped"}
    for step in (16, 20, 28):  # quarantined for 2 windows of 8 steps, on every fragment: its updates are dropped
        zs = honest(2, seed=step)
        assert torch.equal(dfn.aggregate(step, (step // 4) % 2, gathered(zs, w)), weighted_mean([zs[0]], [24.0]))
        assert dfn.report()[-1]["reason"] == "quarantined" and dfn.report()[-1]["island"] == 1
    n_flags = len(dfn.report())
    zs = honest(2, seed=36)
    assert torch.equal(dfn.aggregate(36, 0, gathered(zs, w)), weighted_mean(zs, w))  # back
    assert len(dfn.report()) == n_flags
    json.dumps(dfn.report(), allow_nan=False)  # JSON-ready for result.json


def test_two_sites_judge_the_other_against_the_observer():
    xs = honest(2, seed=3)
    obs0 = Defense(FaultConfig(defense="clip"), 2, observer=0)
    obs0.aggregate(4, 0, gathered([10 * xs[0], xs[1]]))  # the observer's own large update is trusted
    assert obs0.report() == []
    obs1 = Defense(FaultConfig(defense="clip"), 2, observer=1)
    obs1.aggregate(4, 0, gathered([10 * xs[0], xs[1]]))  # the same updates seen from island 1
    assert reasons(obs1, 0) == {"norm_vs_others"} and reasons(obs1, 1) == set()
    flip = Defense(FaultConfig(defense="clip"), 2, observer=0)
    assert torch.equal(flip.aggregate(4, 0, gathered([xs[0], -xs[1]])), weighted_mean([xs[0]], [1.0]))
    assert reasons(flip, 1) == {"direction"}


def test_two_sites_catch_a_flip_orthogonal_to_the_observer_through_its_own_history():
    """Late in a two-site run the sites' updates are nearly orthogonal (demo: cos ~0.1) while an island's consecutive
    updates stay correlated (~0.3): the flip is caught by the sum of the two trusted directions, not by either alone
    at min_cosine = -0.2."""
    g = torch.Generator().manual_seed(7)
    z_obs, z_prev, z_new, z_obs_prev = (torch.randn(4000, generator=g) for _ in range(4))
    now = 0.33 * z_prev + 0.1 * z_obs + 0.94 * z_new  # cos ~0.33 with its previous update, ~0.1 with the observer's
    for sign, flagged in ((1.0, set()), (-1.0, {"direction"})):
        dfn = Defense(FaultConfig(defense="clip"), 2, observer=0)
        dfn.aggregate(4, 0, gathered([z_obs_prev, z_prev]))
        dfn.aggregate(12, 0, gathered([z_obs, sign * now]))
        assert reasons(dfn, 1) == flagged, sign
        cos_obs = float(torch.nn.functional.cosine_similarity(sign * now, z_obs, dim=0))
        assert cos_obs > FaultConfig().min_cosine  # the observer's direction alone would let the flip through


def test_replay_checks():
    x = honest(1, seed=5)[0]
    dfn = Defense(FaultConfig(defense="clip"), 1)
    dfn.aggregate(4, 0, gathered([x]))
    dfn.aggregate(12, 0, gathered([x.clone()]))  # the same bytes again
    dfn.aggregate(20, 1, gathered([x + 1e-7 * torch.randn(2000)]))  # another fragment: no history there
    dfn.aggregate(28, 1, gathered([x + 1e-7 * torch.randn(2000)]))  # a near copy of its previous update
    dfn.aggregate(36, 2, gathered([torch.zeros(2000)]))
    dfn.aggregate(44, 2, gathered([torch.zeros(2000)]))  # a zero update is no replay
    got = [(r["step"], r["reason"]) for r in dfn.report() if r["island"] == 0]
    assert got == [(12, "replay"), (28, "replay")]
    assert [r["value"] for r in dfn.report() if r["reason"] == "replay"][1] > 0.9999


def test_an_older_update_resent_rescaled_is_a_replay():
    """The digest sees only the same bytes and the cosine only the previous update: an older update re-sent
    x (1 + 1e-6) once passed both. Honest updates (here independent draws, and one 0.99-aligned with an earlier one)
    are not flagged."""
    xs = honest(1, seed=5) + honest(1, seed=6) + honest(1, seed=7)
    dfn = Defense(FaultConfig(defense="clip", norm_ratio=1e9, min_cosine=-1.0), 1)
    for step, x in zip((4, 12, 20), xs):
        dfn.aggregate(step, 0, gathered([x]))
    near = 0.99 * xs[0] / xs[0].norm() + (1 - 0.99 ** 2) ** 0.5 * xs[2] / xs[2].norm()  # cos 0.99 with xs[0]
    dfn.aggregate(28, 0, gathered([near * xs[0].norm()]))
    assert dfn.report() == []
    dfn.aggregate(36, 0, gathered([xs[0] * (1 + 1e-6)]))
    r, nothing_kept = dfn.report()
    assert (r["step"], r["reason"], r["action"]) == (36, "replay", "dropped") and r["value"] < REPLAY_DISTANCE
    assert nothing_kept["reason"] == "no_update"


def test_state_round_trip_continues_identically():
    import io

    def feed(dfn: Defense, steps: range) -> list[torch.Tensor]:
        outs = []
        for t in steps:
            xs = honest(3, seed=t)
            xs[1] = 40 * xs[1] if t % 3 == 0 else xs[1]  # island 1 misbehaves now and then
            outs.append(dfn.aggregate(4 * t, t % 2, gathered(xs, [24.0, 16.0, 8.0])))
        return outs

    cfg = FaultConfig(defense="auto")
    whole, first = Defense(cfg, 3, window=8), Defense(cfg, 3, window=8)
    ref = feed(whole, range(1, 13))
    feed(first, range(1, 7))
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    resumed = Defense(cfg, 3, window=8)
    resumed.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=False))
    assert all(torch.equal(a, b) for a, b in zip(feed(resumed, range(7, 13)), ref[6:]))
    assert resumed.report() == whole.report() and any(r["reason"] == "quarantined" for r in whole.report())
    adv = Adversary(FaultConfig(attack="replay", attack_island=0, attack_start=10), seed=0)
    p = get_codec("int4").encode(torch.randn(64))
    adv.tamper_payload(4, 0, 1, p)
    adv2 = Adversary(FaultConfig(attack="replay", attack_island=0, attack_start=10), seed=0)
    adv2.load_state_dict(adv.state_dict())
    assert torch.equal(adv2.tamper_payload(12, 0, 1, get_codec("int4").encode(torch.randn(64))).data, p.data)


def test_attach_registers_on_the_hook_points_only_when_asked():
    cfg = smoke_cfg()
    hooks = Hooks()
    attach(hooks, cfg, [0, 1])
    assert not any(hooks.has(p) for p in ("outgoing", "outgoing_payload", "merge", "screen"))
    assert hooks.state == {"adversary": None, "defense": None} and hooks.result([], 0.0) == {"faults_report": []}
    hooks = Hooks()
    attach(hooks, apply_overrides(cfg, {"faults.attack": "scale", "faults.defense": "auto"}), [0, 1])
    adv, dfn = hooks.state["adversary"], hooks.state["defense"]
    assert all(hooks.has(p) for p in ("outgoing", "outgoing_payload", "merge", "screen"))
    assert (dfn.rule, dfn.observer) == ("clip", 0)
    d, t, bad = torch.randn(5), cfg.faults.attack_start, cfg.faults.attack_island
    sent = hooks.outgoing(t, bad, 0, d)
    assert torch.equal(sent, adv.tamper(t, bad, 0, d)) and not torch.equal(sent, d)  # the attacker scales its own
    assert torch.equal(hooks.outgoing(t, 1 - bad, 0, d), d)
    hooks = Hooks()
    attach(hooks, apply_overrides(cfg, {"faults.attack": "sign_flip", "faults.attack_island": "0",
                                        "faults.defense": "median"}), [0, 1])
    assert (hooks.state["defense"].rule, hooks.state["defense"].observer) == ("median", 1)  # the honest site's model
    with pytest.raises(ConfigError, match="attacks and defences need sync.strategy=diloco"):
        apply_overrides(get_preset("eight_cell", "smoke"), {"faults.defense": "auto"})  # no aggregation step


def test_diloco_calls_the_merge_hook_points():
    """What a feature registers is what DiLoCo does: ``outgoing`` sees every island's outer gradient of every sync
    (and what it returns is sent), ``merge`` replaces the mean (the islands all-gather)."""
    models = {i: torch.nn.Linear(3, 2) for i in range(2)}
    with torch.no_grad():
        models[1].weight.add_(1.0)
    seen: list[tuple[int, int, int]] = []
    hooks = Hooks()
    hooks.on("outgoing", lambda step, i, p, delta: seen.append((step, i, p)) or delta * 0 + i)
    hooks.on("merge", lambda step, p, gathered: gathered[1][2])  # island 1's, as the islands decoded it
    cfg = SyncConfig(strategy="diloco", H=2, codec="fp32", error_feedback=False, diloco=DiLoCoConfig(outer_lr=1.0,
                                                                                                     outer_momentum=0.0))
    strategy = DiLoCo(models, LocalTransport(2), [["weight", "bias"]], cfg, seed=0, hooks=hooks)
    before = strategy.global_params[0].detach().clone()
    strategy.after_inner_step(1, {0: 1, 1: 1})
    strategy.after_inner_step(2, {0: 1, 1: 1})
    assert seen == [(2, 0, 0), (2, 1, 0)]
    assert torch.equal(strategy.global_params[0].detach(), before - 1.0)  # θ − Δ̄ with Δ̄ = island 1's, all ones
    assert strategy.transport.ledger.bytes("fragments") == 2 * 8 * 4  # all-gathered: each sends its 8 floats once


# -- end to end (smoke) ---------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("n_islands", [2, 4])
def test_clean_run_has_no_false_positive(n_islands):
    cfg_c, clean = smoke_run(n_islands)
    cfg_d, guarded = smoke_run(n_islands, "none", "auto")
    assert guarded["faults_report"] == [] and clean["faults_report"] == []
    if n_islands == 2:  # the two-site rule with nothing flagged is the plain mean: the very same run
        assert guarded["val_curve"] == clean["val_curve"]


@pytest.mark.slow
@pytest.mark.parametrize("n_islands", [2, 4])
@pytest.mark.parametrize("attack", ATTACKS)
def test_each_attack_is_caught_in_one_window_and_the_model_stays_clean(attack, n_islands):
    _, clean = smoke_run(n_islands)
    cfg, res = smoke_run(n_islands, attack, "auto")
    summary = detection_summary(res["faults_report"], cfg)
    assert all(s["within_one_window"] for s in summary.values()), summary
    assert {r["island"] for r in res["faults_report"]} == {1}
    assert math.isfinite(res["final_val_bpb"])
    assert abs(res["final_val_bpb"] - clean["final_val_bpb"]) < 0.01 * clean["final_val_bpb"]


@pytest.mark.slow
def test_a_decoupled_run_drops_a_scale_1e15_island_and_names_it():
    cfg = smoke_cfg(2, steps=STEPS, sync__mode="decoupled", faults__attack="scale", faults__attack_scale=1e15,
                    faults__attack_island=1, faults__defense="auto", faults__attack_start=ATTACK_START)
    with pytest.warns(RuntimeWarning, match=r"island 1 is lost, .*faults.defense: island 1's outer gradient"):
        res = run_experiment(cfg)
    assert math.isfinite(res["final_val_bpb"]) and res["diverged_at_step"] is None
    assert set(res["decoupled"]["lost_islands"]) == {1}
    assert {(r["island"], r["action"]) for r in res["faults_report"]} == {(1, "island_dropped")}


def test_decoupled_defences_trust_the_synchroniser():
    with pytest.raises(ConfigError, match=r"faults.attack_island: must not be 0 with sync.mode=decoupled"):
        smoke_cfg(2, sync__mode="decoupled", faults__attack="scale", faults__attack_island=0)
    cfg = smoke_cfg(2, sync__mode="decoupled", sync__diloco__average="radial_directional", faults__defense="auto")
    assert cfg.faults.defense == "auto"  # the checks only: the quorum's own average merges what is kept


@pytest.mark.slow
def test_without_defence_the_damage_is_visible():
    _, clean = smoke_run(2)
    _, scaled = smoke_run(2, "scale", "none")
    assert scaled["faults_report"] == []  # silent: nothing flags it
    # x100 outer gradients from one island: the undefended global model ends far worse (with the preset's keep_local
    # merge each replica keeps its own last steps, so the damage is smaller than with alpha blending, but plain)
    assert scaled["final_val_bpb"] > 1.1 * clean["final_val_bpb"]
    exp = Experiment(attack_cfg(2, "nan", "none"))  # a NaN island: the global model turns non-finite...
    while exp.step < 13:  # ...when fragment 0's first attacked sync (posted after step 12) lands after step 13 (tau=1)
        exp.train_step()
    assert [bool(torch.isfinite(g).all()) for g in exp.strategy.global_params] == [False, True]


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["int4", "fp32"])
def test_an_undefended_nan_island_stops_the_run_and_still_writes_its_result(codec, tmp_path):
    """The NaN lands in fragment 0's global copy after step 13 and reaches the local replicas through the merge: the
    run stops at the first step whose training loss is NaN (int4: or the next encode of a now non-finite outer
    gradient) and records it; result.json is strict JSON (bpb null), history.jsonl keeps the curve up to there."""
    cfg = apply_overrides(attack_cfg(2, "nan", "none"), {"sync.codec": codec})
    with pytest.warns(RuntimeWarning, match="diverged at step"):
        res = run_experiment(cfg, tmp_path)
    assert 13 <= res["diverged_at_step"] < STEPS and res["steps"] == res["diverged_at_step"]
    assert "not finite" in res["diverged_reason"] or "non-finite" in res["diverged_reason"]
    assert math.isnan(res["final_val_bpb"]) and res["tokens"] == res["steps"] * 40 * cfg.model.seq_len
    text = (tmp_path / "result.json").read_text()
    raw = json.loads(text, parse_constant=lambda c: pytest.fail(f"result.json holds {c}: not strict JSON"))
    assert raw["final_val_bpb"] is None and raw["diverged_at_step"] == res["diverged_at_step"]
    from islands_kit.compare import compare_table, render
    from islands_kit.records.tracking import load_result

    back = load_result(tmp_path)
    assert math.isnan(back["final_val_bpb"]) and math.isnan(back["val_curve"][-1][1])
    _, clean = smoke_run(2)
    table = render(compare_table([dict(clean, experiment="baseline"), back]))
    assert f"diverged at step {res['diverged_at_step']}" in table
    hist = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert hist[-1]["final"] and hist[-1]["val_bpb"] is None and hist[-1]["step"] == res["diverged_at_step"]
    assert all(math.isfinite(h["val_bpb"]) for h in hist[:-1])  # evaluations before the attack landed


def test_a_non_finite_global_model_is_refused_at_evaluation():
    from islands_kit.run import Diverged

    exp = Experiment(smoke_cfg(2, steps=8))
    for _ in range(5):  # fragment 0 syncs after step 4 (H=8, P=2, tau=1): from step 5 its global copy is deployed
        exp.train_step()
    assert exp.strategy.synced[0]
    assert math.isfinite(exp.evaluate())
    with torch.no_grad():
        exp.strategy.global_params[0][3] = float("inf")
    with pytest.raises(Diverged, match="NaN/inf"):
        exp.evaluate()

    class Overflowing(torch.nn.Module):  # finite weights whose forward pass overflows (1e15 x an honest update did)
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([3e38, 2.0]))

        def forward(self, x: torch.Tensor) -> Any:
            return type("Out", (), {"logits": (self.w[0] * self.w[1]).expand(*x.shape, 256) * torch.arange(256.0)})

    with pytest.raises(Diverged, match=r"the evaluated model's loss is not finite .*largest \|weight\| 3e\+38 in w$"):
        exp.evaluator.bpb(Overflowing(), exp.evaluator.eval_windows)  # was a bare ValueError ("nll_nats_sum")


@pytest.mark.slow
def test_poisoned_island_notebook(tmp_path):
    from islands_kit.notebooks import run_notebook

    run_notebook("poisoned_island", {"preset": "smoke", "steps": STEPS, "attack": "scale",
                                      "attack_start": ATTACK_START}, tmp_path)
    res = {k: json.loads((tmp_path / k / "result.json").read_text()) for k in ("clean", "attacked", "defended")}
    assert res["clean"]["faults_report"] == [] and res["attacked"]["faults_report"] == []
    assert {r["island"] for r in res["defended"]["faults_report"]} == {1}
    assert res["attacked"]["final_val_bpb"] > 1.1 * res["clean"]["final_val_bpb"]  # as in the test above
    assert abs(res["defended"]["final_val_bpb"] - res["clean"]["final_val_bpb"]) < 0.01 * res["clean"]["final_val_bpb"]
    assert (tmp_path / "poisoned_island.ipynb").exists() and (tmp_path / "bpb_curves.png").exists()


# -- nobody referees itself -----------------------------------------------------------------------------------------

def test_a_contribution_is_never_its_own_referee():
    """Decoupled, the synchroniser's island absent from a round: island 1 alone used to be judged against itself
    (min of the pool), so anything passed. Now it is held until fragment 0 has a trusted round, then judged against
    that round and its own accepted history: 100x is refused, an honest one merged."""
    dfn = Defense(FaultConfig(defense="auto"), 2, window=8, observer=0)
    xs, ys, zs = honest(2, seed=11), honest(2, seed=12), honest(2, seed=13)
    drop, hold = dfn.screen(4, 0, [(1, 16.0, 100 * xs[1])])
    assert drop == {} and set(hold) == {1} and "is held: nothing trusted to judge it by" in hold[1]
    assert [(r["island"], r["reason"], r["action"]) for r in dfn.report()] == [(1, "no_reference", "held")]
    assert dfn.rescreen(5, 0, (1, 16.0, 100 * xs[1])) == ({}, hold | {1: hold[1].replace("step 4", "step 5")})
    assert dfn.screen(12, 0, [(0, 24.0, ys[0]), (1, 16.0, ys[1])]) == ({}, {})  # a trusted round of fragment 0
    drop, hold = dfn.rescreen(13, 0, (1, 16.0, 100 * xs[1]))  # the held one, judged now
    assert hold == {} and "refused: norm_vs_history" in drop[1]
    assert reasons(dfn, 1) == {"no_reference", "norm_vs_history", "norm_vs_trusted"}
    fresh = Defense(FaultConfig(defense="auto"), 2, window=8, observer=0)
    fresh.screen(12, 0, [(0, 24.0, ys[0]), (1, 16.0, ys[1])])
    assert fresh.screen(20, 0, [(1, 16.0, zs[1])]) == ({}, {})  # honest, alone: judged against the trusted round
    drop, _ = fresh.screen(28, 0, [(1, 16.0, -100 * zs[1])])
    assert {r["reason"] for r in fresh.report()} == {"norm_vs_history", "norm_vs_trusted"} and 1 in drop


def test_lockstep_with_the_observer_flagged_holds_the_other_site_without_a_trusted_round():
    xs, ys = honest(2, seed=21), honest(2, seed=22)
    nan = xs[0].clone().index_fill_(0, torch.tensor([0]), math.nan)
    dfn = Defense(FaultConfig(defense="clip"), 2, observer=0)
    out = dfn.aggregate(4, 0, gathered([nan, 50 * xs[1]]))  # the observer's own update is broken: nobody to judge by
    assert torch.equal(out, torch.zeros_like(out))
    assert {(r["island"], r["reason"], r["action"]) for r in dfn.report()} == {
        (0, "non_finite", "dropped"), (1, "no_reference", "held"), (-1, "no_update", "zero")}
    later = Defense(FaultConfig(defense="clip"), 2, observer=0)
    later.aggregate(4, 0, gathered(xs))  # a trusted round first
    later.aggregate(12, 0, gathered([nan, 50 * ys[1]]))
    assert reasons(later, 1) == {"norm_vs_history", "norm_vs_trusted"}


def test_a_held_contribution_merges_once_the_fragment_has_a_trusted_round():
    from lone_synchroniser import contribution, from_island_1, synchroniser

    from islands_kit.comm.codecs import encode_bytes

    s, box, tick = synchroniser()
    attach(s.hooks, smoke_cfg(2, sync__mode="decoupled", faults__defense="auto"), [0])
    g = torch.Generator().manual_seed(0)

    def like_island_0(at: int, **over: object) -> tuple[bytes, bytes]:  # island 1's update: island 0's, plus noise
        delta = s.base[0][0] - s.views[0][0].flat()
        body, _ = contribution(s, at, **over)
        return body, encode_bytes(s.codec.encode(delta + 0.1 * delta.abs().mean() * torch.randn(delta.shape, generator=g)))

    s.tokens_since[0][0] = 0  # the synchroniser's island has nothing for this round (absent)
    from_island_1(box, like_island_0(tick))
    s.after_tick(tick)
    rec = s.merge_log[0]
    assert rec["held"] == [1] and not rec["quorum_met"] and rec["on_time"] == [] and list(rec["landing_s"]) == [1]
    nxt = tick + s.cfg.H
    for _ in range(s.cfg.H):
        with torch.no_grad():
            s.models[0].weight.add_(0.01)
        s.island_step_done(0, 64)
    from_island_1(box, like_island_0(nxt, round=1, tokens=64 * s.cfg.H, steps=s.cfg.H, inner_steps=nxt))
    s.after_tick(nxt)
    rec = s.merge_log[-1]
    assert not box.lost and rec["on_time"] == [0, 1] and rec["carried_in"] == [1] and "held" not in rec
    assert rec["tokens"] == 64 * s.cfg.H * 2 + 64 * tick  # both fresh spans, and the held one


@pytest.mark.slow
@pytest.mark.parametrize("scale", [100.0, 1e15])
def test_a_straggling_synchroniser_no_longer_lets_the_attacker_referee_itself(scale):
    """The issue's repro: island 0 straggles (x20, no contribution in 17 steps), island 1 attacks from step 9. It was
    judged against itself: bpb 14.09 with an empty faults_report, and a nameless NaN crash at 1e15. Every one of its
    contributions is now held (nothing trusted to judge them by) and reported; the global model is what an honest
    island 1 would have left, to the bit (also all held)."""
    sets = dict(steps=STEPS, sync__mode="decoupled", faults__defense="auto", faults__straggler_island=0,
                faults__straggler_factor=20, faults__attack_island=1, faults__attack_start=ATTACK_START)
    _, clean = smoke_run(2)
    attacked = run_experiment(smoke_cfg(2, faults__attack="scale", faults__attack_scale=scale, **sets))
    honest_run = run_experiment(smoke_cfg(2, **sets))
    assert attacked["diverged_at_step"] is None and attacked["final_val_bpb"] == honest_run["final_val_bpb"]
    assert {(r["island"], r["reason"]) for r in attacked["faults_report"]} == {(1, "no_reference")}
    assert {r["action"] for r in attacked["faults_report"]} == {"held", "not_merged"}
    assert attacked["decoupled"]["dropped_tokens"] > 0
