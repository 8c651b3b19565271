"""The metadata shell: cluster metadata browsed as a file-system tree (``metadata-shell``).

``source`` says where the metadata comes from, ``tree`` lays an image out as directories and
files, ``paths`` resolves and globs paths, ``commands`` are what the user types, ``changes``
traces a path through the record history, ``interactive`` and ``main`` are the front ends.
"""

import os as _os

# A tool reports connection failures in its own one line: gRPC's core stays quiet (it reads
# this before the first import of grpc; see kraft/__init__.py).
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
