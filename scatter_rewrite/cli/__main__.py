"""``python -m scatter_rewrite.cli``: the ``scatter-rewrite`` command."""

from scatter_rewrite.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
