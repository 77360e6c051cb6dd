"""specbook."""
