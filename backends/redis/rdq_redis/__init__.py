"""rdq's Redis backend: one key prefix per namespace, every state change one Lua script,
every time the server's ``TIME``; a single server or a Redis Cluster.

redis-py (hiredis when installed). The storage half (:mod:`rdq_redis.storage` and the
modules it uses) imports no part of the kit; :mod:`rdq_redis.plugin` is the plugin half,
registered as the ``redis`` entry point of ``rdq.backends``. Importing this package loads
only the storage half.
"""

from rdq_redis.storage import RedisStorage

__all__ = ["RedisStorage"]
