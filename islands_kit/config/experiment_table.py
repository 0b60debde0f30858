"""The experiments, one row each: islands, sync settings, the demo's own settings, colour and marker, notebook, words.

Every list of experiments in the kit is read from ``EXPERIMENT_TABLE``: validation (``config/experiment.py``), the
presets (``presets.py``), the CLI's choices, the golden fixtures, the scaling study, the notebooks, the plots'
colours and markers, the comparison's reference. A new experiment is one more row (``register_experiment``).

Torch-free, like the rest of ``config/``. The preset machinery (model sizes, lengths, hardware per preset) stays in
``presets.py``; a row says only what differs between experiments.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, overload

from islands_kit.config.link import LINK_PRESETS
from islands_kit.orbital import settings as orbital
from islands_kit.rules import ConfigError


@dataclass(frozen=True)
class Hardware:
    """A preset's hardware profiles (``islands.HARDWARE`` names): the two sites' and a cell's, with unit counts."""

    site_a: str
    n_a: int
    site_b: str
    n_b: int
    cell: str


Layout = Callable[[Hardware, int], "list[dict[str, Any]]"]  # (the preset's hardware, its batch scale) -> islands


def two_sites(hw: Hardware, k: int) -> list[dict[str, Any]]:
    """Site A: 2 data-parallel ranks of 12 sequences; site B: one rank accumulating 2 micro-batches of 8 — the seed's
    3:2 asymmetry (24 + 16 = 40 sequences a step, times the preset's batch scale ``k``). On the preset's hardware the
    per-step compute is then (nearly) equal — 3:2 throughput for 3:2 batches — as a well-planned two-site run would
    arrange."""
    return [dict(name="site-a", batch_size=24 * k, micro_batch_size=12 * k, dp_ranks=2, hardware=hw.site_a,
                 n_accelerators=hw.n_a),
            dict(name="site-b", batch_size=16 * k, micro_batch_size=8 * k, dp_ranks=1, hardware=hw.site_b,
                 n_accelerators=hw.n_b)]


def cells(n: int, batch: int = 5) -> Layout:
    """``n`` equal cells of ``batch`` sequences (8 x 5 = the two sites' 40), one accelerator each."""
    def layout(hw: Hardware, k: int) -> list[dict[str, Any]]:
        return [dict(name=f"cell-{i}", batch_size=batch * k, micro_batch_size=batch * k, dp_ranks=1, hardware=hw.cell,
                     n_accelerators=1) for i in range(n)]
    return layout


@dataclass(frozen=True)
class ExperimentRow:
    """One experiment. ``sync``, ``demo`` and ``demo_long`` are nested like ``presets.preset_dict``'s result:
    ``sync`` is its sync section at every preset, ``settings`` any other section it sets at every preset (its
    link), ``demo`` what the CPU demo presets set on top, ``demo_long`` what
    ``demo-long`` changes on top of ``demo``. ``reference``: the synchronous run every ratio is taken against (it
    must use a synchronous strategy)."""

    name: str
    description: str  # one line (CLI help, tables)
    islands: Layout
    sync: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    demo: dict[str, Any] = field(default_factory=dict)
    demo_long: dict[str, Any] = field(default_factory=dict)
    color: str = "#7f7f7f"
    marker: str = "o"
    notebook: str = ""  # notebooks/NAME.ipynb that runs it ("" = none)
    reference: bool = False
    scaling: bool = True  # one of the strategies the old scaling cross trained (SCALING_EXPERIMENTS)
    compare: bool = True  # in the default comparison (``make demo``, notebooks/compare.py) when it has a notebook


_TABLE: tuple[ExperimentRow, ...] = (
    ExperimentRow("baseline", "synchronous data-parallel", two_sites, dict(strategy="ddp"),
                  # the baseline keeps 3e-3: its winner on the tuning split (2.52e-3) is behind 3e-3 on the validation
                  # bytes at every seed, and a weaker baseline would flatter every ratio the demo shows
                  demo={"optim": {"lr": 3e-3}},
                  color="#1f77b4", marker="D", notebook="baseline", reference=True),
    # the tuned method (benchmarks/studies/protocol-demo.toml, RESULTS): outer SGD lr 1.0 without momentum (Nesterov matches it only
    # with a momentum warm-up), the two sites' outer gradients merged by radial-directional averaging (their mean norm
    # along their mean direction), the tau overlap steps kept on top of the new global state (keep_local) and the
    # final flush at int8; demo-long merges by the plain token-weighted mean, the tuning split's pick at 2400 steps
    # (RESULTS, "The demo at twice its length")
    ExperimentRow("two_site", "Streaming DiLoCo between two sites", two_sites,
                  dict(strategy="diloco", H=50, n_fragments=2, tau=1, codec="int4", stochastic_rounding=True,
                       error_feedback=True, routing_sync=True,
                       diloco=dict(alpha=0.0, outer_lr=1.0, outer_momentum=0.0, merge="keep_local", final_codec="int8",
                                   average="radial_directional")),
                  demo={"optim": {"lr": 3e-3}}, demo_long={"sync": {"diloco": {"average": "mean"}}},
                  color="#d62728", marker="o", notebook="two_site"),
    # routing statistics travel along the butterfly too (pairwise, no collective among all cells); tau = the merge
    # delay; delay-aware merges keep the steps taken during it, and a final complete butterfly deploys the cell mean.
    # The demo's inner lr is the protocol's winner (benchmarks/studies/protocol-demo.toml), and each fragment mixes 16 times per
    # window instead of 6 (ahead on the tuning split at every seed, for 2.6x the bytes: RESULTS, "The protocol at the
    # 1200-step demo")
    ExperimentRow("eight_cell", "butterfly mixing between eight cells", cells(8),
                  dict(strategy="butterfly", H=50, n_fragments=2, tau=2, codec="fp32", stochastic_rounding=True,
                       error_feedback=True, routing_sync=True, routing_sync_mode="butterfly",
                       butterfly=dict(exchanges_per_window=6, merge="delay_aware", final_average=True)),
                  demo={"optim": {"lr": 7.14e-3}, "sync": {"butterfly": {"exchanges_per_window": 16}}},
                  color="#2ca02c", marker="s", notebook="eight_cell"),
    # two sites of four cells (the eight cells' batches, so the baseline's global batch): each site's cells average
    # their replicas every H1 = 10 steps over the site's fast link, and the sites run two_site's streaming DiLoCo
    # (H2 = 50, int4 with error feedback, keep_local, int8 final flush) over the WAN through a hierarchical all-reduce
    # (sync/hierarchical.py). Untuned: two_site's lr and outer step; the plain mean (the hierarchical all-reduce sums).
    # Not in the default comparison until it is tuned and scored like the others (benchmarks/studies/hierarchical-h1.toml)
    ExperimentRow("hierarchical", "two sites of four cells: site syncs every H1, DiLoCo across the WAN every H2", cells(8),
                  dict(strategy="hierarchical", H=50, n_fragments=2, tau=1, codec="int4", stochastic_rounding=True,
                       error_feedback=True, routing_sync=True,
                       diloco=dict(alpha=0.0, outer_lr=1.0, outer_momentum=0.0, merge="keep_local", final_codec="int8"),
                       hierarchical=dict(cells_per_site=4, site_every=10, site_mode="mean", site_link="intra-dc")),
                  demo={"optim": {"lr": 3e-3}},
                  color="#ff7f0e", marker="v", notebook="hierarchical", compare=False, scaling=False),
    # a ground station's island and four satellites of a ring of nine (orbital/settings.py: islands, time compression, tokens),
    # decoupled DiLoCo since eclipses throttle the satellites to different paces; two_site's sync settings, the
    # synchroniser's grace about one demo tick, and an outer gradient that waited for a pass past its merge carried
    # into the fragment's next one; link.orbit.isl=true relays over inter-satellite links (docs/methods.md)
    ExperimentRow("orbital", "decoupled DiLoCo between a ground station and four satellites",
                  orbital.station_and_satellites,
                  dict(strategy="diloco", mode="decoupled", H=50, n_fragments=2, tau=1, codec="int4", quorum=1,
                       grace_s=0.05, stochastic_rounding=True, error_feedback=True, routing_sync=False,
                       diloco=dict(alpha=0.0, outer_lr=1.0, outer_momentum=0.0, final_codec="int8"),
                       decoupled=dict(late="carry")),
                  settings={"link": dict(LINK_PRESETS[orbital.LINK], preset=orbital.LINK,
                                         orbit=orbital.orbit_section(orbital.SMOKE_COMPRESSION))},
                  demo={"optim": {"lr": 3e-3},
                        "link": {"orbit": {"time_compression": orbital.DEMO_COMPRESSION}}},
                  color="#9467bd", marker="^", notebook="orbital", scaling=False),
)
EXPERIMENT_TABLE: dict[str, ExperimentRow] = {r.name: r for r in _TABLE}


class TableNames(Sequence[str]):
    """The names of the table's rows that ``keep`` selects, read when used: a row registered after import is in
    every list made from it (``in``, iteration, ``len``, indexing, ``"|".join``)."""

    def __init__(self, keep: Callable[[ExperimentRow], bool] = lambda row: True) -> None:
        self._keep = keep

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, row in EXPERIMENT_TABLE.items() if self._keep(row))

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # its value changes as rows register

    def __repr__(self) -> str:
        return repr(self._names())


EXPERIMENTS = TableNames()  # every registered experiment (the CLI's choices)
SCALING_EXPERIMENTS = TableNames(lambda row: row.scaling)  # the scaling study's default
# the presets (``presets.py`` holds what each sets): a config's ``preset`` is one of them, so it can name a folder
PRESETS: tuple[str, ...] = ("smoke", "demo", "demo-long", "gpu-small", "gpu")
GPU_PRESETS: tuple[str, ...] = ("gpu-small", "gpu")
DEMO_PRESETS: tuple[str, ...] = ("demo", "demo-long")  # the CPU demo's model and settings, at their own lengths


def experiment_row(name: str) -> ExperimentRow:
    """The row of ``name``; a ConfigError naming the known experiments if there is none."""
    if name not in EXPERIMENT_TABLE:
        raise ConfigError(f"experiment: must be one of {'|'.join(EXPERIMENT_TABLE)} (got {name!r})")
    return EXPERIMENT_TABLE[name]


def register_experiment(row: ExperimentRow) -> None:
    """Add an experiment (a ValueError if the name is taken); ``unregister_experiment`` takes it away again."""
    if row.name in EXPERIMENT_TABLE:
        raise ValueError(f"experiment {row.name!r} is already registered")
    EXPERIMENT_TABLE[row.name] = row


def unregister_experiment(name: str) -> None:
    EXPERIMENT_TABLE.pop(name, None)


def is_reference(name: str) -> bool:
    """Is ``name`` the synchronous reference experiment (an unknown name is not)?"""
    row = EXPERIMENT_TABLE.get(name)
    return row is not None and row.reference
