"""``python -m kraft.cli``: the ``kraft`` command, as the installed script runs it."""
from kraft.cli import main

main()
