"""The analysis side: reading torch.profiler (Kineto) traces and computing their figures. It imports neither
Lightning, torch nor the training side (:mod:`lightning_profkit.monitor`)."""
