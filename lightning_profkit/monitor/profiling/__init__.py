"""Which steps are recorded (the selections) and their torch.profiler sessions (the window runners)."""
