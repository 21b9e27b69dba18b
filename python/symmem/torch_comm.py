"""Kept for callers of the first release: the communicator now lives in symmem.torch."""
from .torch import SymmemCommunicator  # noqa: F401

__all__ = ["SymmemCommunicator"]
