"""``python -m metadata.shell``: the same as ``metadata-shell``."""
from .main import main

main()
