"""Machinery, not business: how tasks run and how live events travel on each layout."""
