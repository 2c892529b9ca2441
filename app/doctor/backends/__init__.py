"""One module per serving stack. A stack whose rules are reproduced rather than run keeps them as
data in its module, with the version of the source they come from; llguidance is run for real."""
