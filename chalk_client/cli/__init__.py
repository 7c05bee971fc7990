"""The ``chalk`` command and its helpers.

``main`` is the entry point. Each command's module is imported only when it
runs, so that ``chalk score`` without a cluster never loads redis-py or kombu:

- ``main``: the parser, ``chalk score`` and the dispatch to the other commands;
- ``progress``: the progress line, the running counts and the closing summary;
- ``selection``: ``--only``, ``--limit`` and ``--rescore``;
- ``cluster``: ``chalk worker``, ``chalk flower``, ``chalk status`` and
  ``chalk score`` on a cluster (``rescore``, ``celery_args``);
- ``ops``: ``chalk health``, ``purge``, ``retry`` and ``eta`` (``health``,
  ``purge``, ``retry``, ``eta``);
- ``report``: ``chalk report``;
- ``acl``: ``chalk acl`` (the Redis users of ``chalk_client.cluster.acl``).
"""

from chalk_client.cli.main import main

__all__ = ["main"]
