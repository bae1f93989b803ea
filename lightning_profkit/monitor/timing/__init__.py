"""What times the fit: the fetch timer on Lightning's loops (data wait and step times), the GPU's
utilization through NVML, and the per-epoch figures and own cost made from them."""
