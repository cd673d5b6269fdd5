"""``python -m gitmem``: the same as the ``gitmem`` command."""

from .cli.main import main

main()
