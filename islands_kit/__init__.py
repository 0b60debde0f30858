"""islands_kit: low-communication MoE training across compute islands."""
__version__ = "0.1.0"
