"""rdq's MongoDB backend: one database per namespace, one document per task with its
attempt history embedded, every claim a guarded single-document atomic write, every time
the server's ``$$NOW``.

pymongo 4. Registered as the ``mongo`` entry point of ``rdq.backends``
(:mod:`rdq_mongo.plugin`). Built for MongoDB 6.0 and newer (a replica set; the claim
names the queue in every filter so that a collection sharded by queue routes it), and
exercised here over the wire against SecantusDB, a MongoDB-wire-protocol server that is
*not* MongoDB (:mod:`rdq_mongo.flavour` tells them apart and names the server honestly).

**Two halves, one import rule.** The *storage half* — :mod:`~rdq_mongo.storage`
(:class:`MongoStorage`) and what it needs: ``connection``, ``documents``, ``updates``,
``schema``, ``flavour``, ``errors`` — imports only :mod:`rdq_core`, pymongo/bson and its
own storage modules, never :mod:`rdq_compliance`: it is usable without the kit. The
*plugin half* — ``plugin`` (the ``Backend``), ``server`` (:class:`MongoServer`), its rungs
``local`` and ``container``, and their ``options`` — may import
:mod:`rdq_compliance.provision` and the storage half, never the other way round.
This package's ``__init__`` imports neither half.
"""
