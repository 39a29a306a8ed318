"""aisim: an AI inference service simulator (`docs/architecture.md` draws its layers and the life of a request)."""

__version__ = "0.1.0"
