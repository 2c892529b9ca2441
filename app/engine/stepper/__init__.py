"""The stepper: sessions and replay, one recorded step at a time."""
