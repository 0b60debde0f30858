"""Where the kit's notebooks and data cards are: inside an installed wheel, or in the repository checkout.

A wheel carries ``notebooks/*.ipynb`` and ``data_cards/*.md`` under ``islands_kit/_resources/`` (copied there at build
time by ``setup.py``); a checkout (or an editable install) has them in the top-level folders of the repository.
"""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(kind: str) -> Path:
    """``notebooks`` or ``data_cards``: the installed copy when there is one, else the checkout's folder."""
    if kind not in ("notebooks", "data_cards"):
        raise ValueError(f"resource_dir: unknown kind {kind!r} (valid: notebooks, data_cards)")
    packaged = _PACKAGE / "_resources" / kind
    return packaged if packaged.is_dir() else _PACKAGE.parent / kind


def data_card_path(corpus: str) -> Path:
    """The data card of a registered corpus (``data_cards/<corpus>.md``)."""
    p = resource_dir("data_cards") / f"{corpus}.md"
    if not p.is_file():
        raise FileNotFoundError(f"no data card for corpus {corpus!r} in {p.parent}")
    return p


def checkout_file(path: str | Path) -> Path:
    """``path`` as given when absolute, else relative to the repository checkout (e.g. ``benchmarks/...``, which a
    wheel does not carry: the caller checks that it exists)."""
    p = Path(path)
    return p if p.is_absolute() else _PACKAGE.parent / p
