"""NemoGuard Topic Control: ``topic safety check input $model=<type>``."""
