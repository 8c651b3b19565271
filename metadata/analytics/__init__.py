"""Spark analytics over metadata snapshots and metadata log directories.

``source`` is a PySpark data source (``spark.read.format("kraft")``) exposing a snapshot or a
log directory as tables; ``health`` computes a cluster health report from those tables with
Spark; ``plain`` computes the same figures in one Python process (the benchmark's baseline
and the tests' cross-check); ``report`` and ``cli`` are the command line. See
``docs/analytics.md``.

Nothing here is imported eagerly: PySpark and its JVM are only loaded when asked for, so
the ``kraft`` CLI stays quick to start.
"""
