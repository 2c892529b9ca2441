"""The request bodies, their parts and the page's forms: validated the same for the API and the
page."""
