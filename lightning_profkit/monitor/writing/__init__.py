"""What writes a window's trace: where it goes (output), the writer thread, the fit's finalizing process
(its handle, process, and what it runs, child), and retention of the newest windows."""
