"""The ``gridcomm`` command: info, demo, run, the dwarfs (run through ``gridcomm run APP``) and bench."""

from .main import app, main

__all__ = ["app", "main"]
