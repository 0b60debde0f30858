"""Hierarchical islands: S sites of C cells, cells synced often over their site's fast link, sites rarely over the WAN.

Hierarchical local SGD (Lin et al. 2018, arXiv 1808.07217) and HALoS (Kim et al. 2025, arXiv 2506.04531) sync
inside a region often and across regions rarely. Here island s·C + c is cell c of site s, each with its own replica
(``sync/hierarchical_spec.py``: the settings and their rules). Symbols: C = ``cells_per_site``, S = islands / C,
H₁ = ``site_every``, H₂ = ``sync.H``, P = ``sync.n_fragments``, τ = ``sync.tau``.

  * Site sync, every H₁ inner steps, channel ``site`` (fp32, the site link): ``site_mode=mean`` runs the log2 C
    butterfly rounds among each site's cells (round r: cell c with cell c XOR 2^r, each keeping ½(own + partner's)),
    so every cell ends with the site mean; ``pairwise`` runs one round per sync (r cycling), gossip.
  * WAN sync, Streaming DiLoCo (``sync/diloco.py``, subclassed unchanged) of the outer gradients Δ = θ_global − θ_cell
    every H₂ steps per fragment, through a hierarchical all-reduce: (1) a reduce-scatter inside each site (channel
    ``site``, fp32, recursive halving: cell c ends with the site mean of shard c of the fragment, the fragment padded
    to C equal shards); (2) each cell encodes its shard with ``sync.codec`` and error feedback and exchanges it with
    cell c of the partner site over the WAN (channel ``fragments``; log2 S rounds, later rounds re-encoded without
    feedback), keeping ½(own as sent + received); (3) an all-gather of the shards inside each site (``site``, fp32,
    recursive doubling). Step (1) runs when the fragment is sent; (2)'s transfer overlaps τ inner steps and (3)
    runs when it lands, before the outer step. So the WAN carries one codec payload per site and direction per sync,
    as between two monolithic sites, and every cell holds bit-identical Δ̄ and global fragments.
  * With C = 1 there is no site level: the strategy is lock-step DiLoCo between the sites, code path and numbers.

Sites and cells are averaged with equal weights (the rules ask for equal cell batches), the mean of the token
weights lock-step cells would get. Two link models at once: ``SiteLinks`` prices a transfer between cells of one
site on ``site_link`` and any other on ``link.*``, given to the transport when the run builds it
(``StrategySpec.link``). Not modelled: HALoS's asynchrony and hierarchical momentum (one outer optimizer, lock-step).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from islands_kit.comm.codecs import Payload, fp32_codec
from islands_kit.comm.link import LinkModel, Transfer, link_config
from islands_kit.comm.transport import decode
from islands_kit.config import ExperimentConfig
from islands_kit.sync.diloco import DiLoCo, custom_schedule
from islands_kit.sync.registry import BuildArgs
from islands_kit.sync.topology import Topology

SITE, WAN = "site", "fragments"  # the ledger's channels of the two link kinds


class SiteLinks(LinkModel):
    """The WAN (``link.*``) for transfers between sites, the site link for transfers between cells of one site; each
    direction keeps its own state in the model that carries it."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        super().__init__(cfg.link, seed=cfg.seed)
        h = cfg.sync.hierarchical
        self.cells_per_site = h.cells_per_site
        self.site = LinkModel(link_config(h.site_link), seed=cfg.seed)

    def same_site(self, src: int, dst: int) -> bool:
        return src // self.cells_per_site == dst // self.cells_per_site

    def transfer(self, nbytes: int, start_s: float, src: int, dst: int) -> Transfer:
        if self.same_site(src, dst):
            return self.site.transfer(nbytes, start_s, src, dst)
        return super().transfer(nbytes, start_s, src, dst)

    def state_dict(self) -> list[list[Any]]:
        return super().state_dict() + self.site.state_dict()

    def load_state_dict(self, rows: list[list[Any]]) -> None:
        super().load_state_dict([r for r in rows if not self.same_site(int(r[0]), int(r[1]))])
        self.site.load_state_dict([r for r in rows if self.same_site(int(r[0]), int(r[1]))])


def site_links(cfg: ExperimentConfig) -> LinkModel:
    """The run's link model (``StrategySpec.link`` of ``hierarchical_spec.SPEC``)."""
    return SiteLinks(cfg)


def site_rounds(n_sites: int, cells: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(inside, across): round r inside pairs cell c with c XOR 2^r of the same site; round r across pairs site s
    with s XOR 2^r, cell c with cell c (``topology.sites_of_cells``'s rounds, either list empty at a count of 1)."""
    inside = [tuple(s * cells + (c ^ (1 << r)) for s in range(n_sites) for c in range(cells))
              for r in range(cells.bit_length() - 1)]
    across = [tuple((s ^ (1 << r)) * cells + c for s in range(n_sites) for c in range(cells))
              for r in range(n_sites.bit_length() - 1)]
    return inside, across


def _fp32(x: torch.Tensor) -> Payload:
    return fp32_codec().encode(x)


class _WanResult:
    """A hierarchical WAN sync in flight, as DiLoCo's pending queue holds it (``arrival``'s keys: who takes part;
    ``wait``): on the first wait the WAN exchange is waited for and the shards are all-gathered inside the sites."""

    def __init__(self, owner: "Hierarchical", payloads: dict[int, Payload], handle: Any, numel: int, codec: Any) -> None:
        self.owner, self.payloads, self.handle, self.numel, self.codec = owner, payloads, handle, numel, codec
        self.arrival = {i: 0.0 for i in payloads}
        self._results: dict[int, torch.Tensor] | None = None

    def wait(self, island: int) -> torch.Tensor:
        if self._results is None:
            self._results = self.owner.finish_wan(self.payloads, self.handle, self.numel, self.codec)
        return self._results[island]

    def state(self) -> Any:
        raise NotImplementedError("hierarchical: a WAN sync in flight cannot be checkpointed (checkpoints=False)")


class Hierarchical(DiLoCo):
    """Streaming DiLoCo between sites over a hierarchical all-reduce, plus site syncs every H₁ steps (module doc)."""

    name = "hierarchical"

    def __init__(self, args: BuildArgs) -> None:
        cfg = args.cfg
        super().__init__(args.models, args.transport, args.fragments, cfg.sync, cfg.seed, custom_schedule(cfg),
                         hooks=args.hooks)
        h = cfg.sync.hierarchical
        self.C, self.H1, self.mode = h.cells_per_site, h.site_every, h.site_mode
        self.S = args.transport.n_islands // self.C
        self.inside, self.across = site_rounds(self.S, self.C)
        for rounds, what in ((self.inside, "site"), (self.across, "WAN")):
            if rounds:  # a round must be a permutation of the islands (Topology checks it)
                Topology(f"hierarchical {what} rounds", tuple(rounds))
        self.site_syncs = 0  # H₁ syncs so far
        self.wan_syncs = 0  # hierarchical all-reduces posted (fragment syncs across the sites)
        self.site_log: list[list[float]] = []  # [step, start_s, end_s] of each H₁ sync (the plot's marks)

    # -- the site level -------------------------------------------------------------------------------------------
    def _round(self, r: int, x: dict[int, torch.Tensor], channel: str) -> dict[int, torch.Tensor]:
        """One inside round r on fp32: every cell sends ``x[i]`` to its partner and gets the partner's back
        (waiting for it: the site link is fast, its time counts as idle)."""
        handle = self.transport.send_recv(channel, {i: _fp32(x[i]) for i in self.ids}, dict(enumerate(self.inside[r])))
        return {i: handle.wait(i).to(x[i].device) for i in self.ids}

    @torch.no_grad()
    def site_sync(self, step: int) -> None:
        """Every cell's whole replica mixed with its site's (``site_mode``), fp32 on channel ``site``."""
        first = self.ids[0]  # its clock stamps the sync (the first cell's: the same in every process layout)
        start = self.transport.clock.now[first]
        x = {i: torch.cat([v.flat() for v in self.views[i]]) for i in self.ids}
        rounds = range(len(self.inside)) if self.mode == "mean" else [self.site_syncs % len(self.inside)]
        for r in rounds:
            got = self._round(r, x, SITE)
            x = {i: (x[i] + got[i]) * 0.5 for i in self.ids}  # commutative: both partners hold the same bits
        for i in self.ids:
            off = 0
            for v in self.views[i]:
                v.assign(x[i][off:off + v.numel])
                off += v.numel
        self.site_syncs += 1
        self.site_log.append([step, start, self.transport.clock.now[first]])

    def after_inner_step(self, step: int, tokens: dict[int, int]) -> None:
        if self.C > 1 and step % self.H1 == 0:
            self.site_sync(step)
        super().after_inner_step(step, tokens)

    # -- the WAN level: a hierarchical all-reduce of the outer gradients --------------------------------------------
    def _send(self, step: int, p: int, apply_at: int | None = None, codec: Any = None) -> None:
        if self.C == 1:  # no site level: DiLoCo's own all-reduce between the sites
            super()._send(step, p, apply_at, codec)
            return
        codec = codec or self.codec
        numel = self.views[self.ids[0]][p].numel
        shard = math.ceil(numel / self.C)
        x = {}
        for i in self.ids:
            delta = self.outer_gradient(i, p)
            x[i] = torch.nn.functional.pad(delta, (0, shard * self.C - numel))
            self.tokens_since[i][p] = 0
            if self.keep_local:
                self.sent[(i, p)] = self.views[i][p].flat()
        parts = self._reduce_scatter(x, shard)
        payloads = {i: self.ef.compress((i, p), parts[i], codec, stochastic=self.cfg.stochastic_rounding,
                                        generator=self.gens[i])[0] for i in self.ids}
        handle = self.transport.send_recv(WAN, payloads, dict(enumerate(self.across[0]))) if self.across else None
        self.wan_syncs += 1
        lands_at = step + self.cfg.tau if apply_at is None else apply_at
        self.pending.push(lands_at, p, _WanResult(self, payloads, handle, numel, codec), sent_at=step)  # type: ignore[arg-type]

    def _reduce_scatter(self, x: dict[int, torch.Tensor], shard: int) -> dict[int, torch.Tensor]:
        """Recursive halving inside each site (highest bit first): cell c ends with the site mean of shard c."""
        for r in reversed(range(len(self.inside))):  # x[i]: the 2^(r+1) shards cell i still reduces
            keep, send = {}, {}
            for i in self.ids:
                lower, upper = x[i][:(1 << r) * shard], x[i][(1 << r) * shard:]
                keep[i], send[i] = (upper, lower) if (i % self.C) >> r & 1 else (lower, upper)
            got = self._round(r, send, SITE)
            x = {i: (keep[i] + got[i]) * 0.5 for i in self.ids}
        return x

    @torch.no_grad()
    def finish_wan(self, payloads: dict[int, Payload], handle: Any, numel: int, codec: Any) -> dict[int, torch.Tensor]:
        """Steps (2) and (3) of the module doc once the WAN exchange lands: the mean across the sites of each shard,
        then the all-gather of the shards inside each site; Δ̄ (the fragment's numel) per local cell."""
        x = {i: decode(payloads[i]) for i in self.ids}
        for r in range(len(self.across)):
            if r > 0:  # later rounds: the partial mean re-encoded, nearest rounding, no feedback
                payloads = {i: codec.encode(x[i]) for i in self.ids}
                x = {i: decode(payloads[i]) for i in self.ids}
                handle = self.transport.send_recv(WAN, payloads, dict(enumerate(self.across[r])))
            x = {i: (x[i] + handle.wait(i).to(x[i].device)) * 0.5 for i in self.ids}
        shard = x[self.ids[0]].numel()
        full = {i: torch.zeros(shard * self.C, dtype=torch.float32, device=x[i].device) for i in self.ids}
        for i in self.ids:
            c = i % self.C
            full[i][c * shard:(c + 1) * shard] = x[i]
        for r in range(len(self.inside)):  # recursive doubling: after round r cell c holds 2^(r+1) shards
            n = 1 << r
            base = {i: ((i % self.C) >> r << r) * shard for i in self.ids}
            got = self._round(r, {i: full[i][base[i]:base[i] + n * shard] for i in self.ids}, SITE)
            for i in self.ids:
                other = (((i % self.C) ^ n) >> r << r) * shard
                full[i][other:other + n * shard] = got[i]
        return {i: full[i][:numel] for i in self.ids}

    # -- what the run records -------------------------------------------------------------------------------------
    def result_fields(self) -> dict[str, Any]:
        """result.json's ``hierarchical`` section: the shape, the syncs of each level, the bytes and busy seconds of
        the strategy's own two channels (``site_bytes``: H1 syncs, reduce-scatters and all-gathers; ``wan_bytes``: the
        fragments), and every byte each link kind carried whatever its channel (``site_link_bytes``,
        ``wan_link_bytes``: the MoE routing statistics' ring crosses both kinds). This process's ledger is the
        world's when the result is written."""
        led = self.transport.ledger
        busy = {ch: sum(end - start for start, end, _, _, _, c in led.timeline if c == ch) for ch in (SITE, WAN)}
        on_site = sum(b for (src, dst), b in led.links.items() if src // self.C == dst // self.C)
        return {"hierarchical": {
            "sites": self.S, "cells_per_site": self.C, "site_every": self.H1, "site_mode": self.mode,
            "site_syncs": self.site_syncs, "wan_syncs": self.wan_syncs,
            "site_bytes": led.bytes(SITE), "wan_bytes": led.bytes(WAN),
            "site_link_bytes": on_site, "wan_link_bytes": sum(led.links.values()) - on_site,
            "site_transfer_s": busy[SITE], "wan_transfer_s": busy[WAN],
            "site_sync_times": self.site_log}}


def build(a: BuildArgs) -> Hierarchical:
    """The strategy of ``sync/hierarchical_spec.py``'s spec."""
    return Hierarchical(a)
