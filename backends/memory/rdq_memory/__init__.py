"""The ``memory`` backend: the reference store (:mod:`rdq_core.memory`) as a kit plugin."""
