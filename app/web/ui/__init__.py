"""The playground page and its HTMX fragments (HTML from ``templates/`` only)."""
