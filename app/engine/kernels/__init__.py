"""Native kernels: C sources beside their ctypes face, built at install (setup.py)."""
