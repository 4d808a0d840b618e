"""The exact forms, one file per form, named after its step (``softmax_13_11.py``: Softmax-13 ->
Softmax-11; ``trilu_14.py``: Trilu-14, which has no older version). Each registers itself where it
is defined with :func:`scatter_rewrite.opset.registry.register_form`, its key and metadata beside
the function; :func:`scatter_rewrite.opset.registry.load_forms` imports every module here.
Adding a form is adding a file here: a registered form makes its step ``REWRITE``
(:func:`scatter_rewrite.opset.steps.step` asks the registry first; no row in the steps table). Forms build their nodes with :class:`scatter_rewrite.graph.NodeBuilder`."""

__all__: list[str] = []  # (the forms register themselves: nothing to import from here)
