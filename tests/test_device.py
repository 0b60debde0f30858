"""The accelerator path on a CPU-only machine: the device and precision fields, tensors placed on the run's device in
the training loop, evaluation, strategies and codecs (checked with a stand-in device that fails on mixing, see
tests/devicecheck.py), bf16 autocast close to fp32, and what result.json records."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from devicecheck import DEVICE, DeviceCheckMode, DeviceMixError, on_device

import islands_kit.train.experiment as run_mod
from islands_kit.comm.codecs import ErrorFeedback, get_codec
from islands_kit.config import CODECS, ConfigError, apply_overrides
from islands_kit.device import resolve_device
from islands_kit.model import ByteTransformer
from islands_kit.optim.build import build_optimizer
from islands_kit.optim.schedule import lr_lambda
from islands_kit.run import Experiment, run_experiment
from islands_kit.sync.butterfly import Butterfly
from islands_kit.sync.diloco import DiLoCo
from islands_kit.train.golden import fixture_diff, golden_config, measured_rtol, pinned, read_run_files
from islands_kit.train.islands import Island, clip_grad_norm

GOLDEN = Path(__file__).parent / "golden"


# -- the fields --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:0:1", ""])
def test_device_spelling_is_checked_when_the_config_is_built(bad):
    with pytest.raises(ConfigError, match=r"^device: must be auto, cpu, cuda or cuda:N"):
        apply_overrides(golden_config("baseline"), {"device": bad})


def test_precision_must_be_fp32_or_bf16():
    with pytest.raises(ConfigError, match=r"^precision: must be one of fp32\|bf16"):
        apply_overrides(golden_config("baseline"), {"precision": "fp16"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's error")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_explicit_cuda_without_cuda_fails_before_any_work(spec, tmp_path, monkeypatch):
    cfg = apply_overrides(golden_config("baseline"), {"device": spec})
    monkeypatch.setattr(run_mod, "load_data_corpus", lambda *a: pytest.fail("work started before the device check"))
    with pytest.raises(ConfigError, match=r"^device: .*CUDA is not available"):
        run_experiment(cfg, tmp_path)
    assert not any(tmp_path.iterdir())
    assert resolve_device("auto") == torch.device("cpu")  # auto never fails: the CPU where there is no GPU


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only numbers")
@pytest.mark.parametrize("experiment", ["baseline", "two_site", "eight_cell"])
def test_device_cpu_matches_the_golden_fixture_and_records_the_device(experiment, tmp_path):
    """device=cpu (and auto, which the golden test runs) leaves every pinned number where it was."""
    expected = json.loads((GOLDEN / f"{experiment}.smoke.json").read_text())
    res = run_experiment(apply_overrides(golden_config(experiment), {"device": "cpu", "precision": "fp32"}), tmp_path)
    history, timeline = read_run_files(tmp_path)
    assert fixture_diff(expected, json.loads(json.dumps(pinned(dict(res), history, timeline), sort_keys=True)), measured_rtol(GOLDEN)) == []
    written = json.loads((tmp_path / "result.json").read_text())
    assert {k: written[k] for k in ("device", "precision", "gpu_name", "gpu_count", "cuda_version", "nccl_version")} == {
        "device": "cpu", "precision": "fp32", "gpu_name": None, "gpu_count": None, "cuda_version": None,
        "nccl_version": None}


# -- every tensor on the device ----------------------------------------------------------------------------------
def _on_stand_in(monkeypatch) -> None:
    monkeypatch.setattr(run_mod, "resolve_device", lambda spec: DEVICE)


def _assert_all_on_device(exp: Experiment) -> None:
    for i, isl in exp.islands.items():
        for name, t in [*isl.model.named_parameters(), *isl.model.named_buffers()]:
            assert on_device(t), f"island {i}: {name} is not on the device"
            assert t.grad is None or on_device(t.grad), f"island {i}: {name}.grad is not on the device"
        for st in isl.optimizer.state.values():
            for key, v in st.items():
                # AdamW's (non-fused) step counter is a CPU scalar by torch's design; everything else is on the device
                if isinstance(v, torch.Tensor) and v.dim() > 0:
                    assert on_device(v), f"island {i}: optimizer state {key} is not on the device"
    s = exp.strategy
    if isinstance(s, DiLoCo):
        assert all(on_device(g) for g in s.global_params)
        for st in (o.opt.state[g] for o, g in zip(s.outer, s.global_params)):
            assert all(on_device(v) for v in st.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    if isinstance(s, (DiLoCo, Butterfly)):
        residuals = s.ef.state_dict()["residuals"]
        assert residuals and all(on_device(r) for r in residuals.values())
    for name, t in [*exp.evaluator.model.named_parameters(), ("eval_x", exp.evaluator.eval_windows[0]),
                    ("final_y", exp.evaluator.final_windows[1])]:
        assert on_device(t), f"{name} is not on the device"


CASES = {
    "baseline": {},
    "two_site": {},  # Streaming DiLoCo, int4 codec with stochastic rounding and error feedback, routing sync
    "eight_cell": {"sync.codec": "fp4_e2m1"},  # butterfly exchanges through a block codec
    "two_site-shampoo-median": {"optim.name": "shampoo", "optim.start_preconditioning_step": 2, "sync.codec": "int2",
                                "faults.defense": "median", "sync.diloco.average": "mean", "optim.precondition_frequency": 2},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_training_evaluation_and_sync_keep_every_tensor_on_the_device(case, monkeypatch):
    """On a stand-in accelerator that refuses device mixing, a run trains, syncs and evaluates through every step
    (nothing mixes host and device tensors), ends with every replica, optimizer state, global copy and error-feedback
    residual on the device, and gives the CPU run's bpb (same kernels underneath)."""
    experiment = case.split("-")[0]
    cfg = apply_overrides(golden_config(experiment), {"steps": 9, "eval_every": 5, "model.kernels": "torch", **CASES[case]})
    reference = run_experiment(cfg)["final_val_bpb"]
    _on_stand_in(monkeypatch)
    with DeviceCheckMode() as mode:
        exp = Experiment(cfg)
        res = exp.run()
        _assert_all_on_device(exp)
    assert mode.ops > 1000  # the run really computed on the stand-in device
    assert res["device"] == str(DEVICE)
    assert math.isfinite(res["final_val_bpb"])
    # same CPU kernels underneath except SDPA (math here, flash on the CPU): float rounding, which int2 stochastic
    # rounding (a flipped coin) and Shampoo's eigendecompositions amplify in the last case
    assert res["final_val_bpb"] == pytest.approx(reference, rel=1e-6 if "shampoo" not in case else 3e-3)


def test_the_check_fails_when_batches_are_not_moved_to_the_device(monkeypatch):
    """The same run with the island's batches left on the CPU (its ``.to(device)`` made a no-op) is refused."""
    init = Island.__init__

    def host_batches(self, *a, **k):
        init(self, *a, **k)
        self.device = torch.device("cpu")  # what deleting ``x.to(self.device)`` in forward_backward amounts to

    monkeypatch.setattr(Island, "__init__", host_batches)
    _on_stand_in(monkeypatch)
    cfg = apply_overrides(golden_config("baseline"), {"steps": 2, "model.kernels": "torch"})
    with DeviceCheckMode(), pytest.raises(DeviceMixError, match="embedding"):
        Experiment(cfg).run()


@pytest.mark.parametrize("codec", CODECS)
def test_codecs_and_error_feedback_stay_on_the_device(codec):
    """Payload bytes, decoded values and residuals stay on the input's device and equal the CPU result bit for bit
    (the stochastic-rounding noise comes from the same CPU generator on every device)."""
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    c = get_codec(codec, 128)
    ef_cpu = ErrorFeedback()
    ref = [ef_cpu.compress("k", x * s, c, stochastic=True, generator=torch.Generator().manual_seed(s))
           for s in (1, 2)]
    with DeviceCheckMode():
        ef = ErrorFeedback()
        xd = x.to(DEVICE)
        for s, (p_ref, d_ref) in zip((1, 2), ref):
            p, d = ef.compress("k", xd * s, c, stochastic=True, generator=torch.Generator().manual_seed(s))
            assert on_device(p.data) and on_device(d) and on_device(ef.residual("k"))
            assert torch.equal(p.data.cpu(), p_ref.data) and torch.equal(d.cpu(), d_ref)
        assert torch.equal(ef.residual("k").cpu(), ef_cpu.residual("k"))


def test_the_stand_in_device_refuses_mixing():
    with DeviceCheckMode():
        a = torch.ones(3).to(DEVICE)
        assert on_device(a + torch.tensor(2.0))  # a CPU 0-dim operand is allowed, as on CUDA
        with pytest.raises(DeviceMixError, match="add"):
            a + torch.ones(3)
        with pytest.raises(DeviceMixError):
            torch.zeros(()).add_(a.sum())  # written into a CPU scalar: CUDA refuses


# -- the inner optimizer's kernel ----------------------------------------------------------------------------------
def test_inner_adamw_is_fused_on_the_cpu_and_equals_torch_s_foreach_adamw():
    """Where torch has a fused CPU AdamW the islands use it, and it makes torch.optim.AdamW's foreach update (decoupled
    weight decay on matrices only, the warm-up and cosine schedule) to float rounding: the same gradients for 30
    steps leave the two copies of a real model within float32 rounding."""
    cfg = golden_config("baseline").optim
    torch.manual_seed(0)
    model = ByteTransformer(golden_config("baseline").model)
    ref_model = copy.deepcopy(model)
    fused = build_optimizer(model, cfg)
    assert [g["fused"] for g in fused.param_groups] == [True, True]
    ref = torch.optim.AdamW([{**g, "params": [dict(zip(map(id, model.parameters()), ref_model.parameters()))[id(p)]
                                              for p in g["params"]]} for g in fused.param_groups], foreach=True, fused=None)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: lr_lambda(s, cfg, 30)) for o in (fused, ref)]
    g = torch.Generator().manual_seed(1)
    for _ in range(30):
        for p, q in zip(model.parameters(), ref_model.parameters()):
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
        for o, sch in zip((fused, ref), scheds):
            o.step()
            sch.step()
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=name)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])  # gradient norms about 0.002, 2 and 2000; the bound is 1
def test_gradient_clipping_equals_torch_s_and_skips_the_identity_multiply_on_the_cpu(scale, monkeypatch):
    """``islands.clip_grad_norm`` leaves gradients bit for bit as ``torch.nn.utils.clip_grad_norm_`` does; where torch
    would multiply by a coefficient clamped to 1.0 it does not touch them at all."""
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (7, 300, 64)]
    grads = [torch.randn(p.shape, generator=g) * scale / 10 for p in params]
    ref = [torch.nn.Parameter(torch.zeros_like(p)) for p in params]
    for p, q, x in zip(params, ref, grads):
        p.grad, q.grad = x.clone(), x.clone()
    torch.nn.utils.clip_grad_norm_(ref, 1.0)
    calls = []
    real = torch.nn.utils.clip_grads_with_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grads_with_norm_", lambda *a, **k: calls.append(1) or real(*a, **k))
    clip_grad_norm(iter(params), 1.0)
    for p, q in zip(params, ref):
        assert torch.equal(p.grad, q.grad)
    total = float(torch.linalg.vector_norm(torch.cat(grads)))
    assert calls == ([] if total < 0.99 else [1])


# -- precision ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["baseline", "two_site"])
def test_bf16_autocast_on_cpu_trains_within_half_a_percent_of_fp32(experiment):
    """bf16 autocast changes the numbers (it is really on) but a smoke run lands within 0.5% bpb of fp32; the
    weights, optimizer and sync state stay float32."""
    fp32 = run_experiment(golden_config(experiment))
    cfg = apply_overrides(golden_config(experiment), {"precision": "bf16"})
    exp = Experiment(cfg)
    bf16 = exp.run()
    assert bf16["precision"] == "bf16"
    assert bf16["final_val_bpb"] != fp32["final_val_bpb"]
    assert abs(bf16["final_val_bpb"] - fp32["final_val_bpb"]) / fp32["final_val_bpb"] < 5e-3
    for isl in exp.islands.values():
        assert all(p.dtype == torch.float32 for p in isl.model.parameters())
        assert all(v.dtype == torch.float32 for st in isl.optimizer.state.values() for v in st.values()
                   if isinstance(v, torch.Tensor) and v.is_floating_point())
    if isinstance(exp.strategy, DiLoCo):
        assert all(g.dtype == torch.float32 for g in exp.strategy.global_params)


# -- GPU presets ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["gpu-small", "gpu"])
def test_gpu_presets_train_on_the_gpu_in_bf16_with_adamw_in_the_methods_regime(preset):
    """bf16 on cuda with GPU hardware profiles; AdamW (eight replicas' Shampoo roots would dominate the budget); at
    least 20 tokens per active parameter and 80 outer steps per fragment."""
    from islands_kit.config.presets import get_preset
    from islands_kit.model import ByteTransformer
    from islands_kit.sync.schedule import sync_schedule
    from islands_kit.train.islands import HARDWARE

    for experiment in ("baseline", "two_site", "eight_cell"):
        cfg = get_preset(experiment, preset)
        assert (cfg.device, cfg.precision, cfg.optim.name) == ("cuda", "bf16", "adamw")
        assert all(HARDWARE[i.hardware].gpu_names for i in cfg.islands)  # GPU profiles, not cpu-*
        with torch.device("meta"):
            active = ByteTransformer(cfg.model).num_active_params()
        tokens = cfg.steps * sum(i.batch_size for i in cfg.islands) * cfg.model.seq_len
        assert tokens / active >= 20, (preset, tokens / active)
        if experiment == "two_site":
            syncs = sync_schedule(cfg.sync.H, cfg.sync.n_fragments, cfg.steps)
            assert min(sum(1 for _, f in syncs if f == p) for p in range(cfg.sync.n_fragments)) >= 80


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's error")
def test_a_gpu_preset_on_a_machine_without_cuda_is_refused_not_trained_on_the_cpu(tmp_path):
    from islands_kit.config.presets import get_preset

    with pytest.raises(ConfigError, match=r"^device: cuda was asked for but CUDA is not available"):
        run_experiment(get_preset("two_site", "gpu-small"), tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's refusal")
def test_gpu_check_script_fails_clearly_without_a_gpu(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_OUT": str(tmp_path / "out")}
    p = subprocess.run(["bash", str(root / "benchmarks" / "gpu_check.sh")], cwd=root, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "gpu_check: FAILED: no CUDA GPU is visible to torch" in p.stderr
    assert not (tmp_path / "out").exists()  # stopped before any work


@pytest.mark.slow
def test_gpu_check_measurements_run_end_to_end_at_cpu_smoke_size(tmp_path):
    """The GPU check's own code (benchmarks, runs, table) on tiny CPU sizes, so it does not rot between GPU loans."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "benchmarks" / "gpu_check.py"), "--cpu-smoke", "--out", str(tmp_path)],
                       cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    runs = s["runs"]["smoke"]
    assert set(runs) == {"baseline", "two_site", "eight_cell", "hierarchical"}
    assert all(r["tokens_per_s"] > 0 and r["device"] == "cpu" for r in runs.values())
    # the full preset's time is projected from the measured steps (smoke: 24 steps from 4)
    assert all(r["projected_full_s"] == pytest.approx(r["wall_s"] / 4 * 24) and r["full_steps"] == 24 for r in runs.values())
    assert s["codec"]["gb_per_s"] > 0 and s["gemm"]["speedup"] > 0
    for row in ("kernel tests (native)", "SR codec kernel", "grouped expert GEMM, 64 experts", "MXFP8 vs bf16",
                "smoke eight_cell"):
        assert row in p.stdout


@pytest.mark.slow
def test_wire_messages_travel_over_nccl_only_for_a_gpu_run_with_nccl_in_the_group():
    from islands_kit.device import wire_device

    gpu, cpu = torch.device("cuda", 1), torch.device("cpu")
    assert wire_device(gpu, "cpu:gloo,cuda:nccl") == gpu  # torchrun on GPUs: messages on cuda:LOCAL_RANK, over NCCL
    assert wire_device(cpu, "cpu:gloo,cuda:nccl") == cpu  # device=cpu on a GPU machine: gloo
    assert wire_device(gpu, "gloo") == cpu and wire_device(cpu, "gloo") == cpu
    assert wire_device(gpu, "nccl") == gpu


REPLAY = {"faults.attack": "replay", "faults.attack_start": 2, "faults.defense": "auto", "sync.diloco.average": "mean",
          "steps": 12}


@pytest.mark.parametrize("experiment,at,extra", [("two_site", 4, {}), ("eight_cell", 5, {}),  # transfers in flight
                                                 ("two_site", 8, REPLAY)])  # the attacker's and defence's state
@pytest.mark.slow
def test_a_cpu_checkpoint_resumes_on_the_device(experiment, at, extra, tmp_path, monkeypatch):
    """Checkpoints load onto the CPU (map_location); resuming one on the device moves the replicas, optimizer and
    strategy state (residuals, transfers in flight, the routing channel, a replay attacker's stored payloads, the
    defence's last updates) there, with the uninterrupted CPU run's bpb."""
    cfg = apply_overrides(golden_config(experiment), {"steps": 9, "eval_every": 5, "model.kernels": "torch",
                                                      "checkpoint_every": at, **extra})
    full = run_experiment(cfg, tmp_path / "cpu")  # leaves checkpoint.pt of step `at` (in-flight transfers included)
    _on_stand_in(monkeypatch)
    with DeviceCheckMode():
        res = run_experiment(cfg, tmp_path / "dev", resume=tmp_path / "cpu")
    assert res["device"] == str(DEVICE)
    assert res["final_val_bpb"] == pytest.approx(full["final_val_bpb"], rel=1e-6)


@pytest.mark.slow
def test_model_compile_trains_like_the_eager_model():
    """model.compile=true (torch.compile, in place: parameter names unchanged) gives the eager run's bpb to float
    rounding; the grouped expert matmul stays eager inside the compiled model."""
    cfg = apply_overrides(golden_config("two_site"), {"steps": 3, "eval_every": 3, "model.kernels": "torch"})
    eager = run_experiment(cfg)["final_val_bpb"]
    exp = Experiment(apply_overrides(cfg, {"model.compile": True}))
    compiled = exp.run()["final_val_bpb"]
    assert all(type(isl.model).__name__ == "ByteTransformer" and isl.model._compiled_call_impl is not None
               for isl in exp.islands.values())
    assert compiled == pytest.approx(eager, rel=1e-6)


def test_result_fields_describe_a_gpu_run(monkeypatch):
    """What a CUDA run records (torch.cuda's answers stubbed: no GPU here): name, visible count, CUDA and NCCL."""
    from islands_kit.device import describe

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))
    assert describe(torch.device("cuda", 3), "bf16") == {
        "device": "cuda:3", "precision": "bf16", "gpu_name": "NVIDIA H200", "gpu_count": 8, "cuda_version": "12.8",
        "nccl_version": "2.27.3"}


@pytest.mark.slow
def test_device_resolution_on_a_gpu_machine_and_under_torchrun(monkeypatch):
    """With CUDA (stubbed: 2 GPUs): auto and cuda pick the current GPU, cuda:N that GPU, a missing one is an error
    naming the field; under torchrun (WORLD_SIZE > 1) auto and cuda mean cuda:LOCAL_RANK."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1) and resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"^device: GPU 2 does not exist; this machine has 2"):
        resolve_device("cuda:2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 1)
    monkeypatch.setenv("LOCAL_RANK", "3")  # 4 ranks on a 2-GPU node: refused, not doubled up silently
    with pytest.raises(ConfigError, match=r"^device: GPU 3 does not exist"):
        resolve_device("auto")
