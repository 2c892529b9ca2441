"""The use cases the JSON API, the page and the CLI share; no HTTP framework here."""
