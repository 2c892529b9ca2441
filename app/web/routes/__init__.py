"""The JSON API, one router per resource (the contract: ``shared/API.md``)."""
