"""aisim: an AI inference service simulator (see DESIGN.md for the layers and invariants)."""

__version__ = "0.1.0"
