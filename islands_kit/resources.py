"""Where the kit's notebooks, data cards and measured frontiers are: inside an installed wheel, or in the checkout.

A wheel carries ``notebooks/*.ipynb``, ``data_cards/*.md`` and ``benchmarks/frontier-*.json`` (the points the two_site
and eight_cell notebooks draw) under ``islands_kit/_resources/`` (copied there at build time by ``setup.py``); a
checkout (or an editable install) has them in the top-level folders of the repository.
"""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent  # islands_kit/
KINDS = ("notebooks", "data_cards", "benchmarks")  # setup.py's RESOURCES: what a wheel carries of each folder


def resource_dir(kind: str) -> Path:
    """``notebooks``, ``data_cards`` or ``benchmarks``: the installed copy when there is one, else the checkout's
    folder."""
    if kind not in KINDS:
        raise ValueError(f"resource_dir: unknown kind {kind!r} (valid: {', '.join(KINDS)})")
    packaged = _PACKAGE / "_resources" / kind
    return packaged if packaged.is_dir() else _PACKAGE.parent / kind


def data_card_path(corpus: str) -> Path:
    """The data card of a registered corpus (``data_cards/<corpus>.md``)."""
    p = resource_dir("data_cards") / f"{corpus}.md"
    if not p.is_file():
        raise FileNotFoundError(f"no data card for corpus {corpus!r} in {p.parent}")
    return p


def resource_file(path: str | Path) -> Path:
    """``path`` as given when absolute; a relative one under a resource folder (``benchmarks/frontier-demo.json``)
    from the installed copy when there is one, else relative to the checkout. The caller checks that it exists (a
    wheel carries only what setup.py packages)."""
    p = Path(path)
    if p.is_absolute():
        return p
    if len(p.parts) > 1 and p.parts[0] in KINDS:
        return resource_dir(p.parts[0]).joinpath(*p.parts[1:])
    return _PACKAGE.parent / p
