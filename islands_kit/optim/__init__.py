"""Inner optimizers: Shampoo (Distributed Shampoo variant), its block layout and its matrix functions; Muon."""
from islands_kit.optim.matrix_functions import inverse_roots_or_previous, matrix_inverse_root
from islands_kit.optim.muon import Muon
from islands_kit.optim.shampoo import GRAFTING_TYPES, Shampoo

__all__ = ["Muon", "Shampoo", "GRAFTING_TYPES", "matrix_inverse_root", "inverse_roots_or_previous"]
