"""``python -m scatter_rewrite``: the ``scatter-rewrite`` command."""

from scatter_rewrite.cli import main

main()
