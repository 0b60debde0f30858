"""Sync strategies against plain references: DiLoCo H=1 == synchronous training, streaming P=1 == a hand-written
DiLoCo, butterfly schedule pinned and its mixing matrix uniform after log2(n) rounds, the Butterfly class equal to that
matrix (delay 0) and to a brute-force simulation of its merges (delay > 0) on scalar models."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from islands_kit.comm.transport import LocalTransport
from islands_kit.config import SyncConfig
from islands_kit.sync.base import strided_fragments
from islands_kit.sync.butterfly import Butterfly, butterfly_schedule, check_power_of_two, mixing_matrix, window_positions
from islands_kit.sync.butterfly_spec import ButterflyConfig
from islands_kit.sync.ddp import DDP, ddp_equivalent_bytes
from islands_kit.sync.diloco import DiLoCo
from islands_kit.sync.diloco_spec import DiLoCoConfig
from islands_kit.sync.schedule import fragment_offsets, streaming_schedule


class TinyNet(nn.Module):
    """Three 'blocks' so fragments have something to split."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = torch.tanh(b(x))
        return self.head(x)

    def block_param_names(self) -> list[list[str]]:
        return [[f"blocks.{i}.weight", f"blocks.{i}.bias"] for i in range(3)]

    def extra_param_names(self) -> dict[str, list[str]]:
        return {"head": ["head.weight", "head.bias"]}


def make_replicas(n: int, seed: int = 0) -> dict[int, TinyNet]:
    torch.manual_seed(seed)
    base = TinyNet()
    return {i: copy.deepcopy(base) for i in range(n)}


def batches(n: int, steps: int, seed: int = 1) -> list[dict[int, tuple[torch.Tensor, torch.Tensor]]]:
    g = torch.Generator().manual_seed(seed)
    return [{i: (torch.randn(4, 6, generator=g), torch.randn(4, 2, generator=g)) for i in range(n)} for _ in range(steps)]


def train(models, strategy, data, lr=0.1, tokens=None):
    opts = {i: torch.optim.SGD(m.parameters(), lr=lr) for i, m in models.items()}
    tokens = tokens or {i: 4 for i in models}
    for t, batch in enumerate(data, start=1):
        for i, m in models.items():
            x, y = batch[i]
            ((m(x) - y) ** 2).mean().backward()
        strategy.reduce_gradients(t, tokens)
        for i in models:
            opts[i].step()
            opts[i].zero_grad()
        strategy.after_inner_step(t, tokens)
    strategy.finalize(len(data))


def flat(m: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def test_diloco_h1_equals_synchronous_training():
    """H=1, one fragment, tau=0, fp32, outer SGD lr 1 without momentum == data-parallel SGD on the summed batch."""
    data = batches(2, 6)
    ref = make_replicas(2)
    train(ref, DDP(ref, LocalTransport(2)), data)
    models = make_replicas(2)
    cfg = SyncConfig(strategy="diloco", H=1, n_fragments=1, tau=0, codec="fp32", error_feedback=False,
                     diloco=DiLoCoConfig(alpha=0.0, outer_lr=1.0, outer_momentum=0.0))
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 1)
    strat = DiLoCo(models, LocalTransport(2), frags, cfg, seed=0)
    train(models, strat, data)
    g = torch.cat([strat.global_params[0].detach()])
    # the global copy is in fragment order; compare through eval_state
    ev = strat.eval_state()
    for name, p in ref[0].named_parameters():
        assert torch.allclose(ev[name], p.detach(), atol=1e-6), name
    assert torch.allclose(flat(models[0]), flat(ref[0]), atol=1e-6)
    assert torch.allclose(flat(models[1]), flat(ref[1]), atol=1e-6)
    assert g.numel() == flat(ref[0]).numel()


def test_ddp_replicas_equal_single_model_on_summed_batch():
    data = batches(2, 5)
    models = make_replicas(2)
    train(models, DDP(models, LocalTransport(2)), data)
    torch.manual_seed(0)
    single = TinyNet()
    opt = torch.optim.SGD(single.parameters(), lr=0.1)
    for batch in data:
        x = torch.cat([batch[0][0], batch[1][0]])
        y = torch.cat([batch[0][1], batch[1][1]])
        ((single(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
    assert torch.allclose(flat(models[0]), flat(single), atol=1e-6)
    assert torch.equal(flat(models[0]), flat(models[1]))


def test_ddp_gives_every_replica_its_own_copy_of_the_mean_gradient():
    """The all-reduce reads the flattened gradients in place and copies the mean into each replica's gradients: the
    replicas never share gradient storage (clipping one in place must not touch another), also when a parameter had
    no gradient, and the reused flat buffers give the right mean again on the next step."""
    models = make_replicas(2)
    ddp = DDP(models, LocalTransport(2))
    for step, batch in enumerate(batches(2, 2), start=1):
        for i, m in models.items():
            m.zero_grad(set_to_none=True)
            x, y = batch[i]
            ((m(x) - y) ** 2).mean().backward()
        models[1].head.bias.grad = None  # reads as zeros
        expected = [(models[0].get_parameter(n).grad + (models[1].get_parameter(n).grad
                     if models[1].get_parameter(n).grad is not None else 0)) * 0.5 for n, _ in models[0].named_parameters()]
        ddp.reduce_gradients(step, {0: 4, 1: 4})
        for (n, p0), p1, e in zip(models[0].named_parameters(), models[1].parameters(), expected):
            assert torch.allclose(p0.grad, e, atol=1e-7) and torch.equal(p0.grad, p1.grad), n
            assert p0.grad.data_ptr() != p1.grad.data_ptr(), n
        models[0].blocks[0].weight.grad.mul_(0.0)
        assert models[1].blocks[0].weight.grad.abs().sum() > 0


def local_sgd_step(models, opts, batch) -> None:
    """One inner SGD step on every replica (no communication)."""
    for i, m in models.items():
        x, y = batch[i]
        ((m(x) - y) ** 2).mean().backward()
        opts[i].step()
        opts[i].zero_grad()


def reference_diloco(models, data, H, lr_outer, momentum, lr_inner=0.1):
    """Plain DiLoCo written out by hand: H local SGD steps, mean outer gradient, Nesterov SGD on the global copy."""
    glob = flat(models[0]).clone()
    buf = torch.zeros_like(glob)
    opts = {i: torch.optim.SGD(m.parameters(), lr=lr_inner) for i, m in models.items()}
    for t, batch in enumerate(data, start=1):
        local_sgd_step(models, opts, batch)
        if t % H == 0:
            delta = torch.stack([glob - flat(m) for m in models.values()]).mean(0)
            buf = momentum * buf + delta  # torch.optim.SGD's momentum buffer (dampening 0)
            glob = glob - lr_outer * (delta + momentum * buf)  # Nesterov
            for m in models.values():
                torch.nn.utils.vector_to_parameters(glob.clone(), m.parameters())
    return glob


def test_streaming_one_fragment_tau0_equals_plain_diloco():
    data = batches(2, 12)
    ref_models = make_replicas(2)
    glob_ref = reference_diloco(ref_models, data, H=4, lr_outer=0.7, momentum=0.9)
    models = make_replicas(2)
    # a single fragment in model.parameters() order so the flat vectors line up with the reference
    names = [[n for n, _ in models[0].named_parameters()]]
    cfg = SyncConfig(strategy="diloco", H=4, n_fragments=1, tau=0, codec="fp32", error_feedback=False,
                     diloco=DiLoCoConfig(alpha=0.0))
    strat = DiLoCo(models, LocalTransport(2), names, cfg, seed=0)
    opts = {i: torch.optim.SGD(m.parameters(), lr=0.1) for i, m in models.items()}
    for t, batch in enumerate(data, start=1):
        local_sgd_step(models, opts, batch)
        strat.after_inner_step(t, {0: 4, 1: 4})
    assert torch.allclose(strat.global_params[0].detach(), glob_ref, atol=1e-5)
    assert torch.allclose(flat(models[0]), glob_ref, atol=1e-5)


def test_streaming_schedule_offsets_and_peak_bytes():
    assert fragment_offsets(50, 1) == [0]
    assert fragment_offsets(50, 2) == [25, 0]
    sched = streaming_schedule(H=8, P=2, steps=16)
    assert sched == [(4, 0), (8, 1), (12, 0), (16, 1)]
    # each fragment carries ~1/P of the bytes of a full (non-streaming) sync
    models = make_replicas(2)
    n_total = sum(p.numel() for p in models[0].parameters())
    frags = strided_fragments(models[0].block_param_names(), models[0].extra_param_names(), 3)
    cfg = SyncConfig(strategy="diloco", H=6, n_fragments=3, tau=1, codec="fp32")
    tr = LocalTransport(2)
    strat = DiLoCo(models, tr, frags, cfg, seed=0)
    strat.after_inner_step(2, {0: 4, 1: 4})  # fragment 0 (offset 2)
    sizes = [sum(dict(models[0].named_parameters())[n].numel() for n in f) for f in frags]
    assert tr.ledger.bytes("fragments") == 2 * 4 * sizes[0]  # two directions, fp32
    assert max(sizes) < n_total


@pytest.mark.parametrize("n", [2, 4, 8])
def test_mixing_matrix_uniform_after_log2_rounds(n):
    R = check_power_of_two(n)
    W = mixing_matrix(n, list(range(R)))
    assert torch.allclose(W, torch.full((n, n), 1.0 / n, dtype=torch.float64), atol=1e-15)
    if R > 1:  # one round short: not every update has reached every cell
        assert (mixing_matrix(n, list(range(R - 1))) == 0).any()
    # rows sum to one: a merge never creates or loses mass
    assert torch.allclose(W.sum(1), torch.ones(n, dtype=torch.float64))


@pytest.mark.parametrize("n", [0, 1, 3, 6, 12])
def test_butterfly_rejects_non_power_of_two(n):
    with pytest.raises(ValueError, match="power-of-two"):
        check_power_of_two(n)


def test_butterfly_schedule_pinned_small_cases():
    # 2 cells, H=4, 2 exchanges per window, one fragment: window positions {0, 2} -> steps 1, 3, 5, 7
    s = butterfly_schedule(2, H=4, E=2, P=1, steps=8)
    assert [(e.step, e.fragment, e.round) for e in s] == [(1, 0, 0), (3, 0, 0), (5, 0, 0), (7, 0, 0)]
    assert s[0].pairs == ((0, 1), (1, 0))
    # 4 cells, H=8, 2 exchanges per window, 2 fragments: rounds alternate 0, 1 per fragment
    s = butterfly_schedule(4, H=8, E=2, P=2, steps=8)
    assert [(e.step, e.fragment, e.round) for e in s] == [(1, 0, 0), (3, 1, 0), (5, 0, 1), (7, 1, 1)]
    assert s[2].pairs == ((0, 2), (1, 3), (2, 0), (3, 1))
    # 8 cells, the seed's schedule: H=50, 6 exchanges per fragment per window, rounds 0,1,2,0,1,2
    assert window_positions(50, 6, 1, 0) == [0, 8, 17, 25, 33, 42]
    s = butterfly_schedule(8, H=50, E=6, P=2, steps=100)
    for p in range(2):
        mine = [e for e in s if e.fragment == p]
        assert len(mine) == 12
        assert [e.round for e in mine] == [0, 1, 2] * 4
        assert all(j == i ^ (1 << e.round) for e in mine for i, j in e.pairs)
    assert [e.step for e in s if e.fragment == 1][:3] == [5, 13, 22]


def test_butterfly_instant_merges_reach_the_average():
    """Delay 0, no training in between: after R exchanges of one fragment every cell holds the mean."""
    n = 8
    models = make_replicas(n)
    for i, m in models.items():  # give every cell different weights
        with torch.no_grad():
            for p in m.parameters():
                p.add_(float(i))
    mean = torch.stack([flat(m) for m in models.values()]).mean(0)
    names = [[nm for nm, _ in models[0].named_parameters()]]
    cfg = SyncConfig(strategy="butterfly", H=3, n_fragments=1, tau=0, codec="fp32", error_feedback=False,
                     butterfly=ButterflyConfig(exchanges_per_window=3))
    tr = LocalTransport(n)
    strat = Butterfly(models, tr, names, cfg, seed=0)
    for t in (1, 2, 3):
        strat.after_inner_step(t, {i: 1 for i in range(n)})
    for m in models.values():
        assert torch.allclose(flat(m), mean, atol=1e-5)
    # every exchange is a pairwise send: n messages per exchange, 4 bytes per value
    assert tr.ledger.channels["fragments"].messages == 3 * n
    assert tr.ledger.bytes("fragments") == 3 * n * 4 * mean.numel()
    assert all(src ^ dst in (1, 2, 4) for (src, dst) in tr.ledger.links)


class Scalars(nn.Module):
    """One scalar parameter per fragment: a cell's whole state is a point in R^P, so merges can be checked by hand."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.w = nn.ParameterList([nn.Parameter(torch.tensor([v], dtype=torch.float64)) for v in values])

    def state(self) -> list[float]:
        return [float(p.detach()) for p in self.w]


def scalar_butterfly(n: int, P: int, H: int, E: int, delay: int, init: torch.Tensor) -> tuple[dict[int, Scalars], Butterfly]:
    models = {i: Scalars(init[i].tolist()) for i in range(n)}
    cfg = SyncConfig(strategy="butterfly", H=H, n_fragments=P, tau=delay, codec="fp32", error_feedback=False,
                     butterfly=ButterflyConfig(exchanges_per_window=E))
    return models, Butterfly(models, LocalTransport(n), [[f"w.{p}"] for p in range(P)], cfg, seed=0)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_butterfly_class_equals_its_mixing_matrix(n):
    """The Butterfly strategy itself (delay 0, no training in between) applies exactly mixing_matrix(rounds so far)
    to every fragment, after every exchange: one scalar per cell and fragment, values that halve exactly."""
    P, H, E = 2, 4, 2
    init = torch.randint(-64, 64, (n, P)).double()  # (cells, fragments)
    models, strat = scalar_butterfly(n, P, H, E, 0, init)
    rounds: list[list[int]] = [[] for _ in range(P)]
    exchanges = butterfly_schedule(n, H, E, P, steps=3 * H)
    for t in range(1, 3 * H + 1):
        strat.after_inner_step(t, {i: 1 for i in range(n)})
        for e in (e for e in exchanges if e.step == t):
            rounds[e.fragment].append(e.round)
        got = torch.tensor([models[i].state() for i in range(n)], dtype=torch.float64)  # (cells, fragments)
        for p in range(P):
            assert torch.equal(got[:, p], mixing_matrix(n, rounds[p]) @ init[:, p]), (t, p, rounds[p])
    assert all(len(r) >= check_power_of_two(n) for r in rounds)  # every fragment went through a whole butterfly


def brute_force_butterfly(n: int, P: int, H: int, E: int, delay: int, init: torch.Tensor,
                          local: torch.Tensor) -> torch.Tensor:
    """The merge rule simulated literally: after local step t every cell adds ``local[t-1]`` (its own progress); an
    exchange of fragment p after step t records every cell's value as sent; after step t + delay cell i sets
    θ_i[p] ← (θ_i[p] + sent_j) / 2 for its partner j; merges still in flight at the end land in order."""
    x = init.clone()  # (cells, fragments)
    exchanges = butterfly_schedule(n, H, E, P, steps=local.shape[0])
    in_flight: list[tuple[int, int, dict[int, int], torch.Tensor]] = []  # (apply_at, fragment, pairs, sent values)

    def land(step: int | None) -> None:
        for item in [f for f in in_flight if step is None or f[0] <= step]:
            in_flight.remove(item)
            _, p, pairs, sent = item
            x[:, p] = torch.stack([(x[i, p] + sent[pairs[i]]) / 2 for i in range(n)])

    for t in range(1, local.shape[0] + 1):
        x += local[t - 1]
        land(t)
        for e in (e for e in exchanges if e.step == t):
            in_flight.append((t + delay, e.fragment, dict(e.pairs), x[:, e.fragment].clone()))
        land(t)
    land(None)
    return x


@pytest.mark.parametrize("n,delay", [(2, 1), (4, 2), (8, 2), (8, 3)])
def test_butterfly_with_delay_equals_brute_force_merges(n, delay):
    """delay > 0 with local progress between exchange and merge: the strategy equals the literal simulation of
    θ_i ← ½ (θ_i(t + d) + θ_j(t)), fragment by fragment, including merges still in flight at finalize."""
    P, H, E, steps = 2, 8, 3, 21
    g = torch.Generator().manual_seed(n + delay)
    init = torch.randn(n, P, generator=g, dtype=torch.float64)
    local = torch.randn(steps, n, P, generator=g, dtype=torch.float64)  # each cell's progress per inner step
    models, strat = scalar_butterfly(n, P, H, E, delay, init)
    for t in range(1, steps + 1):
        with torch.no_grad():
            for i in range(n):
                for p in range(P):
                    models[i].w[p] += local[t - 1, i, p]
        strat.after_inner_step(t, {i: 1 for i in range(n)})
    strat.finalize(steps)
    got = torch.tensor([models[i].state() for i in range(n)], dtype=torch.float64)
    want = brute_force_butterfly(n, P, H, E, delay, init, local)
    # the fp32 codec rounds each value sent to float32: that is the only difference from the float64 simulation
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert not torch.allclose(want, brute_force_butterfly(n, P, H, E, 0, init, local), atol=1e-3)  # delay matters


def test_ddp_equivalent_bytes_formula():
    assert ddp_equivalent_bytes(1000, 1, 10) == 0
    assert ddp_equivalent_bytes(1000, 2, 10) == 8 * 1000 * 10
    assert ddp_equivalent_bytes(1000, 8, 1) == 8 * 7 * 1000


@pytest.mark.parametrize("n", [2, 3, 8])
def test_ddp_ledger_matches_formula(n):
    """One cost model: the ledger of a real DDP run and ddp_equivalent_bytes agree at every island count (they
    differed 4x at 8 islands while the ledger priced all_reduce as an all-gather)."""
    models = make_replicas(n)
    tr = LocalTransport(n)
    train(models, DDP(models, tr), batches(n, 3))
    n_params = sum(p.numel() for p in models[0].parameters())
    assert tr.ledger.bytes("gradients") == ddp_equivalent_bytes(n_params, n, 3) == 3 * 2 * (n - 1) * 4 * n_params


@pytest.mark.parametrize("n, nbytes", [(2, 1001), (3, 10), (5, 7), (8, 1001), (8, 3)])
def test_all_reduce_is_priced_as_a_ring(n, nbytes):
    """Each island sends only to its ring successor, 2 (n - 1) S bytes in all; a ring cannot finish before its last
    member has posted; the result is still the exact token-weighted mean of the decoded payloads."""
    from islands_kit.comm.codecs import get_codec
    from islands_kit.comm.transport import ring_bytes, weighted_mean

    tr = LocalTransport(n)
    codec = get_codec("int8", 32)
    xs = {i: torch.arange(nbytes, dtype=torch.float32) * (i + 1) for i in range(n)}
    pay = {i: codec.encode(x) for i, x in xs.items()}
    S = pay[0].nbytes
    for i in range(n):
        tr.compute(i, 0.5 * i)
    h = tr.all_reduce("c", pay, {i: 1.0 for i in range(n)})
    assert set(tr.ledger.links) == {(i, (i + 1) % n) for i in range(n)}
    assert [tr.ledger.links[(i, (i + 1) % n)] for i in range(n)] == [ring_bytes(S, n, i) for i in range(n)]
    assert tr.ledger.bytes() == 2 * (n - 1) * S
    assert all(2 * (S - S // n - 1) <= ring_bytes(S, n, k) <= 2 * (S - S // n) for k in range(n))  # 2 (n-1)/n S each
    assert all(h.arrival[i] == 0.5 * (n - 1) for i in range(n))  # no link model: ready when the last member posts
    want = weighted_mean([codec.decode(pay[i]) for i in range(n)], [1.0] * n)
    assert all(torch.equal(h.wait(i), want) for i in range(n))


def test_pending_queue_order_and_checkpoint_round_trip():
    from islands_kit.comm.transport import Handle, SimClock
    from islands_kit.sync.base import PendingQueue

    clock = SimClock([0, 1])
    q = PendingQueue()
    for apply_at, frag in [(5, 1), (3, 0), (5, 0), (9, 1)]:
        q.push(apply_at, frag, Handle({0: torch.tensor([float(frag)]), 1: torch.tensor([2.0])}, {0: 0.5, 1: 0.7}, clock),
               sent_at=apply_at - 1)
    assert [(x.apply_at, x.fragment) for x in q.due(5)] == [(5, 1), (3, 0), (5, 0)]  # posting order
    assert len(q) == 1 and q.due(8) == []
    rows = q.state_dict()
    assert [(a, p, s) for a, p, _, _, s in rows] == [(9, 1, 8)]
    back = PendingQueue()
    back.load_state_dict(rows, SimClock([0, 1]))
    (x,) = list(back)
    assert (x.apply_at, x.fragment, x.sent_at) == (9, 1, 8) and x.handle.arrival == {0: 0.5, 1: 0.7}
    assert torch.equal(x.handle.wait(0), torch.tensor([1.0]))
    assert [(x.apply_at, x.fragment, x.sent_at) for x in back.drain()] == [(9, 1, 8)] and len(back) == 0
    q.push(2, 1, Handle({}, {}, clock))
    q.push(2, 0, Handle({}, {}, clock))
    q.push(1, 1, Handle({}, {}, clock))
    assert [(x.apply_at, x.fragment) for x in q.drain()] == [(1, 1), (2, 0), (2, 1), (9, 1)]  # landing order
