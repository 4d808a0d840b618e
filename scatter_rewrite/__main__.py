"""``python -m scatter_rewrite``: the ``scatter-rewrite`` command."""

from scatter_rewrite.cli import main

__all__: list[str] = []  # a script, nobody's import

if __name__ == "__main__":  # (imported, e.g. by the test of every module's interface, it runs nothing)
    main()
