"""islands_kit: low-communication MoE training across compute islands."""
__version__ = "0.1.0"

# the built-in sync strategies' specs (torch-free): a config of any of them validates from here on
from islands_kit import sync as _sync  # noqa: E402,F401
