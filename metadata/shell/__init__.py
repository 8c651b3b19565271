"""The metadata shell: cluster metadata browsed as a file-system tree (``metadata-shell``).

``source`` says where the metadata comes from, ``tree`` lays an image out as directories and
files, ``paths`` resolves and globs paths, ``commands`` are what the user types, ``changes``
traces a path through the record history, ``interactive`` and ``main`` are the front ends.
"""
