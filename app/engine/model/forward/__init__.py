"""Forward engines: what computes the raw next-token distribution for a session's prefix.

The stepper calls only :class:`~app.engine.model.forward.base.ForwardEngine`; the local torch
model (``local.py``) and a remote server's (``remote.py``) implement it. Nothing is imported
here, so that reading ``base`` loads no torch.
"""
