# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A tour of islands_kit
#
# Small live examples of every idea the experiments rest on, each computed in seconds with the kit's real code: bytes
# and bits per byte, MoE routing and its balance, Shampoo and Muon, Streaming DiLoCo's fragment schedule, a DiLoCo outer step
# written in plain PyTorch (and checked against the kit's), butterfly mixing, and the wide-area link model.
#
# ```bash
# islands-kit notebook tour   # the executed copy, its figures and sample run in runs/notebook-tour (--out DIR: in DIR)
# ```

# %% tags=["parameters"]
seed = 0
out_dir = ""  # figures + sample run; `islands-kit notebook tour` sets its --out (runs/notebook-tour); empty: runs/tour (make lab: the checkout's)
corpus = "shakespeare"  # shakespeare | enwiki | hub:<name>[:<config>] | path or glob
tiny_steps = 60  # training steps of the tiny MoE in the routing section
race_steps = 150  # optimizer steps in the Shampoo / Muon / Adam race
H = 50  # window length for the DiLoCo and butterfly schedules
n_fragments = 4  # P
tau = 2  # τ: overlap of a fragment's transfer with inner steps
n_cells = 8  # butterfly cells (a power of two)
exchanges_per_window = 6
delay = 2  # τ of the butterfly (sync.tau): a fragment sent after step t is merged after step t + delay
links = ["transpacific-25g", "consumer-1g"]  # any of transpacific-25g, intra-dc, consumer-1g, leo-satellite
payload_mb = 64  # one fragment's payload in MiB
loss_prob = 0.01  # per-chunk loss probability on the link
n_transfers = 300  # transfers per method
diloco_H = 20  # inner steps per round of the plain-PyTorch DiLoCo (section 5)
diloco_rounds = 3  # its outer steps
outer_lr = 0.7  # η_out of its outer SGD (DiLoCo's value)
outer_momentum = 0.9  # μ of its outer Nesterov momentum
sample_steps = 24  # inner steps of the smoke two_site run sampled from in the last section
sample_prompt = "ROMEO:"  # the text the samples continue

# %%
from islands_kit import plots
from islands_kit.notebooks import tour
from islands_kit.comm.link import link_config
from islands_kit.config import SyncConfig
from islands_kit.notebooks import resolve_out_dir
from islands_kit.sync.butterfly import check_power_of_two
from islands_kit.sync.butterfly_spec import ButterflyConfig

# validate the parameters first, through the kit's own checks (a bad one stops here, naming it)
for name in links:
    link_config(name, loss_prob=loss_prob)
SyncConfig(strategy="diloco", H=H, n_fragments=n_fragments, tau=tau)
SyncConfig(strategy="butterfly", H=H, tau=delay, butterfly=ButterflyConfig(exchanges_per_window=exchanges_per_window))
check_power_of_two(n_cells)
out = resolve_out_dir(out_dir, "runs/tour")
print(out)

# %% [markdown]
# ## 1. Bytes, and bits per byte
# The model reads raw bytes (vocabulary 256), so its loss in bits per byte (bpb) is directly comparable with a
# compressor's output size: `8 · compressed / original`. Guessing uniformly costs exactly 8 bpb; byte n-gram counts
# get down a ladder; the compressors are computed on exactly the kit's validation bytes (the last 5%), because they do
# worse on small inputs.

# %%
from islands_kit.data import load_corpus, split_bytes

corp = load_corpus(corpus)
train, val = split_bytes(corp.data, 0.05)
print(f"{corp.name}: {len(corp.data):,} bytes (sha256 {corp.sha256[:12]}…), {len(val):,} validation bytes")
print(bytes(val[:300].numpy()).decode("utf-8", "replace"))

# %%
ladder = tour.bpb_ladder(train, val)
plots.show(plots.bpb_bars(ladder, title=f"bits per byte on the {corp.name} validation bytes"),
           out / "tour_bpb_ladder.png")

# %% [markdown]
# ## 2. MoE routing: the balance score is not the load
# The router sends each token to its top-k experts. The Switch aux loss `E · Σ_e f_e · P_e` (f_e: share of tokens
# routed to e, P_e: mean router probability of e) equals 1 at perfect balance, and is what training minimises. But it
# weighs loads by probabilities: a *hesitant* router (near-uniform probabilities, a slight tilt) can send most tokens
# to one expert while its score looks better than that of a confident router with a mild imbalance. Both states below
# are scored by the kit's own `route` and `switch_balance_loss`.

# %%
plots.show(plots.routing_states(tour.routing_example(seed=seed)), out / "tour_routing_states.png")

# %% [markdown]
# During training of a tiny 8-expert top-2 model, the two figures side by side: the balance score stays near 1 while
# the busiest expert's real load can sit far above the mean. This is why every run records `max_over_mean_load` per
# layer and why the kit also offers aux-loss-free balancing (a selection bias nudged toward balance each step,
# DeepSeek-V3).

# %%
tiny = {
    "Switch aux loss 0.01": tour.train_tiny_moe(train, tiny_steps, seed, aux_loss_coef=0.01),
    "no balancing": tour.train_tiny_moe(train, tiny_steps, seed, aux_loss_coef=0.0),
    "aux-loss-free bias (u=0.01)": tour.train_tiny_moe(train, tiny_steps, seed, aux_loss_coef=0.0, bias_balancing=True,
                                                       bias_update_rate=0.01),
}
plots.show(plots.balance_vs_load(tiny), out / "tour_balance_vs_load.png")

# %% [markdown]
# ## 3. Shampoo and Muon against Adam on an ill-conditioned problem
# Least squares `½·mean((A W B − C)²)` with A, B symmetric positive definite (eigenvalues spread over [1, 31.6]): the
# Hessian `(B Bᵀ) ⊗ (Aᵀ A)` is Kronecker-structured with condition number 10⁶ — the structure Shampoo's left and right
# preconditioners `L^{-1/4} G R^{-1/4}` approximate. Adam only rescales coordinates. Each curve is the best of three
# learning rates. One Shampoo run starts preconditioning at step 1, when L and R hold a single gradient each
# (Distributed Shampoo starts after some steps).
#
# Its nearly flat line is not a bug: it is why Shampoo waits. From one gradient G, L = G Gᵀ has eigenvalues near zero
# along every direction G barely touches, and with ε = 1e-12 the root `L^{-1/4}` blows those directions up, so the
# preconditioned step points where the loss hardly depends on W; grafting keeps the step Adam-sized, so the loss
# barely moves, the next gradients are the same as the first, and the statistics stay as they were. Five Adam steps
# first (or a larger ε: 1e-6 or 1e-2 both converge from step 1) give L and R the curvature they need.
#
# Muon (`optim.name=muon`'s rule for the hidden matrices) replaces the momentum of the gradient by its nearest
# orthogonal matrix (five Newton-Schulz iterations in bfloat16): every singular direction moves at the same rate,
# whatever its curvature. That equalises the gradient's spectrum, not the Hessian's, so on this problem it is no
# preconditioner: its steps have a fixed size, and it ends where that size lets it.

# %%
race = tour.optimizer_race(steps=race_steps, shampoo_starts=(1, 5), seed=seed, muon_lrs=(0.03, 0.1, 0.3))
plots.show(plots.loss_curves(race, title="Shampoo, Muon and Adam: ½·mean((AWB − C)²), condition number 10⁶"),
           out / "tour_shampoo_vs_adam.png")

# %% [markdown]
# ## 4. Streaming DiLoCo: which fragment syncs when
# The model's blocks are cut into P fragments (strided: block l → fragment l mod P). Fragment p syncs once per H-step
# window at its own offset, so the link carries 1/P of the model at a time instead of all of it at once; its outer
# result is merged τ steps later, while the inner steps go on.

# %%
from islands_kit.sync.schedule import fragment_offsets, streaming_schedule

print("offsets inside the window:", fragment_offsets(H, n_fragments))
plots.show(plots.fragment_timeline(streaming_schedule(H, n_fragments, 2 * H), n_fragments, H, tau, 2 * H),
           out / "tour_fragment_timeline.png")

# %% [markdown]
# ## 5. DiLoCo in plain PyTorch: the outer gradient, the outer step, 4 bits on the wire
# What two_site does at every fragment's sync, written out on a tiny model (one fragment holding every parameter):
# two replicas start from the global parameters θ and take `diloco_H` inner AdamW steps, each on its own data. Each
# replica's **outer gradient** is Δᵢ = θ − θᵢ, the direction its inner steps moved, with the sign of a gradient. It
# crosses the wire in **4 bits**: per block of 128 values a float32 scale (the block's largest |value| / 7) and one of
# 15 levels per value, chosen by **stochastic rounding** (round up with probability equal to the fraction, so the
# rounding is unbiased on average). **Error feedback** adds what rounding lost last time to the next outer gradient,
# so errors do not accumulate. The two decoded outer gradients are averaged (the all-reduce) and the **outer step**
# is plain `torch.optim.SGD` with **Nesterov momentum** on θ with Δ̄ as its gradient (DiLoCo's η_out 0.7, μ 0.9;
# the demo's own merge and outer step are printed below from its config; docs/methods.md says why). Replicas
# restart from the new θ. In the kit a *fragment* is a set of parameters synced this way at its own step of the
# window (section 4), and `sync/diloco.py` does exactly this: the last cell runs it on the same replicas and checks
# it agrees bit for bit.

# %%
import copy

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(seed)
global_model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))  # θ, on a toy regression task
initial, w_true, data = copy.deepcopy(global_model), torch.randn(8, 1), torch.Generator().manual_seed(seed)
outer_opt = torch.optim.SGD(global_model.parameters(), lr=outer_lr, momentum=outer_momentum, nesterov=True)
residual = [torch.zeros(0), torch.zeros(0)]  # error feedback: what rounding lost, per island
noise = [torch.Generator().manual_seed(seed * 1_000_003 + 7919 * i + 17) for i in range(2)]  # seeded as the kit does


def flat(model):  # every parameter in one vector: the fragment
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def int4_stochastic(x, gen, block=128):  # what the receiver decodes from 4 bits per value + a scale per block
    n = x.numel()
    xb = torch.zeros(-(-n // block) * block)
    xb[:n] = x
    scale = xb.view(-1, block).abs().amax(dim=1, keepdim=True) / 7  # (blocks, 1): ±7 is the block's largest value
    v = (xb.view(-1, block) / torch.where(scale > 0, scale, torch.ones_like(scale))).clamp(-7, 7).reshape(-1)[:n]
    q = torch.floor(v) + (torch.rand(n, generator=gen) < v - torch.floor(v)).float()  # up with p = the fraction
    qb = torch.zeros(xb.numel())
    qb[:n] = q
    return (qb.view(-1, block) * scale).reshape(-1)[:n]


trained, rounds = [], []
for r in range(diloco_rounds):
    replicas = [copy.deepcopy(global_model) for _ in range(2)]
    for m in replicas:  # the inner steps
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(diloco_H):
            x = torch.randn(16, 8, generator=data)
            loss = F.mse_loss(m(x), x @ w_true)
            opt.zero_grad()
            loss.backward()
            opt.step()
    trained.append([copy.deepcopy(m) for m in replicas])
    deltas = [flat(global_model) - flat(m) for m in replicas]  # outer gradients Δᵢ = θ − θᵢ
    sent = []
    for i, d in enumerate(deltas):
        x_eff = d + residual[i] if residual[i].numel() else d  # error feedback in ...
        sent.append(int4_stochastic(x_eff, noise[i]))
        residual[i] = x_eff - sent[i]  # ... and out
    mean = (sent[0] + sent[1]) / 2  # the all-reduce (equal tokens: equal weights)
    off = 0
    for p in global_model.parameters():  # the outer step: Δ̄ is θ's gradient
        p.grad = mean[off:off + p.numel()].view_as(p).clone()
        off += p.numel()
    outer_opt.step()
    rounds.append({"global": flat(global_model), "residuals": [t.clone() for t in residual]})
    n = d.numel()
    print(f"round {r}: |Δ0| {deltas[0].norm():.4f}, |Δ1| {deltas[1].norm():.4f}, cos(Δ0, Δ1) "
          f"{F.cosine_similarity(deltas[0], deltas[1], dim=0):.3f}; 4-bit payload {4 * -(-n // 128) + -(-n // 2)} bytes "
          f"(fp32: {4 * n}); rounding error carried: |e0| {residual[0].norm():.5f}; last inner loss {loss.item():.4f}")

# %%
kit = tour.kit_diloco(initial, trained, diloco_H, outer_lr, outer_momentum, seed)  # sync/diloco.py, same replicas
same = [torch.equal(a["global"], b["global"]) and all(torch.equal(x, y) for x, y in zip(a["residuals"], b["residuals"]))
        for a, b in zip(rounds, kit)]
print(f"the kit's sync/diloco.py on the same replicas: global parameters and residuals equal bit for bit in "
      f"{sum(same)} of {len(same)} rounds")
assert all(same), "the plain-PyTorch DiLoCo and the kit's disagree"
print(tour.outer_step_sentence(outer_lr, outer_momentum))

# %% [markdown]
# ## 6. Butterfly mixing
# No all-reduce: in round r cell i swaps a fragment with cell i XOR 2^r and both keep the mean. Each round halves the
# distance to consensus; after log2(n) rounds (with instantaneous merges) every cell holds the exact average of all of
# them: the mixing matrix is uniform.

# %%
from islands_kit.sync.butterfly import butterfly_schedule

exchanges = butterfly_schedule(n_cells, H, exchanges_per_window, n_fragments, H)
plots.show(plots.butterfly_timeline(exchanges, n_fragments, H, delay, H),
           out / "tour_butterfly_timeline.png")
plots.show(plots.mixing_matrices(tour.butterfly_mixing(n_cells)), out / "tour_mixing_matrices.png")

# %% [markdown]
# ## 7. The link: tails, and why payloads are chunked
# One payload sent many times over an otherwise idle link. *naive*: one stream, one latency draw; a lost chunk is
# noticed at the end and the whole payload is sent again. *chunked*: the payload is cut into chunks over several warm
# connections, each with its own latency draw; a lost or very late chunk is re-requested alone. On the seed's 25
# Gbit/s transpacific pipe a 64 MiB payload serialises in about 21 ms, so latency draws dominate: the chunked transfer
# waits for the slowest of its chunks and its median can be higher, while a loss costs the naive one a whole extra
# round. On a thinner, lossier line the resend of the whole payload dominates and chunking cuts the tail. Which method
# wins depends on the link.

# %%
from islands_kit.comm.link import transfer_time_stats

for name in links:
    durations, ideal = tour.link_durations(name, payload_mb << 20, n_transfers, seed=seed, loss_prob=loss_prob)
    for method, d in durations.items():
        print(name, method, {k: round(v * 1e3, 1) for k, v in transfer_time_stats(d).items()}, "ms")
    plots.show(plots.transfer_times(durations, ideal, title=f"{payload_mb} MiB on {name} "
                                    f"({100 * loss_prob:g}% chunk loss)"), out / f"tour_link_tails_{name}.png")

# %% [markdown]
# ### Links that are not always up: islands in orbit
# A satellite in low Earth orbit sees a ground station for a few minutes a pass, a few passes a day; its link is down
# the rest of the time, and a transfer pauses until the next window. The `orbital` experiment (`islands-kit notebook
# orbital -p preset smoke`) trains across four such satellites and a ground island with decoupled DiLoCo, the
# satellites slowed in the Earth's shadow, and reports how long outer gradients waited for a window and what that
# costs in bpb against the ground baseline; `notebooks/orbital.ipynb` draws each satellite's windows with the syncs on
# them. It models passes, eclipses and bit flips, and leaves out power, thermal, radiation beyond bit flips and orbital
# perturbations (docs/methods.md).

# %% [markdown]
# ## 8. Sampling from a trained run
# Every run saves its final weights beside `result.json`: `model.pt` (the model it deploys and scores: for
# `two_site` the global parameters) and `model.island<i>.pt` (each island's own replica), as plain tensors that
# `torch.load(..., weights_only=True)` reads. A short smoke `two_site` run here, then bytes sampled from it: greedy,
# and at temperature 0.8 among the 5 likeliest bytes. A smoke model is tiny and barely trained; the demo preset's
# samples start to look like Shakespeare. From the command line:
#
# ```bash
# islands-kit run two_site --preset demo --out runs/ts
# islands-kit sample runs/ts --prompt "ROMEO:" --temperature 0.8 --top-k 5 --max-bytes 200
# ```

# %%
from islands_kit.notebooks import notebook_config
from islands_kit.run import run_experiment
from islands_kit.train.sampling import generate, load_model

sample_cfg = notebook_config("two_site", "smoke", seed, sample_steps, {"data.corpus": corpus})
sample_result = run_experiment(sample_cfg, out / "sample_run")
model, meta = load_model(out / "sample_run")
print(f"{meta['which']} model of {meta['experiment']} after step {meta['step']}: "
      f"final bpb {sample_result['final_val_bpb']:.3f}")
prompt = sample_prompt.encode()
settings = {"greedy": {"temperature": 0.0}, "T=0.8, top-5": {"temperature": 0.8, "top_k": 5, "seed": seed}}
for label, kw in settings.items():
    text = (prompt + generate(model, prompt, max_bytes=200, **kw)).decode("utf-8", "replace")
    print(f"--- {label}\n{text}")
