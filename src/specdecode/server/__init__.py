"""The OpenAI-compatible server (`specdecode serve`); needs the `serve` extra."""

from .app import create_app

__all__ = ["create_app"]
