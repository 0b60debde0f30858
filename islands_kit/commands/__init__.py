"""The command line's handlers around ``cli.py`` (which keeps ``run`` and ``config``): the tools ``notebook``,
``compare``, ``sample``, ``corpora`` and ``env`` (``subcommands.py``), ``run --dry-run`` (``dry_run.py``) and the
machine report of ``islands-kit env`` (``envinfo.py``).

The top layer under ``cli.py``: nothing else in the kit imports from here. Import from the modules; this file
re-exports nothing."""
