"""The exact reduction lowerings the passes share: :mod:`.segment_reduce` (sort the row keys, a
segmented tree reduction, one ScatterND write-back: ``lower``, ``repair``) and
:mod:`.network_reduce` (its TensorRT-safe form, a sorting network in fixed-shape Loops:
``tensorrt``)."""

__all__: list[str] = []
