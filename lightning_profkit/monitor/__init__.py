"""The training side of PerformanceMonitor: plain objects the callback's hooks hand the trainer's facts to (see
docs/how-it-works.md). Only the finalizing child process and the end-of-fit summary read traces."""
