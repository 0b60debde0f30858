"""Execute the kit's notebooks with papermill, and the helpers the notebooks call (they hold no core logic).

``run_notebook("two_site", {"preset": "smoke"}, "runs/x")`` executes ``notebooks/two_site.ipynb`` with those values
injected after its ``parameters`` cell and keeps the executed copy in the output folder.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from islands_kit.config import ConfigError

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def notebook_path(name: str) -> Path:
    p = NOTEBOOK_DIR / f"{name}.ipynb"
    if not p.exists():
        valid = sorted(q.stem for q in NOTEBOOK_DIR.glob("*.ipynb"))
        raise ConfigError(f"notebook: unknown notebook {name!r} (valid: {', '.join(valid)})")
    return p


def run_notebook(name: str, params: dict[str, Any] | None = None, out_dir: str | Path | None = None,
                 kernel_name: str = "python3") -> Path:
    """Execute notebooks/NAME.ipynb with papermill; returns the executed notebook's path (OUT/NAME.ipynb).

    Parameters not declared in the notebook's ``parameters`` cell are refused before anything runs."""
    import papermill as pm

    src = notebook_path(name)
    params = dict(params or {})
    declared = pm.inspect_notebook(str(src))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ConfigError(f"notebook {name}: unknown parameter {unknown[0]!r} (valid: {', '.join(sorted(declared))})")
    out = Path(out_dir) if out_dir else Path("runs") / f"notebook-{name}"
    out.mkdir(parents=True, exist_ok=True)
    params.setdefault("out_dir", str(out.resolve())) if "out_dir" in declared else None
    os.environ.setdefault("WANDB_MODE", "offline")
    dst = out / f"{name}.ipynb"
    pm.execute_notebook(str(src), str(dst), parameters=params, kernel_name=kernel_name, cwd=str(out.resolve()),
                        progress_bar=False)
    return dst
