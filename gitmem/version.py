"""The version of gitmem."""

__version__ = "0.1.0"
