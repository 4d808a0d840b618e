"""The runners: each runs an ONNX model in one runtime, as a script in a python that has that
runtime (the user's own, or another venv's), called by :mod:`scatter_rewrite.targets.runtimes`.
They import no module of this project but ``_runner_io`` (by file name: the runtime's venv need
not have the project installed), and their runtime only inside their functions.
"""

__all__: list[str] = []
