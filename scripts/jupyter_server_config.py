"""`make lab`'s Jupyter server settings (``jupyter lab --config=scripts/jupyter_server_config.py``): each notebook
listed once.

Every notebook has a readable jupytext source beside it (``notebooks/NAME.py`` next to ``NAME.ipynb``); JupyterLab
would list both, and opening the script is rarely what a reader wants. The contents manager below leaves a ``.py``
out of a folder's listing when an ``.ipynb`` of the same name sits beside it. Only listings change: the file is still
there (``notebooks/NAME.py`` opens by path), and a lone ``.py`` (any module of ``islands_kit/``) is listed as usual.
``ContentsManager.hide_globs`` cannot say this: it matches a name alone, and would hide every ``tour.py``.
"""
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager


def paired_scripts(names: set[str]) -> set[str]:
    """The ``.py`` names among ``names`` that have an ``.ipynb`` of the same stem beside them."""
    return {n for n in names if n.endswith(".py") and n[: -len(".py")] + ".ipynb" in names}


class NotebooksOnce(AsyncLargeFileManager):
    """The server's default contents manager, less each notebook's paired jupytext script in directory listings."""

    async def get(self, path, content=True, type=None, format=None, require_hash=False):  # type: ignore[no-untyped-def]
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if model.get("type") == "directory" and isinstance(model.get("content"), list):
            hide = paired_scripts({m["name"] for m in model["content"]})
            model["content"] = [m for m in model["content"] if m["name"] not in hide]
        return model


c = get_config()  # type: ignore[name-defined]  # noqa: F821 - traitlets defines get_config for config files
c.ServerApp.contents_manager_class = NotebooksOnce
