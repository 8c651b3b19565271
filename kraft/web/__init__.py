"""``kraft web``: a console for the cluster in the browser (docs/web.md). Server-rendered pages
(Starlette and Jinja2, no JavaScript build), each asking the cluster through the clients the
tools use: ``cluster.py`` holds those connections, one module per page reads what it shows."""
