"""The composition layer: what runs processes and mounts tools, above both ``metadata`` (the
controller quorum) and ``brokerd`` (the brokers). ``kraft.cli`` is the ``kraft`` command
(``server-start`` for either role, topics, quorum, cluster, console producer and consumer,
analytics, dump-log); ``kraft.dev_quorum`` runs a local quorum of processes; ``kraft.demo``
is the main job. Nothing below imports it (tests/test_layering.py)."""
