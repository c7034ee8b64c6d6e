"""NemoGuard Content Safety: the input and output rails and their answer parsers."""
