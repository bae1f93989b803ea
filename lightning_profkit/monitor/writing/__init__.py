"""What writes a window's trace: where it goes (output), the writer thread, the fit's finalizing process
(its handle, process, and what it runs, child), and retention of the newest windows."""

SUMMARIZED = 50  # the newest training windows of a fit that the end-of-fit line covers
