"""The training side of PerformanceMonitor: plain objects the callback's hooks hand the trainer's facts to (see the
README's "How it works"). Only the finalizing child process and the end-of-fit summary read traces."""
