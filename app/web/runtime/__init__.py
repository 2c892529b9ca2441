"""The running app: its state, dependencies, worker pools, live sessions, stop, metrics and
quotas."""
