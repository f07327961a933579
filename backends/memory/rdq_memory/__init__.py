"""The ``memory`` backend: the reference store (:mod:`rdq_core.memory`) as a kit plugin.

Its storage half is :class:`rdq_core.memory.MemoryStore` itself (the core imports nothing
of the kit); this package is only the plugin half (:mod:`rdq_memory.plugin`), which may
import :mod:`rdq_compliance.provision`.
"""
