"""The phases and helpers of bench/e2e.py (run that script)."""
