"""``python -m scatter_rewrite.cli``: the ``scatter-rewrite`` command."""

from scatter_rewrite.cli import main

if __name__ == "__main__":
    main()
