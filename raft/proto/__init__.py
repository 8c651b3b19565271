"""The Raft library's own wire format (``raft.proto``: peer messages and the admin service),
kept apart from the controller's and brokers' protos so that the library installs alone. The
``*_pb2*.py`` modules are generated (Makefile ``protos``, setup.py) and never edited."""
