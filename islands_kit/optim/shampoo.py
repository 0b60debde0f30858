"""Shampoo with grafting and block ownership across ranks (a Distributed Shampoo variant).

Papers: Shampoo (Gupta, Koren & Singer 2018, arXiv:1802.09568); Distributed Shampoo (Shi et al. 2023,
arXiv:2309.06497), whose names and defaults we follow. For a gradient block ``G`` (m x n) of a matrix parameter:

    L <- beta2_s L + (1 - beta2_s) G G^T        R <- beta2_s R + (1 - beta2_s) G^T G       (beta2_s = ``shampoo_beta2``;
                                                                                          1.0 means plain sums L += G G^T)
    P  = L^{-1/p} M R^{-1/p}                    p = 2 * order = 4 (``exponent_override`` > 0 replaces p)
    D  = P * ||D_graft|| / ||P||                (norms per block: layer-wise grafting)
    theta <- (1 - lr * wd) theta - lr * momentum(D)

``M`` is the filtered gradient (the Adam first moment, ``betas[0]``; the raw gradient when ``betas[0] == 0``) and
``D_graft`` the grafting optimizer's direction (adam | adagrad | rmsprop | sgd, second moment ``betas[1]``, epsilon
``grafting_epsilon``). Roots come from ``matrix_functions.matrix_inverse_root`` (eigh in ``inv_root_dtype`` with
``epsilon`` added to the eigenvalues), recomputed every ``precondition_frequency`` steps.

Treatment of shapes (documented choices):
  * 0-D and 1-D parameters (norm gains, biases, the router bias): the grafting optimizer alone.
  * 2-D (m, n): one matrix.  k-D with k >= 3, shape (*S, m, n): a stack of prod(S) independent matrices -- an MoE expert
    weight (E, d, f) gives E blocks, each expert preconditioned on its own, and all of them are batched in one bmm/eigh.
  * Each matrix dimension larger than ``max_preconditioner_dim`` is split into nearly equal, zero-padded blocks
    (``optim/blocking.py``); every block of a parameter has one shape (bs_m, bs_n) and its factors are stored stacked:
    L (k, bs_m, bs_m), R (k, bs_n, bs_n).

Schedule: steps count from 1 per parameter. Factors accumulate from step 1; the Shampoo direction is used from step
``start_preconditioning_step`` on; roots are (re)computed at that first step and whenever ``step % precondition_frequency
== 0``. Before that only the grafting optimizer acts. ``start_preconditioning_step=math.inf`` switches Shampoo off
entirely (no factors are even allocated): the optimizer is then exactly its grafting optimizer, e.g. Adam/AdamW. A very
large int has the same effect on the updates but still accumulates (unused) factors.

Parameters whose ``grad is None`` this step (idle MoE experts in separate tensors, frozen parts) are skipped like in
``torch.optim.Adam``: their value, state and step counter stay untouched, so their bias corrections and root schedule
continue from where they were when they next receive a gradient.

Failure policy: when a root's eigendecomposition raises or gives non-finite values (or its factor is non-finite), the
previous root (identity before the first success) is kept and ``self.root_failures`` is incremented. A non-finite
Shampoo direction for a block falls back to that block's grafting direction. Parameters never receive NaN from here.

Distribution (block ownership): with ``process_group`` a group of ranks holding identical gradients (e.g. the
data-parallel ranks of one island after their gradient all-reduce), the preconditioner blocks of all parameters are
assigned to ranks greedily by cost (largest first, to the least-loaded rank). Each rank stores factors and roots only for
its own blocks and computes only their roots and directions; the directions are all-gathered as one flat buffer so every
rank applies the identical update. ``process_group=None`` means no sharing (this process owns every block) -- it never
defaults to WORLD, because islands are separate replicas with different gradients. A group of one takes the same code
path with the collective skipped. A rank's ``state_dict`` holds the factors of its own blocks only: resume with the same
group size and rank.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist
from torch import Tensor

from islands_kit.optim.blocking import BlockLayout, build_layouts
from islands_kit.optim.matrix_functions import inverse_roots_or_previous

__all__ = ["Shampoo", "GRAFTING_TYPES"]

GRAFTING_TYPES = ("adam", "adagrad", "rmsprop", "sgd")
_FP32_STATE_KEYS = ("factor_L", "factor_R", "root_L", "root_R")  # kept in float32 whatever the parameter dtype


def _require(cond: bool, name: str, rule: str, value: Any) -> None:
    if not cond:
        raise ValueError(f"{name}: {rule} (got {value!r})")


class Shampoo(torch.optim.Optimizer):
    """Shampoo with Adam/AdaGrad/RMSProp/SGD grafting, blocking and block ownership across ranks.

    Args (paper symbols in brackets):
        lr: learning rate [eta]. betas: (beta1 of the filtered gradient / Adam first moment, beta2 of the grafting
            second moment). epsilon: factor regulariser [epsilon I] for the inverse roots. shampoo_beta2: factor moving
            average [beta2 of Distributed Shampoo]; 1.0 = plain sums. grafting: adam | adagrad | rmsprop | sgd (rmsprop =
            adam's second moment without bias correction; adagrad = running sum). grafting_epsilon: epsilon of the
            grafting denominator. weight_decay: decoupled (AdamW, theta *= 1 - lr*wd) unless decoupled_weight_decay=False
            (then L2: g += wd*theta). momentum/nesterov: heavy-ball momentum on the final direction. use_bias_correction:
            Adam bias corrections of both moments (and of the factors when shampoo_beta2 < 1). max_preconditioner_dim:
            block size cap. precondition_frequency / start_preconditioning_step: see the module docstring.
            exponent_override: p in X^{-1/p} for both factors (0 = default 2*order = 4). inv_root_dtype: eigh precision.
            process_group: ranks that share the root work (None = this process alone).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        epsilon: float = 1e-12,
        shampoo_beta2: float = 1.0,
        grafting: str = "adam",
        grafting_epsilon: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        nesterov: bool = False,
        use_bias_correction: bool = True,
        max_preconditioner_dim: int = 1024,
        precondition_frequency: int = 10,
        start_preconditioning_step: int | float = 10,
        exponent_override: float = 0.0,
        inv_root_dtype: torch.dtype = torch.float64,
        process_group: dist.ProcessGroup | None = None,
        decoupled_weight_decay: bool = True,
    ) -> None:
        defaults = dict(
            lr=lr, betas=tuple(betas), epsilon=epsilon, shampoo_beta2=shampoo_beta2, grafting=grafting,
            grafting_epsilon=grafting_epsilon, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
            use_bias_correction=use_bias_correction, max_preconditioner_dim=max_preconditioner_dim,
            precondition_frequency=precondition_frequency, start_preconditioning_step=start_preconditioning_step,
            exponent_override=exponent_override, inv_root_dtype=inv_root_dtype,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        self._layouts: dict[Tensor, BlockLayout] | None = None
        if process_group is None:
            self._rank, self._world = 0, 1
        else:
            _require(dist.is_available() and dist.is_initialized(), "process_group", "needs torch.distributed to be initialised", process_group)
            self._rank, self._world = dist.get_rank(process_group), dist.get_world_size(process_group)
        self.process_group = process_group
        self.root_failures = 0  # eigendecompositions that failed (previous root kept)
        super().__init__(params, defaults)

    @staticmethod
    def _validate(g: dict[str, Any]) -> None:
        _require(g["lr"] > 0, "lr", "must be > 0", g["lr"])
        b = g["betas"]
        _require(len(b) == 2 and all(0.0 <= x < 1.0 for x in b), "betas", "must both be in [0, 1)", b)
        _require(g["epsilon"] > 0, "epsilon", "must be > 0", g["epsilon"])
        _require(0.0 < g["shampoo_beta2"] <= 1.0, "shampoo_beta2", "must be in (0, 1] (1 = plain sums)", g["shampoo_beta2"])
        _require(g["grafting"] in GRAFTING_TYPES, "grafting", "must be one of " + "|".join(GRAFTING_TYPES), g["grafting"])
        _require(g["grafting_epsilon"] > 0, "grafting_epsilon", "must be > 0", g["grafting_epsilon"])
        _require(g["weight_decay"] >= 0, "weight_decay", "must be >= 0", g["weight_decay"])
        _require(0.0 <= g["momentum"] < 1.0, "momentum", "must be in [0, 1)", g["momentum"])
        _require(not g["nesterov"] or g["momentum"] > 0, "nesterov", "must be False when momentum == 0 (Nesterov needs momentum > 0)", g["nesterov"])
        _require(int(g["max_preconditioner_dim"]) == g["max_preconditioner_dim"] and g["max_preconditioner_dim"] >= 1,
                 "max_preconditioner_dim", "must be an integer >= 1", g["max_preconditioner_dim"])
        _require(int(g["precondition_frequency"]) == g["precondition_frequency"] and g["precondition_frequency"] >= 1,
                 "precondition_frequency", "must be an integer >= 1", g["precondition_frequency"])
        s = g["start_preconditioning_step"]
        _require(s >= 0 and (s == math.inf or int(s) == s), "start_preconditioning_step", "must be an integer >= 0 or math.inf (off)", s)
        _require(g["exponent_override"] >= 0, "exponent_override", "must be >= 0 (0 = default root 2*order)", g["exponent_override"])
        _require(g["inv_root_dtype"] in (torch.float32, torch.float64), "inv_root_dtype", "must be torch.float32 or torch.float64",
                 g["inv_root_dtype"])

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if self._layouts is not None and self._world > 1 and self.state:
            raise RuntimeError("add_param_group: cannot add parameters after the first step when blocks are shared across ranks")
        super().add_param_group(param_group)
        self._validate(self.param_groups[-1])
        self._layouts = None  # rebuilt (and ownership re-balanced) at the next step

    def _init_state(self, p: Tensor, g: dict[str, Any], lay: BlockLayout | None) -> dict[str, Any]:
        st = self.state[p]
        st["step"] = 0
        if g["betas"][0] > 0:
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if g["grafting"] != "sgd":
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if g["momentum"] > 0:
            st["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if lay is not None:
            ko, dev = len(lay.owned), p.device
            st["factor_L"] = torch.zeros(ko, lay.bs_m, lay.bs_m, dtype=torch.float32, device=dev)
            st["factor_R"] = torch.zeros(ko, lay.bs_n, lay.bs_n, dtype=torch.float32, device=dev)
            st["root_L"] = torch.eye(lay.bs_m, dtype=torch.float32, device=dev).expand(ko, -1, -1).clone()  # identity until the first root
            st["root_R"] = torch.eye(lay.bs_n, dtype=torch.float32, device=dev).expand(ko, -1, -1).clone()
            st["root_step"] = 0  # step of the last root computation; 0 = never
        return st

    # ---------------------------------------------------------------- the step
    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._layouts is None:
            self._layouts = build_layouts(self.param_groups, self._rank, self._world)

        work = []  # (p, group, state, layout, grad, filtered grad M, grafting direction)
        for g in self.param_groups:
            beta1, beta2 = g["betas"]
            for p in g["params"]:
                if p.grad is None:
                    continue  # idle: value, state and step counter untouched
                _require(not p.grad.is_sparse and not p.is_complex(), "params",
                         "sparse gradients and complex parameters are not supported", tuple(p.shape))
                lay = self._layouts.get(p)
                st = self.state[p] if self.state.get(p) else self._init_state(p, g, lay)
                st["step"] += 1
                t = st["step"]
                grad = p.grad
                if g["weight_decay"] and not g["decoupled_weight_decay"]:
                    grad = grad.add(p, alpha=g["weight_decay"])  # L2 (Adam style)
                bc = g["use_bias_correction"]
                if beta1 > 0:
                    st["exp_avg"].lerp_(grad, 1 - beta1)
                M = st["exp_avg"] if beta1 > 0 else grad  # filtered gradient; its 1/(1-beta1^t) is applied as a scalar at the end
                if g["grafting"] == "sgd":
                    graft = M.clone()
                else:
                    v = st["exp_avg_sq"]
                    if g["grafting"] == "adagrad":
                        v.addcmul_(grad, grad)
                        denom = v.sqrt().add_(g["grafting_epsilon"])
                    else:
                        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                        corr = math.sqrt(1 - beta2**t) if (bc and g["grafting"] == "adam") else 1.0
                        denom = (v.sqrt() / corr).add_(g["grafting_epsilon"])
                    graft = M / denom
                work.append((p, g, st, lay, grad, M, graft))

        self._update_factors_and_roots(work)
        shampoo_dirs = self._exchange(self._owned_directions(work))

        for p, g, st, lay, _grad, _M, graft in work:
            t = st["step"]
            direction = graft
            if p in shampoo_dirs:
                assert lay is not None  # only blocked parameters have a Shampoo direction
                P = shampoo_dirs[p]  # (k, bs_m, bs_n), raw Shampoo direction of every block
                Gb = lay.block(graft.float())
                gn, pn = Gb.norm(dim=(-2, -1)), P.norm(dim=(-2, -1))  # (k,)
                ok = (pn > 0) & torch.isfinite(pn)
                scale = torch.where(ok, gn / torch.where(ok, pn, 1.0), 0.0)[:, None, None]
                # Blocks whose Shampoo direction is non-finite or zero fall back to the grafting direction.
                Db = torch.where(ok[:, None, None], P * scale, Gb)
                direction = lay.unblock(Db, p.shape).to(p.dtype)
            beta1 = g["betas"][0]
            bc1 = 1 - beta1**t if (g["use_bias_correction"] and beta1 > 0) else 1.0
            lr = g["lr"]
            if g["weight_decay"] and g["decoupled_weight_decay"]:
                p.mul_(1 - lr * g["weight_decay"])  # AdamW order: decay, then step
            if g["momentum"] > 0:
                buf = st["momentum_buffer"]
                buf.mul_(g["momentum"]).add_(direction, alpha=1.0 / bc1)
                update = buf.mul(g["momentum"]).add_(direction, alpha=1.0 / bc1) if g["nesterov"] else buf
                p.add_(update, alpha=-lr)
            else:
                p.add_(direction, alpha=-(lr / bc1))
        return loss

    def _update_factors_and_roots(self, work: list) -> None:
        """Accumulate this rank's factors; recompute the due roots, batched by matrix size across all parameters."""
        due: dict[int, list[tuple[dict[str, Any], str, Tensor, dict[str, Any]]]] = {}  # n -> [(state, key, factor, group)]
        for _p, g, st, lay, grad, _M, _graft in work:
            if lay is None or len(lay.owned) == 0:
                continue
            t, b2 = st["step"], g["shampoo_beta2"]
            Gb = lay.block(grad.float())  # (k, bs_m, bs_n)
            if len(lay.owned) != lay.k:
                Gb = Gb[lay.owned]  # (k_own, bs_m, bs_n)
            a = 1.0 if b2 == 1.0 else 1 - b2
            st["factor_L"].baddbmm_(Gb, Gb.mT, beta=b2, alpha=a)  # L <- b2 L + (1 - b2) G G^T
            st["factor_R"].baddbmm_(Gb.mT, Gb, beta=b2, alpha=a)  # R <- b2 R + (1 - b2) G^T G
            if t >= g["start_preconditioning_step"] and (st["root_step"] == 0 or t % g["precondition_frequency"] == 0):
                corr = 1 - b2**t if (b2 < 1.0 and g["use_bias_correction"]) else 1.0
                st["root_step"] = t
                for key in ("L", "R"):
                    f = st["factor_" + key]
                    due.setdefault(f.shape[-1], []).append((st, key, f / corr if corr != 1.0 else f, g))
        for items in due.values():
            # One eigh per (size, root, epsilon, dtype) batch; groups rarely differ, so this is usually one call per size.
            by_args: dict[tuple, list] = {}
            for st, key, f, g in items:
                root = g["exponent_override"] if g["exponent_override"] > 0 else 4.0  # 2 * order, order = 2
                by_args.setdefault((root, g["epsilon"], g["inv_root_dtype"]), []).append((st, key, f))
            for (root, eps, dtype), its in by_args.items():
                facs = torch.cat([f for _, _, f in its])  # (sum k_own, n, n)
                prev = torch.cat([st["root_" + key] for st, key, _ in its])
                roots, failed = inverse_roots_or_previous(facs, prev, root, eps, dtype)
                self.root_failures += failed
                for (st, key, _), r in zip(its, roots.split([f.shape[0] for _, _, f in its])):
                    st["root_" + key].copy_(r)

    def _owned_directions(self, work: list) -> dict[Tensor, Tensor]:
        """P = L^{-1/p} M R^{-1/p} for this rank's blocks of every parameter in its Shampoo phase."""
        out = {}
        for p, g, st, lay, _grad, M, _graft in work:
            if lay is None or st["step"] < g["start_preconditioning_step"]:
                continue
            Mb = lay.block(M.float())  # (k, bs_m, bs_n)
            if len(lay.owned) != lay.k:
                Mb = Mb[lay.owned]  # (k_own, bs_m, bs_n)
            out[p] = torch.bmm(torch.bmm(st["root_L"], Mb), st["root_R"])  # (k_own, bs_m, bs_n)
        return out

    def _exchange(self, owned: dict[Tensor, Tensor]) -> dict[Tensor, Tensor]:
        """All-gather the owners' block directions so every rank holds all k blocks of every parameter.

        Each rank packs its blocks (parameters in a fixed order, blocks ascending) into one flat float32 buffer padded
        to the longest rank's length; one all_gather moves them; every rank unpacks every rank's segment. Every rank
        knows every owner map and step, so the layout needs no extra messages. A group of one returns ``owned`` as is.
        """
        if self._world == 1 or not owned:
            return owned
        params = list(owned)  # same order on every rank (param_groups order)
        assert self._layouts is not None  # built by step() before any exchange
        sizes = [[int((self._layouts[p].owners == r).sum()) * self._layouts[p].bs_m * self._layouts[p].bs_n for p in params]
                 for r in range(self._world)]
        length = max(sum(s) for s in sizes)
        send = torch.zeros(length, dtype=torch.float32, device=params[0].device)
        if sum(sizes[self._rank]):
            flat = torch.cat([owned[p].reshape(-1) for p in params])
            send[: flat.numel()] = flat
        recv = torch.empty(self._world * length, dtype=torch.float32, device=send.device)
        dist.all_gather(list(recv.view(self._world, length).unbind(0)), send, group=self.process_group)
        full = {p: torch.empty(self._layouts[p].k, self._layouts[p].bs_m, self._layouts[p].bs_n, device=send.device) for p in params}
        for r in range(self._world):
            seg = recv[r * length : r * length + sum(sizes[r])].split(sizes[r])
            for p, s in zip(params, seg):
                lay = self._layouts[p]
                idx = (lay.owners == r).nonzero().flatten()
                full[p][idx] = s.view(len(idx), lay.bs_m, lay.bs_n)
        return full

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Standard load, except that factors and roots stay float32 (torch casts float state to the param dtype)."""
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        super().load_state_dict(state_dict)
        for i, p in zip(saved_ids, params):
            for key in _FP32_STATE_KEYS:
                if key in state_dict["state"].get(i, {}):
                    self.state[p][key] = state_dict["state"][i][key].to(device=p.device, dtype=torch.float32).clone()
        self._layouts = None
