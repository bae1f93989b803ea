"""Writing a fit's traces: where they go (output), the writer thread, the finalizing process and what it runs
(process, child), and retention of the newest windows."""
