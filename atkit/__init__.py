"""The notebook's infrastructure: what a real run needs but the Transformer does not.

`annotated_transformer.md` teaches the model; this package holds the machinery around it
(download checks, files written atomically, checkpoints and resumption, thread policy,
the command line and the launchers, the interactive attention view), so that the
notebook's reading path stays on the paper. The notebook imports it like any library;
tests import the same modules.
"""
