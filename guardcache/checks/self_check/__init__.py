"""Self checks (``self check input/output``) and Llama Guard rails, read with ``is_content_safe``."""
