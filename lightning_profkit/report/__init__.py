"""``profkit report``: one self-contained HTML page of a run (its epochs, windows, alerts and ranks)."""
