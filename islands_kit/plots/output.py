"""Figures out of the process: ``save(fig, path)`` writes a PNG; ``show(fig, path)`` saves it and, inside
IPython/Jupyter, displays it."""
from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure


def save(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG (parent folders created); returns the path. The saved area is the drawing's own
    extent (``bbox_inches="tight"``): a title, label or key that reaches past the figure's edge is kept, not cut."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi, format="png", bbox_inches="tight", pad_inches=0.1)
    return p


def show(fig: Figure, path: str | Path | None = None) -> None:
    """Save ``fig`` to ``path`` (when given) and display it inline in IPython/Jupyter (nothing to display elsewhere).

    Returns None so that a notebook cell ending in ``plots.show(...)`` prints nothing but the figure."""
    out = save(fig, path) if path is not None else None
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return
    if get_ipython() is None:
        return
    if out is not None:
        display(Image(filename=str(out)))
    else:
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", pad_inches=0.1)
        display(Image(data=buf.getvalue()))
